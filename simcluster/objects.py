"""What the apiserver does to an object before storing it: defaults, system metadata, validation.

`prepare_create` and `prepare_update` return the object to store or raise `Invalid` (422) whose
causes name every bad field (`spec.containers[0].resources.requests[cpu]`), `BadRequest` (400) for a
body that is not the expected kind. Quantities are checked with `common.quantity.parse_quantity` /
`parse_milli`, the same parser the shim and engine use, so an object we accept is one they accept.

A custom resource (its Resource has a `custom` part) is pruned, defaulted and validated against its
CRD's structural schema (see `structural`); with a status sub-resource its status is dropped on
create. Custom resources and CRDs carry `metadata.generation`: 1 at creation, +1 on every update
that changes more than metadata (and status, when that is a sub-resource).
"""

from __future__ import annotations

import base64
import binascii
import copy
import random
import re
import time
import uuid
from typing import Any

from common.quantity import QuantityError, parse_milli, parse_quantity
from common import k8snames

from . import crd, structural
from .errors import BadRequest, Conflict, Invalid
from .resources import CRDS, Resource

Obj = dict[str, Any]
Cause = tuple[str, str, str]  # (reason, field, message)

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_GENERATE_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_SYSTEM_META = ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "selfLink", "generation")
_RESTART_POLICIES = ("Always", "OnFailure", "Never")


def now_rfc3339() -> str:
    """Now as a metav1.Time (UTC, whole seconds, `Z`); time.strftime is a third of datetime's
    cost, and this runs several times per pod write."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def required(field: str, message: str = "Required value") -> Cause:
    return ("FieldValueRequired", field, message)


def invalid(field: str, value: Any, why: str) -> Cause:
    shown = value if isinstance(value, (int, float)) and not isinstance(value, bool) else f'"{value}"'
    return ("FieldValueInvalid", field, f"Invalid value: {shown}: {why}")


def check_body(resource: Resource, body: Any) -> Obj:
    """A decoded request body must be an object of the resource's kind and version."""
    if not isinstance(body, dict):
        raise BadRequest(f"the object provided is unrecognized (must be of type {resource.kind}): "
                         "couldn't get version/kind; json parse error: expected an object")
    kind = body.get("kind")
    api_version = body.get("apiVersion")
    if kind not in (None, "", resource.kind):
        raise BadRequest(f"the object provided is unrecognized (must be of type {resource.kind}): "
                         f"kind {kind!r} in the body does not match the resource")
    if api_version not in (None, "", resource.api_version):
        raise BadRequest(f"the API version in the data ({api_version}) does not match the expected API version "
                         f"({resource.api_version})")
    meta = body.get("metadata")
    if meta is None:
        body["metadata"] = {}
    elif not isinstance(meta, dict):
        raise BadRequest(f"{resource.kind} in version \"{resource.version}\" cannot be handled as a "
                         f"{resource.kind}: metadata must be an object")
    out: Obj = {"kind": resource.kind, "apiVersion": resource.api_version}
    out.update((k, v) for k, v in body.items() if k not in ("kind", "apiVersion"))
    return out


_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"


def _name_message(name: str, label: bool, limit: int) -> str:
    """apimachinery's own words for a bad name (IsDNS1123Label / IsDNS1123Subdomain), measured
    against kube-apiserver (tests/realk8s/test_realk8s_differential.py)."""
    if len(name) > limit:
        return f"must be no more than {limit} bytes"
    if label:
        return ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
                f"start and end with an alphanumeric character (e.g. 'my-name' or '123-abc', regex used for "
                f"validation is '{_LABEL_FMT}')")
    return ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
            "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
            f"'{_LABEL_FMT}(\\.{_LABEL_FMT})*')")


def _validate_meta(resource: Resource, meta: Obj, causes: list[Cause]) -> None:
    name = meta.get("name")
    if not name:
        causes.append(required("metadata.name", "Required value: name or generateName is required"))
    elif not isinstance(name, str):
        causes.append(invalid("metadata.name", name, "must be a string"))
    else:
        valid, limit = (k8snames.is_label, 63) if resource.name == "namespaces" else (k8snames.is_subdomain, 253)
        if resource.name == "events":  # a ConfigMap's name is a DNS subdomain (measured: tests/realk8s)
            ok = len(name) <= 253 and "/" not in name and name not in (".", "..")
        elif resource.group == "rbac.authorization.k8s.io":  # a path segment: `system:kube-scheduler`
            ok = "/" not in name and "%" not in name and name not in (".", "..")
        else:
            ok = valid(name)
        if not ok:
            causes.append(invalid("metadata.name", name, _name_message(name, resource.name == "namespaces", limit)))
    _validate_owner_refs(meta.get("ownerReferences"), causes)
    finalizers = meta.get("finalizers")
    if finalizers is not None and (not isinstance(finalizers, list)
                                   or not all(isinstance(f, str) and f for f in finalizers)):
        causes.append(invalid("metadata.finalizers", "", "must be a list of non-empty strings"))
    for which in ("labels", "annotations"):
        values = meta.get(which)
        if values is None:
            continue
        if not isinstance(values, dict):
            causes.append(invalid(f"metadata.{which}", "", "must be a map of string to string"))
            continue
        for key, value in values.items():
            field = f"metadata.{which}"
            prefix, _, short = key.rpartition("/")
            if (prefix and not k8snames.is_subdomain(prefix)) or not _QUALIFIED_NAME.match(short) or len(short) > 63:
                causes.append(invalid(field, key, "name part must consist of alphanumeric characters, '-', '_' or '.'"))
            if not isinstance(value, str):
                causes.append(invalid(f"{field}[{key}]", value, "must be a string"))
            elif which == "labels" and (len(value) > 63 or not _LABEL_VALUE.match(value)):
                causes.append(invalid(f"{field}", value, "a valid label must be an empty string or consist of "
                                      "alphanumeric characters, '-', '_' or '.' (at most 63)"))


def _validate_owner_refs(refs: Any, causes: list[Cause]) -> None:
    """ownerReferences: apiVersion, kind, name and uid set; at most one controller."""
    field = "metadata.ownerReferences"
    if refs is None:
        return
    if not isinstance(refs, list):
        causes.append(invalid(field, "", "must be a list of owner references"))
        return
    controllers = []
    for ref in refs:
        if not isinstance(ref, dict):
            causes.append(invalid(field, "", "must be an object"))
            continue
        for key, what in (("apiVersion", "version"), ("kind", "kind"), ("name", "name"), ("uid", "uid")):
            if not ref.get(key) or not isinstance(ref[key], str):
                causes.append(invalid(f"{field}.{key}", ref.get(key) or "", f"{what} must not be empty"))
        if ref.get("controller") is True:
            controllers.append(f"{ref.get('kind')}/{ref.get('name')}")
    if len(controllers) > 1:
        causes.append(invalid(field, "", "Only one reference can have Controller set to true. Found \"true\" in "
                                         f"references for {' and '.join(controllers)}"))


def _quantity(field: str, name: str, value: Any, causes: list[Cause]) -> int | None:
    try:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            raise QuantityError("not a string or integer")
        return parse_milli(value) if name == "cpu" else parse_quantity(value)
    except (QuantityError, ValueError, ArithmeticError):
        causes.append(invalid(f"{field}[{name}]", value, "must be a valid quantity (such as 500m, 2, 1Gi)"))
        return None


def _quantities(field: str, values: Any, causes: list[Cause]) -> dict[str, int]:
    """A resource list (name -> quantity), absent = {}; every bad entry is a cause."""
    if values is None:
        return {}
    if not isinstance(values, dict):
        causes.append(invalid(field, "", "must be a map of resource name to quantity"))
        return {}
    parsed = {}
    for rname, value in values.items():
        q = _quantity(field, rname, value, causes)
        if q is not None:
            parsed[rname] = q
    return parsed


def _validate_container(c: Any, field: str, names: set[str], causes: list[Cause]) -> None:
    if not isinstance(c, dict):
        causes.append(invalid(field, "", "must be an object"))
        return
    name = c.get("name")
    if not name:
        causes.append(required(f"{field}.name"))
    elif not isinstance(name, str) or not k8snames.is_label(name):
        causes.append(invalid(f"{field}.name", name, "must be a lowercase RFC 1123 label"))
    elif name in names:
        causes.append(("FieldValueDuplicate", f"{field}.name", f'Duplicate value: "{name}"'))
    else:
        names.add(name)
    if not c.get("image"):
        causes.append(required(f"{field}.image"))
    res = c.get("resources")
    if res is None:
        return
    if not isinstance(res, dict):
        causes.append(invalid(f"{field}.resources", "", "must be an object"))
        return
    requests = _quantities(f"{field}.resources.requests", res.get("requests"), causes)
    limits = _quantities(f"{field}.resources.limits", res.get("limits"), causes)
    for rname, req in requests.items():
        lim = limits.get(rname)
        if lim is not None and req > lim:
            causes.append(invalid(f"{field}.resources.requests", res["requests"][rname],
                                  f"must be less than or equal to {rname} limit of {res['limits'][rname]}"))


def _validate_pod(obj: Obj, causes: list[Cause]) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        causes.append(required("spec.containers"))
        return
    containers = spec.get("containers")
    if not containers or not isinstance(containers, list):
        causes.append(required("spec.containers"))
    names: set[str] = set()
    for i, c in enumerate(containers or []):
        _validate_container(c, f"spec.containers[{i}]", names, causes)
    for i, c in enumerate(spec.get("initContainers") or []):
        _validate_container(c, f"spec.initContainers[{i}]", names, causes)
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in _RESTART_POLICIES:
        causes.append(("FieldValueNotSupported", "spec.restartPolicy",
                       f'Unsupported value: "{policy}": supported values: "Always", "OnFailure", "Never"'))
    for key in ("nodeName", "schedulerName", "priorityClassName"):
        if key in spec and spec[key] is not None and not isinstance(spec[key], str):
            causes.append(invalid(f"spec.{key}", spec[key], "must be a string"))
    _quantities("spec.overhead", spec.get("overhead"), causes)


def _validate_node(obj: Obj, causes: list[Cause]) -> None:
    status = obj.get("status") or {}
    for part in ("capacity", "allocatable"):
        _quantities(f"status.{part}", status.get(part), causes)
    spec = obj.get("spec") or {}
    if "unschedulable" in spec and not isinstance(spec["unschedulable"], bool):
        causes.append(invalid("spec.unschedulable", spec["unschedulable"], "must be a boolean"))


def _validate_configmap(obj: Obj, causes: list[Cause]) -> None:
    data = obj.get("data")
    if data is not None:
        if not isinstance(data, dict):
            causes.append(invalid("data", "", "must be a map of string to string"))
        else:
            for key, value in data.items():
                if not isinstance(value, str):
                    causes.append(invalid(f"data[{key}]", value, "must be a string"))


def _validate_secret(obj: Obj, causes: list[Cause]) -> None:
    """`data` values are base64 (the apiserver decodes them: anything else is a 400 there; here a
    422 naming the key), `stringData` values plain strings, `type` a string."""
    for which in ("data", "stringData"):
        values = obj.get(which)
        if values is None:
            continue
        if not isinstance(values, dict):
            causes.append(invalid(which, "", "must be a map of string to string"))
            continue
        for key, value in values.items():
            if not isinstance(value, str):
                causes.append(invalid(f"{which}[{key}]", value, "must be a string"))
            elif which == "data":
                try:
                    base64.b64decode(value, validate=True)
                except (binascii.Error, ValueError):
                    causes.append(invalid(f"data[{key}]", value, "must be base64-encoded"))
    if not isinstance(obj.get("type", ""), str):
        causes.append(invalid("type", obj.get("type"), "must be a string"))


def _default_secret(obj: Obj) -> None:
    """`stringData` is write-only: merged into `data` (base64), as the apiserver does; type Opaque."""
    plain = obj.pop("stringData", None) or {}
    if plain:
        data = dict(obj.get("data") or {})
        data.update({k: base64.b64encode(v.encode()).decode() for k, v in plain.items()})
        obj["data"] = data
    obj.setdefault("type", "Opaque")


def validate(resource: Resource, obj: Obj) -> None:
    """Raise Invalid naming every bad field."""
    causes: list[Cause] = []
    meta = obj["metadata"]
    _validate_meta(resource, meta, causes)
    if resource.name == "pods":
        _validate_pod(obj, causes)
    elif resource.name == "nodes":
        _validate_node(obj, causes)
    elif resource.name == "configmaps":
        _validate_configmap(obj, causes)
    elif resource.name == "secrets":
        _validate_secret(obj, causes)
    elif resource is CRDS:
        crd.validate_crd(obj, causes)
    elif resource.custom is not None:
        structural.validate(resource.custom.schema, obj, "", causes)
    if causes:
        raise Invalid.fields(resource.kind, str(meta.get("name") or ""), causes, resource.group)


# -- defaults ------------------------------------------------------------------------------------

def _qos(spec: Obj) -> str:
    containers = spec.get("containers") or []
    any_set, guaranteed = False, True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            any_set = True
        for rname in ("cpu", "memory"):
            if rname not in lim or str(req.get(rname, lim.get(rname))) != str(lim[rname]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _default_container(c: Obj) -> None:
    image = str(c.get("image", ""))
    tag = image.rsplit("/", 1)[-1]
    c.setdefault("imagePullPolicy", "Always" if (":" not in tag or tag.endswith(":latest")) and "@" not in tag else "IfNotPresent")
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    res = c.setdefault("resources", {})
    if res.get("limits"):
        req = res.setdefault("requests", {})
        for rname, value in res["limits"].items():
            req.setdefault(rname, value)


def _default_pod(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    for c in spec.get("containers") or []:
        _default_container(c)
    for c in spec.get("initContainers") or []:
        _default_container(c)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("priority", 0)
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("tolerations", [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    ])
    obj["status"] = {"phase": "Pending", "qosClass": _qos(spec)}


def default_node_status(cpu: str, memory: str, pods: str = "110") -> Obj:
    """The status a simulated kubelet reports for a node."""
    capacity = {"cpu": cpu, "memory": memory, "pods": pods, "ephemeral-storage": "100Gi"}
    ts = now_rfc3339()
    return {
        "capacity": dict(capacity),
        "allocatable": dict(capacity),
        "conditions": [
            {"type": t, "status": "False", "reason": r, "message": m, "lastHeartbeatTime": ts, "lastTransitionTime": ts}
            for t, r, m in (
                ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            )
        ] + [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
              "lastHeartbeatTime": ts, "lastTransitionTime": ts}],
        "nodeInfo": {
            "architecture": "amd64", "operatingSystem": "linux", "osImage": "ykshm simulated node",
            "kernelVersion": "6.0.0-sim", "containerRuntimeVersion": "sim://1.0", "kubeletVersion": "v1.32.0",
            "kubeProxyVersion": "v1.32.0", "machineID": "", "systemUUID": "", "bootID": "",
        },
        "phase": "Running",
    }


def _default_node(obj: Obj, cpu: str, memory: str) -> None:
    obj.setdefault("spec", {})
    status = obj.get("status") or {}
    base = default_node_status(cpu, memory)
    if not status.get("capacity"):
        status["capacity"] = base["capacity"]
    if not status.get("allocatable"):
        status["allocatable"] = dict(status["capacity"])
    if not status.get("conditions"):
        status["conditions"] = base["conditions"]
    status.setdefault("nodeInfo", base["nodeInfo"])
    if not status.get("addresses"):
        status["addresses"] = [{"type": "Hostname", "address": obj["metadata"]["name"]}]
    obj["status"] = status
    labels = obj["metadata"].setdefault("labels", {})
    labels.setdefault("kubernetes.io/hostname", obj["metadata"]["name"])
    labels.setdefault("kubernetes.io/os", "linux")
    labels.setdefault("kubernetes.io/arch", "amd64")


def _default_namespace(obj: Obj) -> None:
    obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    obj["status"] = {"phase": "Active"}
    obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"]["name"]


def generate_name(prefix: str) -> str:
    return prefix[:58] + "".join(random.choice(_GENERATE_CHARS) for _ in range(5))


def prepare_create(resource: Resource, body: Any, namespace: str, node_cpu: str = "16", node_memory: str = "64Gi") -> Obj:
    """A POSTed body -> the object to store (without resourceVersion, which the store stamps)."""
    obj = check_body(resource, body)
    meta = obj["metadata"]
    if resource.namespaced:
        ns = meta.get("namespace")
        if ns and ns != namespace:
            raise BadRequest("the namespace of the provided object does not match the namespace sent on the request")
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    if not meta.get("name") and isinstance(meta.get("generateName"), str) and meta["generateName"]:
        meta["name"] = generate_name(meta["generateName"])
    for key in _SYSTEM_META:
        meta.pop(key, None)
    if resource.custom is not None:
        obj = _schema_defaults(resource, obj)
        if resource.has_status:
            obj.pop("status", None)
        meta = obj["metadata"]
    if resource is CRDS:
        obj.pop("status", None)
    validate(resource, obj)
    if resource is CRDS:
        crd.default_crd(obj, keep_finalizer=True)
    if resource is CRDS or resource.custom is not None:
        meta["generation"] = 1
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = now_rfc3339()
    if resource.name == "pods":
        _default_pod(obj)
    elif resource.name == "nodes":
        _default_node(obj, node_cpu, node_memory)
    elif resource.name == "namespaces":
        _default_namespace(obj)
    elif resource.name == "secrets":
        _default_secret(obj)
    elif resource.name == "events" and not resource.group:
        obj.setdefault("eventTime", None)   # core/v1 serialises it always (measured: tests/realk8s)
    return obj


def prepare_update(resource: Resource, new: Any, old: Obj, subresource: str = "") -> Obj:
    """A PUT body (or the result of a PATCH) -> the object to store; system metadata kept from `old`.

    The main resource keeps the old status, the status subresource keeps everything but the status
    (as the real pod/node/namespace strategies do).
    """
    obj = check_body(resource, new)
    meta = obj["metadata"]
    old_meta = old["metadata"]
    if meta.get("name") not in (None, old_meta["name"]):
        raise BadRequest(f'the name of the object ({meta.get("name")}) does not match the name on the URL '
                         f'({old_meta["name"]})')
    if resource.namespaced and meta.get("namespace") not in (None, "", old_meta.get("namespace")):
        raise BadRequest("the namespace of the provided object does not match the namespace sent on the request")
    if subresource == "status":
        status = obj.get("status")
        obj = copy.copy(old)
        obj["metadata"] = dict(old_meta)
        if status is not None:
            obj["status"] = status
        else:
            obj.pop("status", None)
        meta = obj["metadata"]
    elif resource.has_status:
        if "status" in old:
            obj["status"] = old["status"]
        else:
            obj.pop("status", None)
    if meta.get("uid") not in (None, "", old_meta.get("uid")):
        raise Conflict.object(resource.name, old_meta["name"], f"Precondition failed: UID in precondition: "
                              f"{meta['uid']}, UID in object meta: {old_meta.get('uid')}", resource.group)
    meta["name"] = old_meta["name"]
    if resource.namespaced:
        meta["namespace"] = old_meta["namespace"]
    for key in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generateName",
                "generation"):
        if key in old_meta:
            meta[key] = old_meta[key]
        else:
            meta.pop(key, None)
    meta.pop("selfLink", None)
    if resource.custom is not None:
        obj = _schema_defaults(resource, obj)
        meta = obj["metadata"]
    _check_finalizers(resource, meta, old_meta)
    validate(resource, obj)
    if resource.name == "pods" and subresource != "status":  # the status keeps the old spec
        _check_pod_update(obj, old)
    elif resource.name == "secrets":
        _default_secret(obj)
    elif resource is CRDS:
        causes: list[Cause] = []
        crd.validate_crd_update(obj, old, causes)
        if causes:
            raise Invalid.fields(resource.kind, old_meta["name"], causes, resource.group)
        crd.default_crd(obj, keep_finalizer=not old_meta.get("deletionTimestamp"))
    if "generation" in old_meta and _spec_changed(resource, obj, old):
        meta["generation"] = int(old_meta["generation"]) + 1
    return obj


def _schema_defaults(resource: Resource, obj: Obj) -> Obj:
    """A custom resource pruned to its schema, then defaulted (the apiserver's decoding order)."""
    assert resource.custom is not None
    pruned = structural.prune(resource.custom.schema, obj)
    return structural.apply_defaults(resource.custom.schema, pruned)


def _spec_changed(resource: Resource, new: Obj, old: Obj) -> bool:
    skip = ("metadata", "status") if resource.has_status else ("metadata",)
    return {k: v for k, v in new.items() if k not in skip} != {k: v for k, v in old.items() if k not in skip}


def _check_finalizers(resource: Resource, meta: Obj, old_meta: Obj) -> None:
    """An object being deleted may lose finalizers but gain none (the apiserver's rule)."""
    if not old_meta.get("deletionTimestamp"):
        return
    added = [f for f in meta.get("finalizers") or [] if f not in (old_meta.get("finalizers") or [])]
    if added:
        shown = ", ".join(f'"{f}"' for f in added)
        raise Invalid.fields(resource.kind, old_meta["name"], [(
            "FieldValueForbidden", "metadata.finalizers",
            f"Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers "
            f"[]string{{{shown}}}")], resource.group)


POD_UPDATE_FORBIDDEN = (
    "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
    "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to "
    "existing tolerations), `spec.terminationGracePeriodSeconds`")


def _fixed_part(spec: Obj) -> Obj:
    """A pod spec without what an update may change (images, deadlines, tolerations, gates)."""
    fixed = copy.deepcopy(spec)
    for group in ("containers", "initContainers"):
        for c in fixed.get(group) or []:
            if isinstance(c, dict):
                c.pop("image", None)
    for key in ("activeDeadlineSeconds", "terminationGracePeriodSeconds", "tolerations", "schedulingGates",
                "nodeName"):
        fixed.pop(key, None)
    return fixed


def _check_pod_update(obj: Obj, old: Obj) -> None:
    """The pod update rules of the apiserver's validation, compared after defaulting the new spec
    (so `kubectl replace` of a manifest without the defaults is no change). Tolerations may change
    freely here (the apiserver allows additions only): a strategic-merge patch replaces the whole
    list, and users (and our tests) add tolerations to a waiting pod that way."""
    new_spec, old_spec = obj.get("spec") or {}, old.get("spec") or {}
    defaulted = {"spec": copy.deepcopy(new_spec)}
    _default_pod(defaulted)
    node_moved = bool(old_spec.get("nodeName")) and new_spec.get("nodeName") != old_spec.get("nodeName")
    if node_moved or _fixed_part(defaulted["spec"]) != _fixed_part(old_spec):
        raise Invalid.fields("Pod", old["metadata"]["name"], [("FieldValueForbidden", "spec", POD_UPDATE_FORBIDDEN)])


def same_content(a: Obj, b: Obj) -> bool:
    """True when an update changes nothing but the resourceVersion it carried (a no-op)."""
    ma, mb = a.get("metadata", {}), b.get("metadata", {})
    if {k: v for k, v in ma.items() if k != "resourceVersion"} != {k: v for k, v in mb.items() if k != "resourceVersion"}:
        return False
    return {k: v for k, v in a.items() if k != "metadata"} == {k: v for k, v in b.items() if k != "metadata"}
