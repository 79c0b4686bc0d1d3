"""Protobuf bodies of the workload kinds, as `kubectl create deployment|job` sends them: apps/v1
Deployment and batch/v1 Job with their pod template (containers' name, image, command, args,
workingDir, env values, resources, imagePullPolicy; the pod's restartPolicy, nodeSelector,
serviceAccountName, nodeName, schedulerName). Fields kubectl's generators do not set are not read.
"""

from __future__ import annotations

from typing import Any

from .protobuf import Fields, _int32, _label_selector, _map, _meta, _str, _strings, fields

Obj = dict[str, Any]


def _sub(f: Fields, n: int) -> Fields:
    return fields((f.get(n) or [b""])[-1])


def _texts(f: Fields, names: tuple[tuple[int, str], ...], out: Obj) -> None:
    for n, key in names:
        value = _str(f, n)
        if value:
            out[key] = value


def _quantities(f: Fields, n: int) -> Obj:
    """map<string, Quantity{string 1}>."""
    out: Obj = {}
    for entry in f.get(n, []):
        e = fields(entry)
        out[_str(e, 1) or ""] = _str(_sub(e, 2), 1) or ""
    return out


def _container(data: bytes) -> Obj:
    """core/v1 Container: name 1, image 2, command 3, args 4, workingDir 5, env 7, resources 8,
    imagePullPolicy 14."""
    f = fields(data)
    c: Obj = {}
    _texts(f, ((1, "name"), (2, "image"), (5, "workingDir"), (14, "imagePullPolicy")), c)
    for n, key in ((3, "command"), (4, "args")):
        if f.get(n):
            c[key] = _strings(f, n)
    env = [{"name": _str(e, 1) or "", "value": _str(e, 2) or ""} for e in map(fields, f.get(7, []))]
    if env:
        c["env"] = env
    res = _sub(f, 8)
    resources = {k: v for k, v in (("limits", _quantities(res, 1)), ("requests", _quantities(res, 2))) if v}
    c["resources"] = resources
    return c


def _template(data: bytes) -> Obj:
    """core/v1 PodTemplateSpec: metadata 1, spec 2 {containers 2, restartPolicy 3, nodeSelector 7,
    serviceAccountName 8, nodeName 10, schedulerName 19}."""
    f = fields(data)
    spec_f = _sub(f, 2)
    spec: Obj = {"containers": [_container(c) for c in spec_f.get(2, [])]}
    _texts(spec_f, ((3, "restartPolicy"), (8, "serviceAccountName"), (10, "nodeName"), (19, "schedulerName")), spec)
    selector = _map(spec_f, 7)
    if selector:
        spec["nodeSelector"] = selector
    return {"metadata": _meta((f.get(1) or [b""])[-1]), "spec": spec}


def _deployment(f: Fields) -> Obj:
    """apps/v1 Deployment: metadata 1, spec 2 {replicas 1, selector 2, template 3, strategy 4 {type 1}}."""
    spec_f = _sub(f, 2)
    spec: Obj = {"template": _template((spec_f.get(3) or [b""])[-1])}
    if spec_f.get(1):
        spec["replicas"] = _int32(spec_f[1][-1])
    if spec_f.get(2):
        spec["selector"] = _label_selector(spec_f[2][-1])
    strategy = _str(_sub(spec_f, 4), 1)
    if strategy:
        spec["strategy"] = {"type": strategy}
    return {"metadata": _meta((f.get(1) or [b""])[-1]), "spec": spec}


def _job(f: Fields) -> Obj:
    """batch/v1 Job: metadata 1, spec 2 {parallelism 1, completions 2, selector 4, template 6,
    backoffLimit 7}."""
    spec_f = _sub(f, 2)
    spec: Obj = {"template": _template((spec_f.get(6) or [b""])[-1])}
    for n, key in ((1, "parallelism"), (2, "completions"), (7, "backoffLimit")):
        if spec_f.get(n):
            spec[key] = _int32(spec_f[n][-1])
    if spec_f.get(4):
        spec["selector"] = _label_selector(spec_f[4][-1])
    return {"metadata": _meta((f.get(1) or [b""])[-1]), "spec": spec}


DECODERS = {("apps/v1", "Deployment"): _deployment, ("batch/v1", "Job"): _job}
