"""Regenerate `simcluster/k8s_openapi.json`: the Kubernetes 1.32 schemas sim-cluster serves.

The schemas are the real ones (descriptions, list types, map keys, patch strategies) as published
for Kubernetes 1.32, taken from the `kubernetes-validate` wheel (Apache-2.0), which ships the
upstream definitions as JSON Schema. They are turned back into OpenAPI v3 component schemas
(`type: [x, "null"]` -> `type: x`, `$ref` with siblings -> `allOf: [$ref]` as the apiserver
writes them, int-or-string) and cut down to what the served kinds reach.

    pip download --no-deps kubernetes-validate==1.37.0 -d /tmp/kv && unzip -q /tmp/kv/*.whl -d /tmp/kv
    python -m tools.k8s_schema_vendor /tmp/kv/kubernetes_validate/kubernetes-json-schema/v1.32.0-local/_definitions.json

Kept out of the server (it never imports tools); the output file is package data.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "simcluster" / "k8s_openapi.json"
ROOTS = (
    "io.k8s.api.core.v1.Pod", "io.k8s.api.core.v1.Node", "io.k8s.api.core.v1.Namespace",
    "io.k8s.api.core.v1.ConfigMap", "io.k8s.api.core.v1.Secret", "io.k8s.api.core.v1.Event",
    "io.k8s.api.events.v1.Event", "io.k8s.api.core.v1.ServiceAccount", "io.k8s.api.core.v1.Service",
    "io.k8s.api.core.v1.Binding", "io.k8s.api.coordination.v1.Lease", "io.k8s.api.policy.v1.PodDisruptionBudget",
    "io.k8s.api.policy.v1.Eviction", "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
    "io.k8s.api.core.v1.Endpoints", "io.k8s.api.discovery.v1.EndpointSlice",
)
REF = "#/$defs/"


def _convert(node: Any) -> Any:
    if isinstance(node, list):
        return [_convert(x) for x in node]
    if not isinstance(node, dict):
        return node
    if node.get("oneOf") == [{"type": ["string", "null"]}, {"type": ["integer", "null"]}]:
        rest = {k: _convert(v) for k, v in node.items() if k != "oneOf"}
        return {**rest, "type": "string", "format": "int-or-string", "x-kubernetes-int-or-string": True}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "type" and isinstance(value, list):
            value = [t for t in value if t != "null"]
            out[key] = value[0] if len(value) == 1 else value
        elif key == "$ref":
            out[key] = "#/components/schemas/" + value.removeprefix(REF)
        elif key == "properties":
            out[key] = {name: _convert(prop) for name, prop in value.items()}
            for name in ("apiVersion", "kind"):
                out[key].get(name, {}).pop("enum", None)
        else:
            out[key] = _convert(value)
    if "$ref" in out and len(out) > 1:
        ref = out.pop("$ref")
        out = {"allOf": [{"$ref": ref}], **out}
    return out


def _refs(node: Any, found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(REF):
            found.add(ref.removeprefix(REF))
        for value in node.values():
            _refs(value, found)
    elif isinstance(node, list):
        for value in node:
            _refs(value, found)


def closure(defs: dict[str, Any]) -> list[str]:
    seen: set[str] = set()
    todo = list(ROOTS)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        found: set[str] = set()
        _refs(defs[name], found)
        todo.extend(found - seen)
    return sorted(seen)


def main(argv: list[str]) -> int:
    defs = json.loads(Path(argv[0]).read_text())["$defs"]
    schemas = {name: _convert(defs[name]) for name in closure(defs)}
    OUT.write_text(json.dumps(schemas, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"{OUT}: {len(schemas)} schemas, {OUT.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
