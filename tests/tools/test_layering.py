"""The packages point one way: the roles sit below the command line (`tools`, `bench`); the
engine imports no other role; `simcluster` (the simulated control plane) imports no role and no
role imports it (only tests and `tools` may); `streams` and `shim_k8s` meet only in `kube`, the
client they share, which itself imports no role. `nodeagent` (sim-cluster's kubelet half against any API server) sits
beside `simcluster`: it uses sim-cluster's kubelet pieces and `kube`'s client, so it may import
both, but `simcluster` may not import it (that would import `kube` into sim-cluster) and no role
does. `si`, the scheduler interface, is the contract
between the engine and the shim: every role may import it, it imports nothing of ours but
`common`, and neither the shim nor the Streams controller imports the engine."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
ABOVE = {"tools", "bench"}
ROLES = {"engine", "web", "shim_k8s", "streams", "export"}
PACKAGES = ABOVE | ROLES | {"si", "kube", "simcluster", "nodeagent", "shm", "common"}
FORBIDDEN = {
    "engine": ABOVE | {"web", "shim_k8s", "streams", "simcluster", "nodeagent", "kube", "export"},
    "web": ABOVE | {"shim_k8s", "streams", "simcluster", "nodeagent", "kube"},
    "shim_k8s": ABOVE | {"engine", "web", "streams", "simcluster", "nodeagent", "export"},
    "streams": ABOVE | {"engine", "web", "shim_k8s", "simcluster", "nodeagent", "export"},
    "si": PACKAGES - {"si", "common"},
    "kube": ABOVE | ROLES | {"simcluster", "nodeagent", "si"},
    "simcluster": ABOVE | ROLES | {"kube", "nodeagent", "shm", "si"},
    # the kubelet half: sim-cluster's kubelet pieces over kube's client; never a role
    "nodeagent": ABOVE | ROLES | {"shm", "si"},
    "export": ABOVE | {"shim_k8s", "streams", "simcluster", "nodeagent", "kube"},
    "shm": ABOVE | ROLES | {"simcluster", "nodeagent", "kube", "common", "si"},
    "common": ABOVE | ROLES | {"simcluster", "nodeagent", "kube", "shm", "si"},
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


def _sibling_imports(path: pathlib.Path, package: str) -> set[str]:
    """The modules of `package` that a module imports anywhere: at the top, under
    TYPE_CHECKING or inside a function (a lazy import is a dependency too)."""
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == package:
                found.update(alias.name for alias in node.names)
            elif node.module.startswith(package + "."):
                found.add(node.module[len(package) + 1:].split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(alias.name[len(package) + 1:].split(".")[0] for alias in node.names
                         if alias.name.startswith(package + "."))
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of the graph (the modules in order, the first repeated), or None."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return None
        for target in sorted(graph.get(module, ())):
            found = visit(target, path + [module])
            if found:
                return found
        done.add(module)
        return None

    for module in sorted(graph):
        found = visit(module, [])
        if found:
            return found
    return None


@pytest.mark.parametrize("package", ["engine.partition", "si"])
def test_modules_of_a_package_import_each_other_without_a_cycle(package):
    """A module calls down, never back up: the partition's map says which module owns what,
    and a circle of imports would make that order meaningless."""
    folder = ROOT.joinpath(*package.split("."))
    modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    graph = {p.stem: _sibling_imports(p, package) & modules for p in folder.glob("*.py")
             if p.stem != "__init__"}
    assert _cycle(graph) is None


def test_the_cycle_finder_finds_a_lazy_import_cycle(tmp_path):
    """The check above sees imports inside functions and under TYPE_CHECKING."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("def f():\n    from pkg import b\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from pkg.a import f\n")
    graph = {p.stem: _sibling_imports(p, "pkg") for p in pkg.glob("*.py")}
    assert _cycle(graph) == ["a", "b", "a"]
