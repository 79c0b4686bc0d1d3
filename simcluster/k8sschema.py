"""The real Kubernetes 1.32 schemas of the built-in kinds (`k8s_openapi.json`, package data).

Vendored from the upstream definitions by `tools/k8s_schema_vendor.py`: descriptions (what
`kubectl explain` prints), `x-kubernetes-list-type` / `-list-map-keys` (what server-side apply's
field sets and merges follow) and patch strategies (what kubectl's client-side apply computes its
strategic merge patches from). OpenAPI v3 form; `$ref`s point at `#/components/schemas/`.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

Schema = dict[str, Any]
REF = "#/components/schemas/"
_FILE = Path(__file__).with_name("k8s_openapi.json")


@functools.cache
def definitions() -> dict[str, Schema]:
    """Every vendored schema by its OpenAPI name (`io.k8s.api.core.v1.Pod`); read once, never changed."""
    return json.loads(_FILE.read_text())


def closure(names: list[str]) -> dict[str, Schema]:
    """The named schemas and every schema they reach through `$ref`."""
    defs = definitions()
    out: dict[str, Schema] = {}
    todo = [n for n in names if n in defs]
    while todo:
        name = todo.pop()
        if name in out:
            continue
        out[name] = defs[name]
        todo.extend(r for r in _refs(defs[name]) if r not in out)
    return out


def _refs(node: Any) -> list[str]:
    found: list[str] = []
    stack = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, dict):
            ref = cur.get("$ref")
            if isinstance(ref, str) and ref.startswith(REF):
                found.append(ref[len(REF):])
            stack.extend(cur.values())
        elif isinstance(cur, list):
            stack.extend(cur)
    return found


def resolve(node: Any) -> Any:
    """A property's schema with its `$ref` / `allOf: [$ref]` followed (one level)."""
    if node is None:
        return None
    ref = node.get("$ref")
    if ref is None and len(node.get("allOf") or ()) == 1:
        ref = node["allOf"][0].get("$ref")
    if isinstance(ref, str) and ref.startswith(REF):
        return definitions().get(ref[len(REF):])
    return node


def unknown_fields(name: str, obj: Any) -> list[str]:
    """Paths of the fields of `obj` its schema `name` does not declare, as the apiserver's strict
    decoder names them (`spec.ports[0].prot`); below `x-kubernetes-preserve-unknown-fields`,
    int-or-string and untyped values nothing is checked."""
    out: list[str] = []
    root = definitions().get(name)
    if root is not None:
        _unknown(root, obj, "", out)
    return out


def _unknown(schema: Schema, value: Any, path: str, out: list[str]) -> None:
    schema = resolve(schema) or {}
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            here = f"{path}.{key}" if path else key
            if isinstance(props, dict) and key in props:
                _unknown(props[key], sub, here, out)
            elif isinstance(extra, dict):
                _unknown(extra, sub, f"{path}[{key}]" if path else key, out)
            elif isinstance(props, dict):
                out.append(here)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _unknown(schema["items"], item, f"{path}[{i}]", out)
