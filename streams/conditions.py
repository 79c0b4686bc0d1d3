"""Status conditions of the controller's objects (a Job's, a ConsistentRegionOperator's, a
ParallelRegion's): the time stamp they carry and one condition replaced by type."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any


def now() -> str:
    """The current time as Kubernetes writes it in a status (RFC 3339, seconds, UTC)."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition_of(obj: Mapping[str, Any], type_: str) -> str | None:
    """The `status` of `obj`'s condition of that type (None: it has none)."""
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == type_:
            return cond.get("status")
    return None


def with_condition(conditions: list[dict[str, Any]], new: dict[str, Any]) -> list[dict[str, Any]]:
    """The list with `new` replacing the condition of its type (its transition time kept when
    the status did not change)."""
    out, seen = [], False
    for cond in conditions:
        if cond.get("type") == new["type"]:
            seen = True
            if cond.get("status") == new["status"]:
                new = {**new, "lastTransitionTime": cond.get("lastTransitionTime", new["lastTransitionTime"])}
            out.append(new)
        else:
            out.append(cond)
    return out if seen else [*out, new]
