"""The roles sit below the command line: engine, web, shim_k8s, shm and common never import
`tools` (or `bench`), and the engine imports no other role."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FORBIDDEN = {
    "engine": {"tools", "bench", "web", "shim_k8s"},
    "web": {"tools", "bench", "shim_k8s"},
    "shim_k8s": {"tools", "bench", "web"},
    "shm": {"tools", "bench", "engine", "web", "shim_k8s", "common"},
    "common": {"tools", "bench", "engine", "web", "shim_k8s", "shm"},
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
