"""Just enough of the Kubernetes protobuf encoding for kubectl's typed writes.

kubectl's typed clients (`kubectl create namespace`, `kubectl create configmap`, `kubectl drain`'s
deletes) send `application/vnd.kubernetes.protobuf` bodies: the magic `k8s\\0` and a
`runtime.Unknown{typeMeta{apiVersion, kind}, raw}` envelope around the object's own message. We
decode Namespace, ConfigMap and Secret (ObjectMeta: name, generateName, namespace, labels, annotations,
finalizers) into the JSON form, and DeleteOptions (a typed client's `--cascade`); any other kind is
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


_DECODERS = {("v1", "Namespace"): _namespace, ("v1", "ConfigMap"): _configmap, ("v1", "Secret"): _secret}


def decode(body: bytes) -> dict[str, Any]:
    """A protobuf request body as the JSON object it stands for."""
    if not body.startswith(MAGIC):
        raise BadRequest("protobuf body: missing the k8s\\0 prefix")
    envelope = fields(body[len(MAGIC):])
    type_meta = fields((envelope.get(1) or [b""])[-1])
    api_version = _str(type_meta, 1) or ""
    kind = _str(type_meta, 2) or ""
    decoder = _DECODERS.get((api_version, kind))
    if decoder is None:
        raise UnsupportedMedia(f"the sim-cluster decodes protobuf only for v1 Namespace, ConfigMap and Secret, not "
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
