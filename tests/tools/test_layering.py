"""The packages point one way: the roles sit below the command line (`tools`, `bench`); the
engine imports no other role; `simcluster` (the simulated control plane) imports no role and no
role imports it (only tests and `tools` may); `streams` and `shim_k8s` meet only in `kube`, the
client they share, which itself imports no role. `si`, the scheduler interface, is the contract
between the engine and the shim: every role may import it, it imports nothing of ours but
`common`, and neither the shim nor the Streams controller imports the engine."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
ABOVE = {"tools", "bench"}
ROLES = {"engine", "web", "shim_k8s", "streams", "export"}
PACKAGES = ABOVE | ROLES | {"si", "kube", "simcluster", "shm", "common"}
FORBIDDEN = {
    "engine": ABOVE | {"web", "shim_k8s", "streams", "simcluster", "kube", "export"},
    "web": ABOVE | {"shim_k8s", "streams", "simcluster", "kube"},
    "shim_k8s": ABOVE | {"engine", "web", "streams", "simcluster", "export"},
    "streams": ABOVE | {"engine", "web", "shim_k8s", "simcluster", "export"},
    "si": PACKAGES - {"si", "common"},
    "kube": ABOVE | ROLES | {"simcluster", "si"},
    "simcluster": ABOVE | ROLES | {"kube", "shm", "si"},
    "export": ABOVE | {"shim_k8s", "streams", "simcluster", "kube"},
    "shm": ABOVE | ROLES | {"simcluster", "kube", "common", "si"},
    "common": ABOVE | ROLES | {"simcluster", "kube", "shm", "si"},
}


def _imported_packages(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_does_not_import_the_layers_above(package):
    wrong = []
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = _imported_packages(path) & FORBIDDEN[package]
        if bad:
            wrong.append(f"{path.relative_to(ROOT)}: {', '.join(sorted(bad))}")
    assert wrong == []


def test_every_package_opens_with_a_map_of_its_modules():
    for init in sorted(ROOT.glob("*/**/__init__.py")):
        if ".venv" in init.parts or "tests" in init.parts:
            continue
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        modules = [p.stem for p in init.parent.glob("*.py")
                   if p.stem != "__init__" and not p.stem.startswith("_")]
        missing = [m for m in modules if m not in doc]
        assert not missing, f"{init.relative_to(ROOT)} does not map {missing}"
