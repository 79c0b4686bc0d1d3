"""The `/scale` sub-resource of a custom resource: an `autoscaling/v1` Scale read from and written
to the paths its CRD names (`specReplicasPath`, `statusReplicasPath`, `labelSelectorPath`).

GET answers the Scale (a missing replicas value reads as 0, as the apiserver's); PUT and PATCH
produce a new Scale whose `spec.replicas` (an integer >= 0, else 422 on the Scale) is written at
`specReplicasPath` as a main-resource update, so the CRD's schema still applies (a `minimum: 1`
makes `--replicas=0` a 422 naming `spec.width`) and `metadata.generation` moves.
"""

from __future__ import annotations

import copy
from typing import Any

from . import jsonpath
from .errors import BadRequest, Conflict, Invalid
from .resources import Resource

Obj = dict[str, Any]
API_VERSION, KIND = "autoscaling/v1", "Scale"


def _paths(res: Resource):
    paths = res.custom.scale if res.custom is not None else res.scale  # a CRD's, or a built-in kind's
    assert paths is not None
    return paths


def _int_at(obj: Obj, path: str) -> int:
    found = jsonpath.find(obj, path)
    value = found[0] if found else None
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def to_scale(res: Resource, obj: Obj) -> Obj:
    paths = _paths(res)
    meta = obj["metadata"]
    status: Obj = {"replicas": _int_at(obj, paths.status_replicas)}
    if paths.label_selector:
        found = jsonpath.find(obj, paths.label_selector)
        if found and isinstance(found[0], str) and found[0]:
            status["selector"] = found[0]
    out_meta = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in meta}
    return {"kind": KIND, "apiVersion": API_VERSION, "metadata": out_meta,
            "spec": {"replicas": _int_at(obj, paths.spec_replicas)}, "status": status}


def scaled(res: Resource, obj: Obj, scale: Any) -> Obj:
    """The object with the Scale's `spec.replicas` written at `specReplicasPath` (not stored)."""
    if not isinstance(scale, dict):
        raise BadRequest("the object provided is unrecognized (must be of type Scale)")
    if scale.get("kind") not in (None, "", KIND):
        raise BadRequest(f"the object provided is unrecognized (must be of type Scale): kind {scale.get('kind')!r}")
    name = obj["metadata"]["name"]
    meta = scale.get("metadata") or {}
    if isinstance(meta, dict):
        if meta.get("name") not in (None, "", name):
            raise BadRequest(f'the name of the object ({meta["name"]}) does not match the name on the URL ({name})')
        given = meta.get("resourceVersion")
        if given not in (None, "") and str(given) != obj["metadata"]["resourceVersion"]:
            raise Conflict.object(res.name, name, "the object has been modified; please apply your changes to the "
                                                  "latest version and try again", res.group)
    replicas = (scale.get("spec") or {}).get("replicas") if isinstance(scale.get("spec"), dict) else None
    if isinstance(replicas, float) and replicas.is_integer():
        replicas = int(replicas)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        why = "must be greater than or equal to 0" if isinstance(replicas, int) else "must be an integer"
        shown = replicas if isinstance(replicas, int) else f'"{replicas}"'
        raise Invalid.fields(KIND, name, [("FieldValueInvalid", "spec.replicas", f"Invalid value: {shown}: {why}")],
                             "autoscaling")
    new = copy.deepcopy(obj)
    jsonpath.set_dotted(new, _paths(res).spec_replicas, replicas)
    return new
