"""The exporter's status: what `ykshm status`, /ws/v1/metrics and read replicas learn about it.

The exporter keeps one `ExportStatus` and, every STATUS_SECONDS, writes it as JSON to
`/dev/shm/NAME.export` (atomically: a temporary file renamed over it; `ykshm run` removes it with
the instance's other segments) and, while Redis answers, as the hash `ykshm:{NAME}:exporter`
(read replicas take the engine's liveness from it: they cannot see its pid or the ring header).

Lag is counted two ways: in events (the ring's next id minus the exporter's next id) and in time
(age of the oldest event not yet in Redis; 0 when caught up). `lag_buckets` is a histogram of the
lag of each batch's oldest event at the moment Redis acknowledged the batch.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

import orjson

from common.runtimedir import write_private
from shm.errors import RingNotFoundError, ShmError
from shm.segment import open_checked, pid_exists, shm_dir

STATUS_SECONDS = 0.5
MAX_GENERATION = 2 ** 53        # a generation is the ms part of stream IDs; Lua numbers are exact to here
MAX_STATUS_BYTES = 1 << 16      # the document is about 1 KB: anything larger was not written by us
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0)


def status_path(name: str) -> str:
    return os.path.join(shm_dir(), f"{name}.export")


@dataclasses.dataclass
class ExportStatus:
    """Everything the exporter reports about itself (field names are the JSON keys)."""

    pid: int = 0
    redis: str = ""                 # the URL, password redacted
    redis_node: str = ""            # host:port of the node holding the stream
    connected: bool = False
    state: str = "starting"         # starting | waiting_for_ring | waiting_for_leader | exporting | retrying | stopped
    last_error: str = ""
    last_error_nano: int = 0
    redis_errors: int = 0
    instance_uuid: str = ""
    generation: int = 0
    last_event_id: int = -1         # of the current generation, acknowledged by Redis
    last_stream_id: str = ""
    next_event_id: int = 0          # the ring's next id (as of the last status update)
    lag_events: int = 0
    lag_ms: float = 0.0
    exported: int = 0               # events acknowledged by Redis since start
    duplicates: int = 0             # events Redis refused as already present (re-sent)
    gaps: int = 0                   # gap records written
    events_lost: int = 0            # events named by those gap records
    batches: int = 0
    lag_buckets: list[int] = dataclasses.field(default_factory=lambda: [0] * (len(LAG_BUCKETS) + 1))
    lag_sum: float = 0.0
    state_generation: int = -1
    state_exported_nano: int = 0
    engine_pid: int = 0
    engine_alive: bool = False
    engine_heartbeat_nano: int = 0
    ring_capacity: int = 0
    updated_nano: int = 0

    def observe_lag(self, seconds: float) -> None:
        index = len(LAG_BUCKETS)
        for i, bound in enumerate(LAG_BUCKETS):
            if seconds <= bound:
                index = i
                break
        self.lag_buckets[index] += 1
        self.lag_sum += seconds

    def failed(self, reason: str) -> None:
        self.connected = False
        self.state = "retrying"
        self.last_error = reason
        self.last_error_nano = time.time_ns()
        self.redis_errors += 1

    def to_json(self) -> bytes:
        return orjson.dumps(dataclasses.asdict(self))

    def redis_fields(self) -> dict[str, Any]:
        """The flat fields of the `exporter` hash (numbers and strings only)."""
        doc = dataclasses.asdict(self)
        doc.pop("lag_buckets")
        return {k: (int(v) if isinstance(v, bool) else v) for k, v in doc.items()}


class StatusFileRefused(ShmError):
    """NAME.export exists but must not be believed: planted by another user, a symlink, or not a
    document an exporter writes; `str()` names the file and the reason."""


def write_file(name: str, status: ExportStatus) -> None:
    """Replace /dev/shm/NAME.export through a tempfile of our own (no predictable name another
    user could plant a symlink at); 0640 like the other segments, so readers can apply the same
    owner and mode checks (`shm.segment.trust_problem`) to it."""
    write_private(status_path(name), status.to_json(), 0o640)


def read_file(name: str) -> dict[str, Any] | None:
    """The last status an exporter of instance NAME wrote, or None (no exporter ever ran).

    Opened as the segments are (`open_checked`: O_NOFOLLOW, a regular file of a trusted owner,
    mode no wider than 0640) and checked field by field, because `ykshm status`, the metrics
    and the next exporter's generation all believe it: StatusFileRefused otherwise."""
    path = status_path(name)
    try:
        fd = open_checked(path)
    except RingNotFoundError:
        return None
    except ShmError as exc:  # a symlink, another owner, a wide mode, unreadable
        raise StatusFileRefused(str(exc)) from None
    with os.fdopen(fd, "rb") as fh:
        raw = fh.read(MAX_STATUS_BYTES + 1)
    problem = "larger than an exporter writes" if len(raw) > MAX_STATUS_BYTES else None
    try:
        doc = orjson.loads(raw) if problem is None else None
    except ValueError:
        problem = "not JSON"
    problem = problem or document_problem(doc)
    if problem is not None:
        raise StatusFileRefused(f"refusing {path}: {problem}; remove it if it is not ykshm's")
    return doc


_INT_RANGES = {"pid": (0, 2 ** 22), "generation": (0, MAX_GENERATION),
               "last_event_id": (-1, 2 ** 63 - 1), "exported": (0, 2 ** 63 - 1)}


def document_problem(doc: Any) -> str | None:
    """Why a parsed status document is not one an exporter writes, or None."""
    if not isinstance(doc, dict):
        return "not a JSON object"
    for key, (low, high) in _INT_RANGES.items():
        value = doc.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            return f"{key} {value!r} is not an integer in {low}..{high}"
    return None


def valid_generation(value: Any) -> int | None:
    """`value` (an int, or Redis's bytes) as a generation 1..2^53, or None if it is not one."""
    if isinstance(value, bytes | str):
        text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
        value = int(text) if text.isdigit() and len(text) <= 16 else None
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 1 <= value <= MAX_GENERATION else None


def exporter_alive(doc: dict[str, Any]) -> bool:
    return doc.get("state") != "stopped" and pid_exists(int(doc.get("pid") or 0))


def summary_line(doc: dict[str, Any]) -> str:
    """The `export:` line of `ykshm status`."""
    alive = exporter_alive(doc)
    head = f"pid {doc.get('pid')} {'running' if alive else 'not running'} -> {doc.get('redis')}"
    if doc.get("redis_node"):
        head += f" (node {doc['redis_node']})"
    last = doc.get("last_stream_id") or "none"
    text = (f"{head}, {doc.get('state')}, last exported {last} (event {doc.get('last_event_id')}), "
            f"lag {doc.get('lag_events', 0):,} events / {doc.get('lag_ms', 0.0):.1f} ms, "
            f"{doc.get('exported', 0):,} exported, {doc.get('gaps', 0)} gaps "
            f"({doc.get('events_lost', 0):,} events lost)")
    if doc.get("last_error") and (doc.get("state") == "retrying" or not doc.get("connected")):
        text += f", last error: {doc['last_error']}"
    return text


def metric_families_for(name: str) -> list:
    """The `ykshm_export_*` families of instance NAME's exporter; [] if none ever ran here, or
    if its status file is refused (a planted file never reports `ykshm_export_up 1`)."""
    try:
        doc = read_file(name)
    except StatusFileRefused:
        return []
    return [] if doc is None else metric_families(doc)


def metric_families(doc: dict[str, Any]) -> list:
    """Prometheus families (`ykshm_export_*`) of a status document."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

    def gauge(name: str, help_: str, value: float) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, help_, value=value)

    def counter(name: str, help_: str, value: float) -> CounterMetricFamily:
        return CounterMetricFamily(name, help_, value=value)

    up = 1.0 if exporter_alive(doc) and doc.get("connected") else 0.0
    out = [
        gauge("ykshm_export_up", "1 if the exporter runs and Redis answers it", up),
        gauge("ykshm_export_lag_events", "Events in the ring not yet in Redis", doc.get("lag_events", 0)),
        gauge("ykshm_export_lag_seconds", "Age of the oldest event not yet in Redis", doc.get("lag_ms", 0.0) / 1000),
        gauge("ykshm_export_last_event_id", "Last event id Redis acknowledged", doc.get("last_event_id", -1)),
        gauge("ykshm_export_generation", "Stream generation of the current engine instance", doc.get("generation", 0)),
        counter("ykshm_export_events", "Events exported to Redis", doc.get("exported", 0)),
        counter("ykshm_export_duplicates", "Re-sent events Redis refused as already present", doc.get("duplicates", 0)),
        counter("ykshm_export_gaps", "Gap records written (the ring lapped the exporter)", doc.get("gaps", 0)),
        counter("ykshm_export_events_lost", "Events named by gap records", doc.get("events_lost", 0)),
        counter("ykshm_export_redis_errors", "Failed Redis round trips (each retried)", doc.get("redis_errors", 0)),
    ]
    buckets = doc.get("lag_buckets") or [0] * (len(LAG_BUCKETS) + 1)
    hist = HistogramMetricFamily("ykshm_export_batch_lag_seconds",
                                 "Lag of each batch's oldest event when Redis acknowledged it")
    cumulative, points = 0, []
    for bound, n in zip(LAG_BUCKETS, buckets):
        cumulative += n
        points.append((repr(bound), cumulative))
    cumulative += buckets[-1]
    points.append(("+Inf", cumulative))
    hist.add_metric([], points, doc.get("lag_sum", 0.0))
    out.append(hist)
    return out
