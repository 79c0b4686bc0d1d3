"""Discovery and OpenAPI documents, built from a `resources.Registry` (built-ins and CRDs).

kubectl with its defaults needs: `/api`, `/apis` (it asks for aggregated discovery
`apidiscovery.k8s.io/v2` but accepts the plain `APIVersions`/`APIGroupList` when the response's
Content-Type is plain `application/json`), `/api/v1` and `/apis/events.k8s.io/v1` resource lists,
and, for `kubectl create -f` with the default `--validate=strict`, the OpenAPI v3 documents: kubectl
looks up the PATCH operation of the object's group/version/kind and, when it declares the
`fieldValidation` query parameter, leaves validation to the server (`?fieldValidation=Strict`).
`/openapi/v2` is served too (JSON, or a minimal protobuf `openapi_v2.Document` when asked for
protobuf, as kubectl's discovery client does).

A CRD's resource is described by its own `openAPIV3Schema` (what `kubectl explain` walks), under
the name the apiextensions-apiserver gives it (`com.ibm.streams.v1.Job`); its `/scale` sub-resource
is listed with group `autoscaling`, version `v1`, kind `Scale`, which kubectl's scale client needs
to find the Scale's version.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from . import k8sschema
from .resources import Registry, Resource

K8S_VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-ykshm-sim", "gitCommit": "0" * 40,
               "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23.0",
               "compiler": "gc", "platform": "linux/amd64"}


def api_versions(server: str) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server}]}


def _groups(reg: Registry) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for (group, version) in reg.by_group_version:
        if group:
            groups.setdefault(group, []).append(version)
    return groups


def api_group(reg: Registry, group: str) -> dict[str, Any] | None:
    versions = _groups(reg).get(group)
    if not versions:
        return None
    gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": gvs, "preferredVersion": gvs[0]}


def api_group_list(reg: Registry) -> dict[str, Any]:
    groups = [api_group(reg, g) for g in _groups(reg)]
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [{k: v for k, v in g.items() if k not in ("kind", "apiVersion")} for g in groups if g]}


def _verbs_for(r: Resource, sub: str) -> list[str]:
    if sub in ("binding", "eviction", "token"):
        return ["create"]
    if sub:
        return ["get", "patch", "update"]
    return list(r.verbs)


def resource_list(reg: Registry, group: str, version: str) -> dict[str, Any] | None:
    table = reg.lookup(group, version)
    if table is None:
        return None
    items: list[dict[str, Any]] = []
    for r in table.values():
        entry: dict[str, Any] = {"name": r.name, "singularName": r.singular, "namespaced": r.namespaced,
                                 "kind": r.kind, "verbs": _verbs_for(r, "")}
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if r.categories:
            entry["categories"] = list(r.categories)
        entry["storageVersionHash"] = hashlib.sha256(f"{r.api_version}/{r.name}".encode()).hexdigest()[:11]
        items.append(entry)
        for sub in r.subresources:
            kind = "Binding" if sub == "binding" else r.kind
            sub_entry: dict[str, Any] = {"name": f"{r.name}/{sub}", "singularName": "", "namespaced": r.namespaced,
                                         "kind": kind, "verbs": _verbs_for(r, sub)}
            if sub == "scale":
                sub_entry.update(group="autoscaling", version="v1", kind="Scale")
            elif sub == "token":  # kubectl create token: a TokenRequest
                sub_entry.update(group="authentication.k8s.io", version="v1", kind="TokenRequest")
            elif sub == "eviction":  # kubectl drain looks for exactly this to evict instead of delete
                sub_entry.update(group="policy", version="v1", kind="Eviction")
            items.append(sub_entry)
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": items}


# -- OpenAPI ---------------------------------------------------------------------------------------

_QUERY_PARAMS = ("dryRun", "fieldManager", "fieldValidation", "pretty")


def _gvk(r: Resource) -> dict[str, str]:
    return {"group": r.group, "version": r.version, "kind": r.kind}


def _schema_name(r: Resource) -> str:
    if r.custom is not None:
        return ".".join(reversed(r.group.split("."))) + f".{r.version}.{r.kind}"
    group = "core" if not r.group else r.group.split(".")[0]
    return f"io.k8s.api.{group}.{r.version}.{r.kind}"


def _op_id(verb: str, r: Resource, namespaced: bool) -> str:
    group = "Core" if not r.group else "".join(p.capitalize() for p in r.group.split(".")[0].split("-"))
    return f"{verb}{group}{r.version.capitalize()}{'Namespaced' if namespaced else ''}{r.kind}"


def _operation(verb: str, action: str, r: Resource, namespaced: bool, v3: bool) -> dict[str, Any]:
    params: list[dict[str, Any]] = []
    if action in ("post", "put", "patch"):
        for name in _QUERY_PARAMS:
            p: dict[str, Any] = {"name": name, "in": "query", "description": name, "uniqueItems": True}
            if v3:
                p["schema"] = {"type": "string"}
            else:
                p["type"] = "string"
            params.append(p)
    ref = f"#/components/schemas/{_schema_name(r)}" if v3 else f"#/definitions/{_schema_name(r)}"
    if v3:
        responses = {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": ref}}}}}
    else:
        responses = {"200": {"description": "OK", "schema": {"$ref": ref}}}
    return {"operationId": _op_id(verb, r, namespaced), "tags": [r.api_version.replace("/", "_")],
            "parameters": params, "responses": responses, "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": _gvk(r)}


def _paths(resources: list[Resource], v3: bool) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for r in resources:
        if r.namespaced:
            coll = f"{r.prefix}/namespaces/{{namespace}}/{r.name}"
        else:
            coll = f"{r.prefix}/{r.name}"
        ns = r.namespaced
        paths[coll] = {"get": _operation("list", "list", r, ns, v3), "post": _operation("create", "post", r, ns, v3)}
        paths[f"{coll}/{{name}}"] = {
            "get": _operation("read", "get", r, ns, v3), "put": _operation("replace", "put", r, ns, v3),
            "patch": _operation("patch", "patch", r, ns, v3), "delete": _operation("delete", "delete", r, ns, v3),
        }
    return paths


_OBJECT_META = {
    "description": "Standard object's metadata. More info: "
                   "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
    "type": "object", "x-kubernetes-preserve-unknown-fields": True,
}
_API_VERSION = {"description": "APIVersion defines the versioned schema of this representation of an object.",
                "type": "string"}
_KIND = {"description": "Kind is a string value representing the REST resource this object represents.",
         "type": "string"}


def _custom_schema(r: Resource) -> dict[str, Any]:
    """A CRD version's openAPIV3Schema with the apiserver's apiVersion/kind/metadata and the GVK."""
    assert r.custom is not None
    doc = dict(r.custom.schema)
    props = dict(doc.get("properties") or {})
    props["apiVersion"], props["kind"], props["metadata"] = _API_VERSION, _KIND, _OBJECT_META
    doc["properties"] = props
    doc["x-kubernetes-group-version-kind"] = [_gvk(r)]
    return doc


def _schemas(resources: list[Resource]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r in resources:
        if r.custom is not None:
            out[_schema_name(r)] = _custom_schema(r)
            continue
        real = k8sschema.closure([_schema_name(r)])
        if real:  # the vendored Kubernetes 1.32 schema: what `kubectl explain` and client-side apply read
            out.update(real)
            continue
        out[_schema_name(r)] = {
            "description": f"{r.kind} (ykshm sim-cluster: the schema is not enforced beyond server-side validation)",
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
            "x-kubernetes-group-version-kind": [_gvk(r)],
        }
    return out


def openapi_v3_doc(reg: Registry, group: str, version: str) -> dict[str, Any] | None:
    table = reg.lookup(group, version)
    if table is None:
        return None
    resources = [r for r in table.values() if r in reg.served]
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": K8S_VERSION["gitVersion"]},
        "paths": _paths(resources, True),
        "components": {"schemas": _schemas(resources)},
    }


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def openapi_v3_index(reg: Registry) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The /openapi/v3 root and the encoded group-version documents by path ("api/v1")."""
    docs: dict[str, bytes] = {}
    paths: dict[str, Any] = {}
    for group, version in reg.by_group_version:
        doc = openapi_v3_doc(reg, group, version)
        if doc is None:
            continue
        data = orjson.dumps(doc)
        key = _gv_path(group, version)
        docs[key] = data
        digest = hashlib.sha512(data).hexdigest()[:128].upper()
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"}
    return {"paths": paths}, docs


def openapi_v2_doc(reg: Registry) -> dict[str, Any]:
    resources = list(reg.served)
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": K8S_VERSION["gitVersion"]},
        "paths": _paths(resources, False),
        "definitions": orjson.loads(orjson.dumps(_schemas(resources)).replace(
            k8sschema.REF.encode(), b"#/definitions/")),
    }


def _pb_field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    key = (number << 3) | 2
    length = len(payload)
    varint = bytearray()
    while True:
        byte = length & 0x7F
        length >>= 7
        if length:
            varint.append(byte | 0x80)
        else:
            varint.append(byte)
            break
    return bytes([key]) + bytes(varint) + payload


def openapi_v2_protobuf() -> bytes:
    """A minimal gnostic `openapi_v2.Document`: swagger "2.0", info{title, version}, empty paths."""
    info = _pb_field(1, b"Kubernetes") + _pb_field(2, K8S_VERSION["gitVersion"].encode())
    return _pb_field(1, b"2.0") + _pb_field(2, info) + _pb_field(8, b"")
