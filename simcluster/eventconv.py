"""core/v1 Event <-> events.k8s.io/v1 Event, one stored object seen through both APIs.

The store keeps the core/v1 form (what `kubectl get events` lists); `events.k8s.io/v1` reads convert
on the way out and writes convert on the way in, so an event the shim posts through either API
shows in both, as on a real cluster.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

# (events.k8s.io/v1 field, core/v1 field)
_RENAMED = (
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
)
_SAME = ("metadata", "eventTime", "series", "reportingInstance", "action", "reason", "related", "type")


def _convert(src: Obj, api_version: str, renamed: list[tuple[str, str]]) -> Obj:
    """The fields of `src` under their names in the other API: renamed is (to, from) pairs."""
    out: Obj = {"kind": "Event", "apiVersion": api_version}
    out.update((key, src[key]) for key in _SAME if key in src)
    out.update((to, src[frm]) for to, frm in renamed if frm in src)
    return out


def to_new(core: Obj) -> Obj:
    """A stored core/v1 Event as events.k8s.io/v1."""
    out = _convert(core, "events.k8s.io/v1", list(_RENAMED))
    out.setdefault("eventTime", None)
    return out


def to_core(new: Obj) -> Obj:
    """A posted events.k8s.io/v1 Event (already kind-checked) as core/v1."""
    out = _convert(new, "v1", [(old, newk) for newk, old in _RENAMED])
    if "source" not in out and new.get("reportingController"):
        src: Obj = {"component": new["reportingController"]}
        if new.get("reportingInstance"):
            src["host"] = new["reportingInstance"]
        out["source"] = src
    return out
