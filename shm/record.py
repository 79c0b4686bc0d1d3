"""`Event`: one event record as Python sees it, and its REST JSON.

The JSON of an event (DESIGN.md, "Events") has its keys in this order, a key whose value is zero
or empty omitted, except "id" which is always present::

    {"id":17,"type":2,"objectID":"app-1","message":"...","timestampNano":1649167576110750000,
     "eventChangeType":2,"eventChangeDetail":201,"referenceID":"alloc-1",
     "resource":{"resources":{"memory":{"value":1024},"vcore":{"value":1000}}}}

`Event.to_json()` is byte-identical to the C renderer in ring.c (strings escaped as orjson does:
\\" \\\\ \\b \\f \\n \\r \\t, other control characters \\u00xx, UTF-8 passed through; resource
names sorted).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import orjson

__all__ = ["Event"]


# JSON key and Event attribute of each key after "id" but "resource", in JSON order
_OPTIONAL_KEYS = (
    ("type", "type"),
    ("objectID", "object_id"),
    ("message", "message"),
    ("timestampNano", "timestamp_nano"),
    ("eventChangeType", "change_type"),
    ("eventChangeDetail", "change_detail"),
    ("referenceID", "reference_id"),
)


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """One event.  `id` is -1 for an event that has not been stored in a ring."""

    id: int = -1
    type: int = 0
    change_type: int = 0
    change_detail: int = 0
    timestamp_nano: int = 0
    object_id: str = ""
    reference_id: str = ""
    message: str = ""
    resource: dict[str, int] | None = None

    def to_obj(self) -> dict[str, Any]:
        """The REST JSON object (insertion-ordered dict, zero/empty keys omitted)."""
        d: dict[str, Any] = {"id": self.id}
        for key, attr in _OPTIONAL_KEYS:
            value = getattr(self, attr)
            if value:
                d[key] = value
        if self.resource:
            d["resource"] = {
                "resources": {k: {"value": self.resource[k]} for k in sorted(self.resource)}
            }
        return d

    def to_json(self) -> bytes:
        """The REST JSON of this event, byte-identical to the ring's C renderer."""
        return orjson.dumps(self.to_obj())

    @classmethod
    def from_json_obj(cls, obj: Mapping[str, Any], id: int = -1) -> "Event":
        """An Event from a REST JSON object (as `to_obj` makes); ValueError names a bad field."""
        if not isinstance(obj, Mapping):
            raise ValueError("event: expected a JSON object")

        def num(key: str, default: int = 0) -> int:
            v = obj.get(key, default)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"{key}: expected an integer, got {v!r}")
            return v

        def text(key: str) -> str:
            v = obj.get(key, "")
            if not isinstance(v, str):
                raise ValueError(f"{key}: expected a string, got {v!r}")
            return v

        resource = None
        raw = obj.get("resource")
        if raw is not None:
            res = raw.get("resources") if isinstance(raw, Mapping) else None
            if not isinstance(res, Mapping):
                raise ValueError("resource: expected {\"resources\": {name: {\"value\": int}}}")
            resource = {}
            for name, q in res.items():
                v = q.get("value", 0) if isinstance(q, Mapping) else q
                if isinstance(v, bool) or not isinstance(v, int):
                    raise ValueError(f"resource: value of {name!r} is not an integer")
                resource[name] = v
            resource = resource or None
        return cls(
            id=num("id", -1) if id == -1 else id,
            type=num("type"),
            change_type=num("eventChangeType"),
            change_detail=num("eventChangeDetail"),
            timestamp_nano=num("timestampNano"),
            object_id=text("objectID"),
            reference_id=text("referenceID"),
            message=text("message"),
            resource=resource,
        )


def _from_rendered(d: dict[str, Any]) -> Event:
    """Fast path for objects produced by the C renderer (trusted shape)."""
    res = d.get("resource")
    return Event(
        d["id"],
        d.get("type", 0),
        d.get("eventChangeType", 0),
        d.get("eventChangeDetail", 0),
        d.get("timestampNano", 0),
        d.get("objectID", ""),
        d.get("referenceID", ""),
        d.get("message", ""),
        {k: v["value"] for k, v in res["resources"].items()} if res else None,
    )
