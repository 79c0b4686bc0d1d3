"""Timestamps as the apiserver writes them: UTC with `Z`, whole seconds for `metav1.Time`,
microseconds for `metav1.MicroTime`.

A client may send `2026-01-02T03:04:05.123456+01:00` (the Python client writes `datetime.isoformat()`);
the apiserver decodes it and encodes it back as `2026-01-02T02:04:05Z` (Time) or
`2026-01-02T02:04:05.123456Z` (MicroTime), and so do we, for the fields of the built-in kinds below.
A value that is not RFC 3339 is a 400 naming the field, as the apiserver's decoder refuses it.
Custom resources are left alone: their date-time fields are plain strings to the apiserver.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from .errors import BadRequest

TIME_FIELDS = frozenset({
    "creationTimestamp", "deletionTimestamp", "lastTransitionTime", "lastProbeTime", "lastHeartbeatTime",
    "startTime", "startedAt", "finishedAt", "firstTimestamp", "lastTimestamp", "timeAdded", "lastUpdateTime",
    "deprecatedFirstTimestamp", "deprecatedLastTimestamp",
})
MICRO_FIELDS = frozenset({"eventTime", "lastObservedTime", "acquireTime", "renewTime"})


def parse(value: str) -> dt.datetime:
    """An RFC 3339 time (`Z` or an offset, optional fraction) as an aware UTC datetime."""
    t = dt.datetime.fromisoformat(value.replace("z", "Z"))
    if t.tzinfo is None or "T" not in value.upper():
        raise ValueError("no time zone")
    return t.astimezone(dt.timezone.utc)


def format_time(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_OPAQUE = frozenset({"fieldsV1", "labels", "annotations", "data", "binaryData", "stringData", "selector",
                     "nodeSelector", "matchLabels"})  # maps of user strings: never times


def normalise(obj: Any) -> None:
    """Rewrite every known time field below `obj` in place (lists and maps walked)."""
    _walk(obj, None, False)


def _walk(obj: Any, where: Any, managed: bool) -> None:
    """`where` is the path as a chain of (parent, key) pairs: flattened only for an error message."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in _OPAQUE:
                continue
            if isinstance(value, str):
                if key in TIME_FIELDS or key in MICRO_FIELDS or (key == "time" and managed):
                    obj[key] = _normal((where, key), key, value)
            elif isinstance(value, (dict, list)):
                _walk(value, (where, key), managed or key == "managedFields")
    elif isinstance(obj, list):
        for i, item in enumerate(obj):
            if isinstance(item, (dict, list)):
                _walk(item, (where, i), managed)


def _path(where: Any) -> str:
    parts: list[str] = []
    while where is not None:
        where, key = where
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    return "".join(reversed(parts)).lstrip(".")


def _normal(where: Any, key: str, value: str) -> str:
    try:
        t = parse(value)
    except ValueError:
        raise BadRequest(f'{_path(where)}: parsing time "{value}" as "2006-01-02T15:04:05Z07:00": '
                         "cannot parse as RFC 3339") from None
    return format_micro(t) if key in MICRO_FIELDS else format_time(t)
