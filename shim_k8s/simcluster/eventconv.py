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


def to_new(core: Obj) -> Obj:
    """A stored core/v1 Event as events.k8s.io/v1."""
    out: Obj = {"kind": "Event", "apiVersion": "events.k8s.io/v1"}
    for key in _SAME:
        if key in core:
            out[key] = core[key]
    for new, old in _RENAMED:
        if old in core:
            out[new] = core[old]
    out.setdefault("eventTime", None)
    return out


def to_core(new: Obj) -> Obj:
    """A posted events.k8s.io/v1 Event (already kind-checked) as core/v1."""
    out: Obj = {"kind": "Event", "apiVersion": "v1"}
    for key in _SAME:
        if key in new:
            out[key] = new[key]
    for newk, oldk in _RENAMED:
        if newk in new:
            out[oldk] = new[newk]
    if "source" not in out and new.get("reportingController"):
        src: Obj = {"component": new["reportingController"]}
        if new.get("reportingInstance"):
            src["host"] = new["reportingInstance"]
        out["source"] = src
    return out
