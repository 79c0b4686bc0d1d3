"""The AdmissionReview v1 as the admission controller reads and answers it.

`decode` accepts what Go's decoder into `admission.k8s.io/v1` AdmissionReview accepts: a JSON
object whose `request` is an object with fields of the right JSON types (`object` and `oldObject`
stay raw). Anything else is YuniKorn's "body decode failed" answer, uid `yunikorn-invalid-body`.
`object_meta` reads an object's (or a pod template's) labels and annotations the way Go decodes
them into ObjectMeta, with Go's error text when it cannot.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping
from typing import Any

import orjson

INVALID_UID = "yunikorn-invalid-body"
_MISSING = object()


@dataclasses.dataclass(frozen=True)
class Request:
    uid: str
    kind: str
    namespace: str
    name: str
    operation: str
    user: str
    groups: tuple[str, ...]
    object: Any = None          # decoded JSON; _MISSING when the request had none
    old_object: Any = None


@dataclasses.dataclass
class Response:
    uid: str
    allowed: bool
    message: str = ""
    patch: list[dict[str, Any]] | None = None

    def review(self) -> bytes:
        """The AdmissionReview answer (admissionResponseBuilder: status only with a message,
        patch only when there is one)."""
        response: dict[str, Any] = {"uid": self.uid, "allowed": self.allowed}
        if self.message:
            response["status"] = {"metadata": {}, "message": self.message}
        if self.patch:
            response["patch"] = base64.b64encode(orjson.dumps(self.patch)).decode()
            response["patchType"] = "JSONPatch"
        return orjson.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
                             "response": response})


def _is(value: Any, kind: type | tuple[type, ...]) -> bool:
    return value is None or isinstance(value, kind)


def _strings(value: Any) -> bool:
    return value is None or (isinstance(value, list) and all(_is(v, str) for v in value))


def _valid_request(req: Any) -> bool:
    if not isinstance(req, dict):
        return False
    for key in ("uid", "namespace", "name", "operation", "subResource"):
        if not _is(req.get(key), str):
            return False
    kind, user = req.get("kind"), req.get("userInfo")
    if not _is(kind, dict) or not _is(user, dict):
        return False
    if kind and not all(_is(kind.get(k), str) for k in ("group", "version", "kind")):
        return False
    if user:
        if not _is(user.get("username"), str) or not _is(user.get("uid"), str):
            return False
        if not _strings(user.get("groups")):
            return False
        extra = user.get("extra")
        if not _is(extra, dict) or (extra and not all(_strings(v) for v in extra.values())):
            return False
    return _is(req.get("dryRun"), bool)


def decode(body: bytes) -> Request | None:
    """The request of an AdmissionReview body, or None when Go's decoder would fail."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict) or not _valid_request(doc.get("request")):
        return None
    req = doc["request"]
    user = req.get("userInfo") or {}
    return Request(uid=req.get("uid") or "", kind=(req.get("kind") or {}).get("kind") or "",
                   namespace=req.get("namespace") or "", name=req.get("name") or "",
                   operation=req.get("operation") or "", user=user.get("username") or "",
                   groups=tuple(g or "" for g in user.get("groups") or ()),
                   object=req.get("object", _MISSING), old_object=req.get("oldObject", _MISSING))


GO_TYPES = {str: "string", int: "number", float: "number", bool: "bool", dict: "object",
            list: "array"}


def go_type(value: Any) -> str:
    """The JSON type as Go's decoder names it in its errors."""
    return GO_TYPES.get(type(value), "null")


def _string_map(value: Any, field: str) -> tuple[dict[str, str], str | None]:
    if value is None:
        return {}, None
    if not isinstance(value, dict):
        return {}, (f"json: cannot unmarshal {go_type(value)} into Go struct field "
                    f"ObjectMeta.metadata.{field} of type map[string]string")
    for v in value.values():
        if not _is(v, str):
            return {}, (f"json: cannot unmarshal {go_type(v)} into Go struct field "
                        f"ObjectMeta.metadata.{field} of type string")
    return {k: v or "" for k, v in value.items()}, None


def object_meta(obj: Any, type_name: str) -> tuple[dict[str, str], dict[str, str], str | None]:
    """(labels, annotations, error) of an object as Go decodes it into `type_name`."""
    if obj is _MISSING:
        return {}, {}, "unexpected end of JSON input"
    if obj is None:
        return {}, {}, None
    if not isinstance(obj, dict):
        return {}, {}, f"json: cannot unmarshal {go_type(obj)} into Go value of type {type_name}"
    meta = obj.get("metadata")
    if meta is None:
        return {}, {}, None
    if not isinstance(meta, dict):
        return {}, {}, (f"json: cannot unmarshal {go_type(meta)} into Go struct field "
                        f"{type_name.split('.')[-1]}.metadata of type v1.ObjectMeta")
    labels, err = _string_map(meta.get("labels"), "labels")
    if err:
        return {}, {}, err
    annotations, err = _string_map(meta.get("annotations"), "annotations")
    return labels, annotations, err


def dig(obj: Any, *path: str) -> Any:
    """obj[path[0]][path[1]]..., None where a step is missing or not an object."""
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


__all__ = ["INVALID_UID", "Request", "Response", "decode", "dig", "go_type", "object_meta"]
