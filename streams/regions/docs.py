"""ConsistentRegion documents <-> regions: the CRD spec (static) and status (dynamic) as JSON.

Why: the operator persists a region's status after every change and a restarted operator rebuilds
the region from it (`Region.from_status`), so the round trip must be exact. Keys are OpenStreams'
ConsistentRegionSpec field names. A document with a wrong or missing key raises InvalidRequest
naming the key and the value: a bad object is refused loudly, never half read.

Status keys: state (name), peToCompletion ({"<pe>": "None"|"CheckpointDone"|
"BlockingCheckpointDone"|"ResetDone"}), isRegionHealthy, isCleanStart, isHealthyFirstTime,
isMustReset, currentResetAttempt, currentMaxResetAttempts, currentSeqID, lastCompletedSeqID,
pendingSeqID, toRetireSeqID, currentTimerSeqId, and `metrics` (what the 8 metrics are computed from:
drainSamples, resetSamples, drainStartTimestamp, resetStartTimestamp, lastConsistentStateTime,
lastResetTime, lastCompletedDrain, lastCompletedReset).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .errors import InvalidRequest
from .vocabulary import PeStatus, RegionState

if TYPE_CHECKING:
    from .fsm import Region, RegionSpec

_INT_FIELDS = {
    "currentResetAttempt": "reset_attempt", "currentMaxResetAttempts": "max_reset_attempts",
    "currentSeqID": "current_seq", "lastCompletedSeqID": "last_completed_seq",
    "pendingSeqID": "pending_seq", "toRetireSeqID": "to_retire_seq", "currentTimerSeqId": "timer_seq",
}
_BOOL_FIELDS = {
    "isRegionHealthy": "healthy", "isCleanStart": "clean_start",
    "isHealthyFirstTime": "healthy_first_time", "isMustReset": "must_reset",
}
_METRIC_NUMBERS = {
    "drainStartTimestamp": "drain_start_ms", "resetStartTimestamp": "reset_start_ms",
    "lastConsistentStateTime": "last_consistent_state_time", "lastResetTime": "last_reset_time",
}
_METRIC_INTS = {"lastCompletedDrain": "last_completed_drain", "lastCompletedReset": "last_completed_reset"}


_TEXT = {s: s.value for s in PeStatus}
"""PeStatus -> its text, by a C-speed lookup (status_doc runs on every change of a 100-PE region)."""


def _bad(key: str, value: Any, want: str) -> InvalidRequest:
    return InvalidRequest(f"{key} must be {want}, not {value!r}", field=key)


def _int(doc: Mapping, key: str, default: Any = ...) -> int:
    value = doc.get(key, default)
    if value is ...:
        raise InvalidRequest(f"{key} is missing", field=key)
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.isascii():
            try:
                return int(value)
            except ValueError:
                pass
        raise _bad(key, value, "an integer")
    return value


def _number(doc: Mapping, key: str, default: Any = ...) -> float:
    value = doc.get(key, default)
    if value is ...:
        raise InvalidRequest(f"{key} is missing", field=key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(key, value, "a number")
    return float(value)


def _bool(doc: Mapping, key: str, default: Any = ...) -> bool:
    value = doc.get(key, default)
    if value is ...:
        raise InvalidRequest(f"{key} is missing", field=key)
    if not isinstance(value, bool):
        raise _bad(key, value, "true or false")
    return value


def _bool_map(doc: Mapping, key: str) -> dict[str, bool]:
    value = doc.get(key, {})
    if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, bool) for k, v in value.items()):
        raise _bad(key, value, "a map of operator name to true/false")
    return dict(value)


def spec_from_doc(cls: type["RegionSpec"], doc: Mapping) -> "RegionSpec":
    if not isinstance(doc, Mapping):
        raise InvalidRequest(f"a ConsistentRegion spec must be an object, not {doc!r}", field="spec")
    pes = doc.get("pesInRegion")
    if not isinstance(pes, list) or not pes:
        raise _bad("pesInRegion", pes, "a non-empty list of PE ids")
    pe_ids = {_int({"pesInRegion": p}, "pesInRegion") for p in pes}
    trigger = doc.get("trigger", "periodic")
    if not isinstance(trigger, str):
        raise _bad("trigger", trigger, "periodic or operatorDriven")
    return cls(
        index=_int(doc, "regionIndex"), trigger=trigger, period=_number(doc, "period", 0.0),
        drain_timeout=_number(doc, "drainTimeout", 180.0),
        reset_timeout=_number(doc, "resetTimeout", 180.0),
        max_attempts=_int(doc, "maxConsecutiveResetAttempts", 5), pes=frozenset(pe_ids),
        start_operators=_bool_map(doc, "operatorsToStartRegionMap"),
        trigger_operators=_bool_map(doc, "operatorsToTriggerMap"))


def status_to_doc(region: "Region") -> dict:
    m = region.metrics
    doc: dict[str, Any] = {
        "state": region.state.name,
        "peToCompletion": {str(pe): _TEXT[s] for pe, s in sorted(region.pe_to_completion.items())},
    }
    doc.update({key: getattr(region, attr) for key, attr in _BOOL_FIELDS.items()})
    doc.update({key: getattr(region, attr) for key, attr in _INT_FIELDS.items()})
    metrics: dict[str, Any] = {"drainSamples": list(m.drain_samples),
                               "resetSamples": list(m.reset_samples)}
    metrics.update({key: getattr(m, attr) for key, attr in _METRIC_NUMBERS.items()})
    metrics.update({key: getattr(m, attr) for key, attr in _METRIC_INTS.items()})
    doc["metrics"] = metrics
    return doc


def region_from_status(region: "Region", status: Mapping) -> "Region":
    if not isinstance(status, Mapping):
        raise InvalidRequest(f"a ConsistentRegion status must be an object, not {status!r}",
                             field="status")
    if not status:
        return region
    name = status.get("state", "STARTED")
    try:
        region.state = RegionState[name]
    except (KeyError, TypeError):
        raise _bad("state", name, "one of " + ", ".join(s.name for s in RegionState)) from None
    region.pe_to_completion = _pe_statuses(status.get("peToCompletion", {}), region, PeStatus)
    for key, attr in _BOOL_FIELDS.items():
        setattr(region, attr, _bool(status, key, getattr(region, attr)))
    for key, attr in _INT_FIELDS.items():
        setattr(region, attr, _int(status, key, getattr(region, attr)))
    metrics = status.get("metrics", {})
    if not isinstance(metrics, Mapping):
        raise _bad("metrics", metrics, "an object")
    m = region.metrics
    for key in ("drainSamples", "resetSamples"):
        samples = metrics.get(key, [])
        if not isinstance(samples, list) or not all(
                isinstance(s, (int, float)) and not isinstance(s, bool) for s in samples):
            raise _bad(f"metrics.{key}", samples, "a list of numbers")
        setattr(m, "drain_samples" if key == "drainSamples" else "reset_samples",
                [float(s) for s in samples][-10:])
    for key, attr in _METRIC_NUMBERS.items():
        setattr(m, attr, _number(metrics, key, getattr(m, attr)))
    for key, attr in _METRIC_INTS.items():
        setattr(m, attr, _int(metrics, key, getattr(m, attr)))
    return region


def _pe_statuses(value: Any, region: "Region", status_type: type) -> dict:
    if not isinstance(value, Mapping):
        raise _bad("peToCompletion", value, "a map of PE id to progress")
    out = {}
    for key, name in value.items():
        pe = _int({"peToCompletion": key}, "peToCompletion")
        try:
            progress = status_type(name)
        except ValueError:
            raise _bad(f"peToCompletion.{key}", name,
                       "None, CheckpointDone, BlockingCheckpointDone or ResetDone") from None
        if pe in region.spec.pes:   # a PE that left (a width change while no operator ran) is dropped:
            out[pe] = progress      # the region goes on with its members as the spec now names them
    return out
