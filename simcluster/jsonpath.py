"""The simple JSONPath a CRD uses: printer columns (`.status.phase`, `.status.conditions[?(@.type=="Ready")]
.status`, `.spec.hosts[0]`, `.spec.tags[*]`) and scale paths (`.spec.width`, dotted only).

Why not a library: the apiserver accepts only this subset for CRDs, and its answers ("no result"
is an empty cell, a missing replicas path reads as 0) are easier to keep exact in a few lines.
"""

from __future__ import annotations

import json
import re
from typing import Any

_TOKEN = re.compile(r"""\.([A-Za-z0-9_$-]+)|\[(\d+|\*)\]|\[\?\(@\.([A-Za-z0-9_.-]+)\s*==\s*(?:"([^"]*)"|'([^']*)'|(\S+?))\)\]""")


class PathError(ValueError):
    """A path outside the supported subset (checked when a CRD is accepted)."""


def parse(path: str) -> list[tuple[str, Any]]:
    """`.a[0][?(@.k=="v")]` -> [("key","a"), ("index",0), ("filter",("k","v"))]; `{.a}` braces allowed."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    if not text.startswith("."):
        raise PathError(f"must be a simple json path starting with '.': {path!r}")
    steps: list[tuple[str, Any]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise PathError(f"unsupported json path {path!r} at {text[pos:]!r}")
        key, index, fkey, dq, sq, bare = m.groups()
        if key is not None:
            steps.append(("key", key))
        elif index is not None:
            steps.append(("all", None) if index == "*" else ("index", int(index)))
        else:
            steps.append(("filter", (fkey, dq if dq is not None else sq if sq is not None else bare)))
        pos = m.end()
    return steps


def _get_dotted(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def find(obj: Any, path: str) -> list[Any]:
    """Every value `path` selects in `obj` (empty when nothing matches)."""
    current = [obj]
    for kind, arg in parse(path):
        nxt: list[Any] = []
        for value in current:
            if kind == "key" and isinstance(value, dict) and arg in value:
                nxt.append(value[arg])
            elif kind == "index" and isinstance(value, list) and arg < len(value):
                nxt.append(value[arg])
            elif kind == "all" and isinstance(value, list):
                nxt.extend(value)
            elif kind == "filter" and isinstance(value, list):
                fkey, want = arg
                nxt.extend(v for v in value if _matches(_get_dotted(v, fkey), want))
        current = nxt
    return current


def _matches(value: Any, want: str) -> bool:
    if isinstance(value, str):
        return value == want
    return json.dumps(value) == want


def set_dotted(obj: dict[str, Any], path: str, value: Any) -> None:
    """Write `value` at a dotted path (`.spec.width`), creating objects on the way."""
    parts = path.strip(".").split(".")
    node = obj
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value
