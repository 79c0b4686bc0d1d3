"""Just enough of the Kubernetes protobuf encoding for kubectl's typed writes.

kubectl's typed clients (`kubectl create namespace`, `kubectl create configmap`, `kubectl drain`'s
deletes) send `application/vnd.kubernetes.protobuf` bodies: the magic `k8s\\0` and a
`runtime.Unknown{typeMeta{apiVersion, kind}, raw}` envelope around the object's own message. We
decode Namespace, ConfigMap, Secret, Service, ServiceAccount, PodDisruptionBudget, Eviction and
PriorityClass, the RBAC kinds, the authorization/authentication reviews and TokenRequest
(ObjectMeta: name, generateName, namespace, labels, annotations, finalizers) into the JSON form, and DeleteOptions (a typed client's `--cascade`); any other kind is
`UnsupportedMedia` (415). Responses are JSON, which kubectl also accepts.
"""

from __future__ import annotations

import base64
from typing import Any

from .errors import BadRequest, UnsupportedMedia

MEDIA = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

Fields = dict[int, list[Any]]


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise BadRequest("protobuf body: truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise BadRequest("protobuf body: varint too long")


def fields(data: bytes) -> Fields:
    """Field number -> values (ints for varint/fixed, bytes for length-delimited)."""
    out: Fields = {}
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise BadRequest("protobuf body: truncated field")
            value, pos = data[pos:pos + length], pos + length
        elif wire == 1:
            value, pos = int.from_bytes(data[pos:pos + 8], "little"), pos + 8
        elif wire == 5:
            value, pos = int.from_bytes(data[pos:pos + 4], "little"), pos + 4
        else:
            raise BadRequest(f"protobuf body: unsupported wire type {wire}")
        out.setdefault(number, []).append(value)
    return out


def _str(f: Fields, n: int) -> str | None:
    values = f.get(n)
    return values[-1].decode("utf-8") if values else None


def _strings(f: Fields, n: int) -> list[str]:
    return [v.decode("utf-8") for v in f.get(n, [])]


def _map(f: Fields, n: int, binary: bool = False) -> dict[str, Any] | None:
    if n not in f:
        return None
    out: dict[str, Any] = {}
    for entry in f[n]:
        e = fields(entry)
        key = (e.get(1) or [b""])[-1].decode("utf-8")
        raw = (e.get(2) or [b""])[-1]
        out[key] = base64.b64encode(raw).decode() if binary else raw.decode("utf-8")
    return out


def _meta(data: bytes) -> dict[str, Any]:
    f = fields(data)
    meta: dict[str, Any] = {}
    for n, key in ((1, "name"), (2, "generateName"), (3, "namespace")):
        value = _str(f, n)
        if value:
            meta[key] = value
    for n, key in ((11, "labels"), (12, "annotations")):
        value = _map(f, n)
        if value:
            meta[key] = value
    if f.get(14):
        meta["finalizers"] = _strings(f, 14)
    return meta


def _namespace(f: Fields) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": _meta((f.get(1) or [b""])[-1])}
    if f.get(2):
        spec = fields(f[2][-1])
        if spec.get(1):
            obj["spec"] = {"finalizers": _strings(spec, 1)}
    return obj


def _configmap(f: Fields) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": _meta((f.get(1) or [b""])[-1])}
    data = _map(f, 2)
    if data is not None:
        obj["data"] = data
    binary = _map(f, 3, binary=True)
    if binary is not None:
        obj["binaryData"] = binary
    if f.get(4):
        obj["immutable"] = bool(f[4][-1])
    return obj


def _secret(f: Fields) -> dict[str, Any]:
    """core/v1 Secret: metadata 1, data 2 (bytes), type 3, stringData 4, immutable 5."""
    obj: dict[str, Any] = {"metadata": _meta((f.get(1) or [b""])[-1])}
    data = _map(f, 2, binary=True)
    if data is not None:
        obj["data"] = data
    kind = _str(f, 3)
    if kind:
        obj["type"] = kind
    plain = _map(f, 4)
    if plain is not None:
        obj["stringData"] = plain
    if f.get(5):
        obj["immutable"] = bool(f[5][-1])
    return obj


def _int_or_string(data: bytes) -> int | str:
    """intstr.IntOrString: type 1 (0 int, 1 string), intVal 2, strVal 3."""
    f = fields(data)
    if (f.get(1) or [0])[-1] == 1:
        return _str(f, 3) or ""
    return _int32((f.get(2) or [0])[-1])


def _int32(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _label_selector(data: bytes) -> dict[str, Any]:
    """meta/v1 LabelSelector: matchLabels 1, matchExpressions 2 {key 1, operator 2, values 3}."""
    f = fields(data)
    out: dict[str, Any] = {}
    labels = _map(f, 1)
    if labels:
        out["matchLabels"] = labels
    exprs = []
    for raw in f.get(2, []):
        e = fields(raw)
        expr: dict[str, Any] = {"key": _str(e, 1) or "", "operator": _str(e, 2) or ""}
        if e.get(3):
            expr["values"] = _strings(e, 3)
        exprs.append(expr)
    if exprs:
        out["matchExpressions"] = exprs
    return out


def _service_port(data: bytes) -> dict[str, Any]:
    """core/v1 ServicePort: name 1, protocol 2, port 3, targetPort 4, nodePort 5, appProtocol 6."""
    f = fields(data)
    port: dict[str, Any] = {k: v for k, v in (("name", _str(f, 1)), ("protocol", _str(f, 2)),
                                              ("appProtocol", _str(f, 6))) if v}
    port["port"] = _int32((f.get(3) or [0])[-1])
    if f.get(4):
        port["targetPort"] = _int_or_string(f[4][-1])
    if (f.get(5) or [0])[-1]:
        port["nodePort"] = _int32(f[5][-1])
    return port


def _service(f: Fields) -> dict[str, Any]:
    """core/v1 Service: metadata 1, spec 2 {ports 1, selector 2, clusterIP 3, type 4, externalIPs 5,
    sessionAffinity 7, externalName 10, clusterIPs 18}; what `kubectl create service` sends."""
    obj: dict[str, Any] = {"metadata": _meta((f.get(1) or [b""])[-1])}
    spec_f = fields((f.get(2) or [b""])[-1])
    spec: dict[str, Any] = {"ports": [_service_port(p) for p in spec_f.get(1, [])]}
    selector = _map(spec_f, 2)
    if selector:
        spec["selector"] = selector
    for n, key in ((3, "clusterIP"), (4, "type"), (7, "sessionAffinity"), (10, "externalName")):
        value = _str(spec_f, n)
        if value:
            spec[key] = value
    for n, key in ((5, "externalIPs"), (18, "clusterIPs")):
        if spec_f.get(n):
            spec[key] = _strings(spec_f, n)
    obj["spec"] = spec
    return obj


def _service_account(f: Fields) -> dict[str, Any]:
    """core/v1 ServiceAccount: metadata 1 (secrets 2 and imagePullSecrets 3 are not read)."""
    obj: dict[str, Any] = {"metadata": _meta((f.get(1) or [b""])[-1])}
    if f.get(4):
        obj["automountServiceAccountToken"] = bool(f[4][-1])
    return obj


def _pdb(f: Fields) -> dict[str, Any]:
    """policy/v1 PodDisruptionBudget: metadata 1, spec 2 {minAvailable 1, selector 2, maxUnavailable 3,
    unhealthyPodEvictionPolicy 4}; what `kubectl create pdb` sends."""
    obj: dict[str, Any] = {"metadata": _meta((f.get(1) or [b""])[-1])}
    spec_f = fields((f.get(2) or [b""])[-1])
    spec: dict[str, Any] = {}
    if spec_f.get(1):
        spec["minAvailable"] = _int_or_string(spec_f[1][-1])
    if spec_f.get(2):
        spec["selector"] = _label_selector(spec_f[2][-1])
    if spec_f.get(3):
        spec["maxUnavailable"] = _int_or_string(spec_f[3][-1])
    policy = _str(spec_f, 4)
    if policy:
        spec["unhealthyPodEvictionPolicy"] = policy
    obj["spec"] = spec
    return obj


def _eviction(f: Fields) -> dict[str, Any]:
    """policy/v1 Eviction: metadata 1, deleteOptions 2 (what `kubectl drain` posts)."""
    return {"metadata": _meta((f.get(1) or [b""])[-1])}


def _priority_class(f: Fields) -> dict[str, Any]:
    """scheduling.k8s.io/v1 PriorityClass: metadata 1, value 2, globalDefault 3, description 4,
    preemptionPolicy 5 (what `kubectl create priorityclass` sends)."""
    obj: dict[str, Any] = {"metadata": _meta((f.get(1) or [b""])[-1])}
    if f.get(2):
        obj["value"] = _int32(f[2][-1])
    if f.get(3):
        obj["globalDefault"] = bool(f[3][-1])
    for n, key in ((4, "description"), (5, "preemptionPolicy")):
        value = _str(f, n)
        if value is not None:
            obj[key] = value
    return obj


def _sub(f: Fields, n: int) -> Fields:
    return fields(f[n][-1]) if f.get(n) else {}


def _strs(f: Fields, names: tuple[str, ...]) -> dict[str, Any]:
    """Fields 1..N that are strings, by name (absent ones left out)."""
    return {key: value for n, key in enumerate(names, start=1) if (value := _str(f, n)) is not None}


_RESOURCE_ATTRS = ("namespace", "verb", "group", "version", "resource", "subresource", "name")


def _access_spec(spec: Fields) -> dict[str, Any]:
    """SelfSubjectAccessReviewSpec / SubjectAccessReviewSpec: resourceAttributes 1, nonResourceAttributes 2
    (path 1, verb 2), user 3, groups 4, uid 6."""
    out: dict[str, Any] = {}
    if spec.get(1):
        out["resourceAttributes"] = _strs(_sub(spec, 1), _RESOURCE_ATTRS)
    if spec.get(2):
        out["nonResourceAttributes"] = _strs(_sub(spec, 2), ("path", "verb"))
    for n, key in ((3, "user"), (6, "uid")):
        if (value := _str(spec, n)) is not None:
            out[key] = value
    if spec.get(4):
        out["groups"] = _strings(spec, 4)
    return out


def _access_review(f: Fields) -> dict[str, Any]:
    return {"metadata": _meta((f.get(1) or [b""])[-1]), "spec": _access_spec(_sub(f, 2))}


def _rules_review(f: Fields) -> dict[str, Any]:
    return {"metadata": _meta((f.get(1) or [b""])[-1]), "spec": _strs(_sub(f, 2), ("namespace",))}


def _self_subject_review(f: Fields) -> dict[str, Any]:
    return {"metadata": _meta((f.get(1) or [b""])[-1])}


def _token_request(f: Fields) -> dict[str, Any]:
    """TokenRequest spec: audiences 1, boundObjectRef 3 {kind 1, apiVersion 2, name 3, uid 4}, expirationSeconds 4."""
    spec = _sub(f, 2)
    out: dict[str, Any] = {"audiences": _strings(spec, 1)}
    if spec.get(3):
        out["boundObjectRef"] = _strs(_sub(spec, 3), ("kind", "apiVersion", "name", "uid"))
    if spec.get(4):
        out["expirationSeconds"] = spec[4][-1]
    return {"metadata": _meta((f.get(1) or [b""])[-1]), "spec": out}


def _token_review(f: Fields) -> dict[str, Any]:
    spec = _sub(f, 2)
    return {"metadata": _meta((f.get(1) or [b""])[-1]),
            "spec": {"token": _str(spec, 1) or "", "audiences": _strings(spec, 2)}}


def _policy_rules(f: Fields) -> list[dict[str, Any]]:
    """PolicyRule: verbs 1, apiGroups 2, resources 3, resourceNames 4, nonResourceURLs 5."""
    out = []
    for raw in f.get(2, []):
        r = fields(raw)
        rule = {key: _strings(r, n) for n, key in ((1, "verbs"), (2, "apiGroups"), (3, "resources"),
                                                  (4, "resourceNames"), (5, "nonResourceURLs")) if r.get(n)}
        rule.setdefault("verbs", [])
        out.append(rule)
    return out


def _role(f: Fields) -> dict[str, Any]:
    """Role / ClusterRole: metadata 1, rules 2, aggregationRule 3 {clusterRoleSelectors 1}."""
    obj: dict[str, Any] = {"metadata": _meta((f.get(1) or [b""])[-1]), "rules": _policy_rules(f)}
    if f.get(3):
        obj["aggregationRule"] = {"clusterRoleSelectors": [_label_selector(s) for s in _sub(f, 3).get(1, [])]}
    return obj


def _role_binding(f: Fields) -> dict[str, Any]:
    """RoleBinding / ClusterRoleBinding: subjects 2 {kind 1, apiGroup 2, name 3, namespace 4},
    roleRef 3 {apiGroup 1, kind 2, name 3}."""
    subjects = [_strs(fields(raw), ("kind", "apiGroup", "name", "namespace")) for raw in f.get(2, [])]
    obj: dict[str, Any] = {"metadata": _meta((f.get(1) or [b""])[-1]),
                           "roleRef": _strs(_sub(f, 3), ("apiGroup", "kind", "name"))}
    if subjects:
        obj["subjects"] = subjects
    return obj


_DECODERS = {("v1", "Namespace"): _namespace, ("v1", "ConfigMap"): _configmap, ("v1", "Secret"): _secret,
             ("v1", "Service"): _service, ("v1", "ServiceAccount"): _service_account,
             ("policy/v1", "PodDisruptionBudget"): _pdb, ("policy/v1", "Eviction"): _eviction,
             ("scheduling.k8s.io/v1", "PriorityClass"): _priority_class,
             ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): _access_review,
             ("authorization.k8s.io/v1", "SubjectAccessReview"): _access_review,
             ("authorization.k8s.io/v1", "LocalSubjectAccessReview"): _access_review,
             ("authorization.k8s.io/v1", "SelfSubjectRulesReview"): _rules_review,
             ("authentication.k8s.io/v1", "SelfSubjectReview"): _self_subject_review,
             ("authentication.k8s.io/v1", "TokenRequest"): _token_request,
             ("authentication.k8s.io/v1", "TokenReview"): _token_review,
             ("rbac.authorization.k8s.io/v1", "Role"): _role, ("rbac.authorization.k8s.io/v1", "ClusterRole"): _role,
             ("rbac.authorization.k8s.io/v1", "RoleBinding"): _role_binding,
             ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): _role_binding}


def decode(body: bytes) -> dict[str, Any]:
    """A protobuf request body as the JSON object it stands for."""
    if not body.startswith(MAGIC):
        raise BadRequest("protobuf body: missing the k8s\\0 prefix")
    envelope = fields(body[len(MAGIC):])
    type_meta = fields((envelope.get(1) or [b""])[-1])
    api_version = _str(type_meta, 1) or ""
    kind = _str(type_meta, 2) or ""
    from .protoworkloads import DECODERS as workload_decoders  # it reads this module's helpers

    decoder = _DECODERS.get((api_version, kind)) or workload_decoders.get((api_version, kind))
    if decoder is None:
        known = ", ".join(f"{v} {k}" for v, k in _DECODERS)
        raise UnsupportedMedia(f"the sim-cluster decodes protobuf only for {known}, not "
                               f"{api_version} {kind}; send application/json")
    obj = decoder(fields((envelope.get(2) or [b""])[-1]))
    return {"apiVersion": api_version, "kind": kind, **obj}


def decode_delete_options(body: bytes) -> dict[str, Any]:
    """meta/v1 DeleteOptions: gracePeriodSeconds 1, preconditions 2 {uid 1, resourceVersion 2},
    orphanDependents 3, propagationPolicy 4, dryRun 5 (repeated)."""
    if not body.startswith(MAGIC):
        raise BadRequest("protobuf body: missing the k8s\\0 prefix")
    envelope = fields(body[len(MAGIC):])
    f = fields((envelope.get(2) or [b""])[-1])
    opts: dict[str, Any] = {}
    if f.get(1):
        opts["gracePeriodSeconds"] = f[1][-1]
    if f.get(2):
        pre = fields(f[2][-1])
        opts["preconditions"] = {k: v for k, v in (("uid", _str(pre, 1)), ("resourceVersion", _str(pre, 2))) if v}
    if f.get(3):
        opts["orphanDependents"] = bool(f[3][-1])
    policy = _str(f, 4)
    if policy:
        opts["propagationPolicy"] = policy
    if f.get(5):
        opts["dryRun"] = _strings(f, 5)
    return opts
