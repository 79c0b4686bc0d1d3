"""Validation of the events `ykshm ring publish` reads: one REST event JSON object per line.

A line is the event JSON of DESIGN.md ("Events") without `id` (the ring assigns ids; an `id` key
is accepted and ignored, so `ykshm ring dump --json A | ykshm ring publish --name B` copies events).
Every key is optional, as in the REST output, where zero and empty values are omitted:

    {"type":2,"objectID":"app-1","message":"..","timestampNano":1649167576110750000,
     "eventChangeType":2,"eventChangeDetail":201,"referenceID":"alloc-1",
     "resource":{"resources":{"memory":{"value":1024}}}}

`parse_line` returns the keyword arguments of `RingWriter.publish`, or raises `EventLineError`
whose text names the problem (the caller adds the line number). Nothing here touches the ring.
"""

from __future__ import annotations

from typing import Any

import orjson

from shm.events import EventChangeDetail, EventChangeType, EventRecordType, cut_message

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_KEYS = (
    "id",
    "type",
    "objectID",
    "message",
    "timestampNano",
    "eventChangeType",
    "eventChangeDetail",
    "referenceID",
    "resource",
)


class EventLineError(ValueError):
    """One input line is not a valid event; the text says why (without the line number)."""


def _enum_value(obj: dict[str, Any], key: str, enum_cls: type) -> int:
    value = obj.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise EventLineError(f"{key} must be an integer, got {_show(value)}")
    try:
        return int(enum_cls(value))
    except ValueError:
        raise EventLineError(f"{key} {value} is not a known {enum_cls.__name__}") from None


def _string(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise EventLineError(f"{key} must be a string, got {_show(value)}")
    if "\x00" in value:
        raise EventLineError(f"{key} must not contain a NUL character")
    return value


def _show(value: object) -> str:
    text = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode("utf-8", "replace")
    return text if len(text) <= 40 else text[:37] + "..."


def _resource(obj: dict[str, Any]) -> dict[str, int] | None:
    raw = obj.get("resource")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise EventLineError(f'resource must be an object {{"resources": {{...}}}}, got {_show(raw)}')
    extra = set(raw) - {"resources"}
    if extra:
        raise EventLineError(f"resource has unknown key {sorted(extra)[0]!r} (expected 'resources')")
    resources = raw.get("resources")
    if resources is None:
        return None
    if not isinstance(resources, dict):
        raise EventLineError(f"resource.resources must be an object, got {_show(resources)}")
    out: dict[str, int] = {}
    for name, quantity in resources.items():
        if not name:
            raise EventLineError("resource.resources has an empty resource name")
        where = f"resource.resources.{name}"
        if not isinstance(quantity, dict) or set(quantity) - {"value"}:
            raise EventLineError(f'{where} must be {{"value": <integer>}}, got {_show(quantity)}')
        value = quantity.get("value", 0)
        if isinstance(value, bool) or not isinstance(value, int):
            raise EventLineError(f"{where}.value must be an integer, got {_show(value)}")
        if not INT64_MIN <= value <= INT64_MAX:
            raise EventLineError(f"{where}.value {value} is out of the int64 range")
        out[name] = value
    return out or None


def parse_obj(obj: object) -> dict[str, Any]:
    """Validate one decoded event object; return `RingWriter.publish` keyword arguments."""
    if not isinstance(obj, dict):
        raise EventLineError(f"expected a JSON object, got {_show(obj)}")
    for key in obj:
        if key not in _KEYS:
            raise EventLineError(f"unknown key {key!r}")
    event_id = obj.get("id")
    if event_id is not None and (isinstance(event_id, bool) or not isinstance(event_id, int)):
        raise EventLineError(f"id must be an integer (it is ignored), got {_show(event_id)}")
    timestamp = obj.get("timestampNano", 0)
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        raise EventLineError(f"timestampNano must be an integer, got {_show(timestamp)}")
    if not 0 <= timestamp <= INT64_MAX:
        raise EventLineError(f"timestampNano {timestamp} is out of range (0 to 2^63-1)")
    return {
        "type": _enum_value(obj, "type", EventRecordType),
        "change_type": _enum_value(obj, "eventChangeType", EventChangeType),
        "change_detail": _enum_value(obj, "eventChangeDetail", EventChangeDetail),
        "object_id": _string(obj, "objectID"),
        "reference_id": _string(obj, "referenceID"),
        "message": cut_message(_string(obj, "message")),
        "resource": _resource(obj),
        "timestamp_nano": timestamp,
    }


def parse_line(line: bytes) -> dict[str, Any] | None:
    """Parse one NDJSON line; None for a blank line (skipped, as NDJSON readers do)."""
    if not line.strip():
        return None
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise EventLineError(f"not valid JSON ({exc.args[0] if exc.args else exc})") from None
    return parse_obj(obj)
