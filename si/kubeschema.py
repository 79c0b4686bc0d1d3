"""Kubernetes API field rules: the placement tag's validator (`si.placement`) and the shim's
pod readers share them.

The engine checks a placement tag, and the shim builds it from a pod, with the same rules the
apiserver applies to the pod, so an error names the field where the user wrote it: every
reader here takes `where` (the field's path) and raises `ValueError("<where>: <why>")`. null
counts as absent, as Kubernetes decodes it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_INT64 = re.compile(r"[+-]?[0-9]+")  # Go's strconv.ParseInt(s, 10, 64): no spaces, no "_"
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def load(text: Any, kind: type, what: str) -> Any:
    """A JSON document of the given type from a tag or attribute string."""
    if not isinstance(text, str):
        raise ValueError(f"not a string but {type(text).__name__}")
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(doc, kind):
        raise ValueError(f"not a JSON {what}")
    return doc


def int64(text: str) -> int | None:
    """The integer Go's strconv.ParseInt(text, 10, 64) reads (a Gt/Lt value, a label value
    compared with one), or None if it is no int64."""
    if not _INT64.fullmatch(text):
        return None
    value = int(text)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


def string(value: Any, where: str) -> str:
    """A string field; null is the empty string."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{where}: must be a string, got {value!r}")
    return value


def nonempty(value: str, where: str) -> str:
    if not value:
        raise ValueError(f"{where}: must not be empty")
    return value


def obj(value: Any, where: str) -> Mapping[str, Any]:
    """An object field; null is {}."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: must be an object")
    return value


def array(value: Any, where: str) -> list[Any]:
    """A list field; null is []."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{where}: must be a list")
    return value


def one_of(value: str, allowed: tuple[str, ...], where: str) -> str:
    if value not in allowed:
        raise ValueError(f"{where}: {value!r} is not one of {', '.join(allowed)}")
    return value


def label_key(value: Any, where: str) -> str:
    """A label key (Kubernetes' qualified name): `[prefix/]name`, the name at most 63
    characters of alphanumerics, '-', '_', '.' starting and ending alphanumeric, the prefix a
    DNS subdomain of at most 253 characters."""
    key = nonempty(string(value, where), where)
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        raise ValueError(f"{where}: {key!r}: the prefix must be a DNS subdomain")
    if len(name) > 63 or not _NAME.fullmatch(name):
        raise ValueError(f"{where}: {key!r} is not a valid label key (at most 63 alphanumerics, "
                         f"'-', '_' or '.', starting and ending with an alphanumeric)")
    return key


def label_value(value: Any, where: str) -> str:
    """A label value: empty, or at most 63 characters like a label key's name."""
    text = string(value, where)
    if text and (len(text) > 63 or not _NAME.fullmatch(text)):
        raise ValueError(f"{where}: {text!r} is not a valid label value (at most 63 "
                         f"alphanumerics, '-', '_' or '.', starting and ending with an "
                         f"alphanumeric)")
    return text


def namespace_name(value: Any, where: str) -> str:
    """A namespace name: a DNS label (at most 63 lowercase alphanumerics or '-')."""
    text = nonempty(string(value, where), where)
    if len(text) > 63 or not _DNS_LABEL.fullmatch(text):
        raise ValueError(f"{where}: {text!r} is not a valid namespace name")
    return text
