"""GET /ws/v1/scheduler/healthcheck and GET /ws/v1/metrics.

Health is YuniKorn's document, `{"Healthy": bool, "HealthChecks": [{"Name", "Succeeded",
"Description", "DiagnosisMessage"}]}`, always answered 200 (the verdict is in the body, as YuniKorn
does). Checks:

- "Event ring": the ring segment is attached and readable.
- "Engine process": the ring's writer pid is a live process.
- "Engine heartbeat": the writer stored a heartbeat less than `heartbeat_timeout` seconds ago —
  a SIGSTOPped engine has a live pid but a stale heartbeat, so it is reported not live while the
  web keeps serving the history it left in the ring.
- "State snapshot": the engine has published its state, and the last publish could write it (a
  state too large for its segment fails this check with the engine's reason; web.sources.usable).
- "Configuration": the last configuration change (SIGHUP, or the shim's ConfigMaps) was applied.
  A refused one fails this check, naming why, but does not make `Healthy` false: the previous
  configuration stays in force and scheduling goes on, as in YuniKorn, whose health does not
  change when it refuses a config update (`WARNING_CHECKS`).
- "Leader election" (only when the instance's shim runs with `--leader-elect`): this replica is
  the leader or a warm standby (both healthy: a standby is ready to take over); the document
  then also carries `LeaderElection` {role, identity, holder, lease, leaseTransitions}, so a
  probe or `ykshm status` tells the active replica from the standby.

Metrics are rendered with prometheus_client from a custom collector, so one scrape of any worker
reports all workers: request counts/latencies and stream counters are summed from the shared
segment (`web.segment`), ring figures come from the ring header, `ykshm_export_*` from the status
file of the instance's exporter (`export.status`).
"""

from __future__ import annotations

import bisect
import time
from typing import TYPE_CHECKING, Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from common.shimstatus import config_notes, read_status, status_path
from export.status import metric_families_for
from shm.segment import pid_exists

from . import yunikorn_metrics
from .segment import CLOSE_REASONS, LATENCY_BUCKETS, STATUS_CLASSES, MetricLayout

if TYPE_CHECKING:
    from .app import App, Request


WARNING_CHECKS = frozenset({"Configuration"})
"""Checks reported but not counted in `Healthy` (nothing stopped working)."""


def _check(name: str, ok: bool, description: str, diagnosis: str) -> dict[str, Any]:
    return {"Name": name, "Succeeded": ok, "Description": description, "DiagnosisMessage": diagnosis}


def heartbeat_age(reader) -> float | None:
    """Seconds since the ring writer's last heartbeat; None if it never stored one."""
    beat = int(reader.heartbeat_nano())
    return (time.time_ns() - beat) / 1e9 if beat else None


def engine_live(app: "App", writer_alive: bool, age: float | None) -> bool:
    """The engine counts as live: its process runs and its heartbeat is recent (not SIGSTOPped)."""
    return writer_alive and age is not None and age <= app.options.heartbeat_timeout


def health_document(app: "App") -> dict[str, Any]:
    checks = []
    reader = None
    try:
        reader = app.ring.get()
        bounds = reader.bounds()
        checks.append(
            _check(
                "Event ring",
                True,
                "The event ring is attached",
                f"instance {reader.instance_uuid}, ids {bounds[0]}-{bounds[1]}" if bounds else
                f"instance {reader.instance_uuid}, empty",
            )
        )
    except Exception as exc:
        checks.append(_check("Event ring", False, "The event ring is attached", getattr(exc, "message", str(exc))))
    alive = False
    if reader is not None:
        try:
            alive = bool(reader.writer_alive())
            pid = reader.writer_pid
        except Exception:
            pid = 0
        checks.append(
            _check(
                "Engine process",
                alive,
                "The engine (ring writer) process is running",
                f"writer pid {pid} is alive" if alive else f"writer pid {pid} is not running",
            )
        )
        try:
            age = heartbeat_age(reader)
        except Exception:
            age = None
        checks.append(
            _check(
                "Engine heartbeat",
                engine_live(app, alive, age),
                f"The engine stored a heartbeat in the last {app.options.heartbeat_timeout:g}s",
                "no heartbeat ever" if age is None else f"last heartbeat {age:.3f}s ago",
            )
        )
    else:
        checks.append(_check("Engine process", False, "The engine (ring writer) process is running", "no ring"))
        checks.append(_check("Engine heartbeat", False, "The engine stored a recent heartbeat", "no ring"))
    doc = None
    try:
        doc = app.snapshot.doc()
        published = app.snapshot.published_nano()
        age = (time.time_ns() - published) / 1e9 if published else float("inf")
        checks.append(_check("State snapshot", True, "The engine has published its state",
                             f"published {age:.3f}s ago"))
    except Exception as exc:
        checks.append(_check("State snapshot", False, "The engine has published its state", getattr(exc, "message", str(exc))))
    shim_doc = shim_status(app.options.name)
    if shim_doc is not None:
        checks.append(shim_check(shim_doc))
    checks.append(config_check(doc, shim_doc))
    lead = (shim_doc or {}).get("leaderElection")
    if lead:
        checks.append(leader_check(shim_doc or {}, lead))
    health: dict[str, Any] = {
        "Healthy": all(c["Succeeded"] for c in checks if c["Name"] not in WARNING_CHECKS),
        "HealthChecks": checks}
    if lead:
        health["LeaderElection"] = {k: lead.get(k) for k in
                                    ("role", "identity", "holder", "lease", "leaseTransitions")}
    return health


def leader_check(shim_doc: dict[str, Any], lead: dict[str, Any]) -> dict[str, Any]:
    """Active/standby (`ykshm shim --leader-elect`): leader or standby, both healthy; a replica
    whose shim stopped is neither (its last role is history). A standby answers the REST API from
    its idle engine: the Service selects the leader."""
    alive = pid_exists(int(shim_doc.get("pid") or 0)) and not shim_doc.get("stopped")
    role = str(lead.get("role")) if alive else "stopped"
    holder = lead.get("holder") or "(none)"
    why = (f"{role} of lease {lead.get('lease')} as {lead.get('identity')}; holder {holder}, "
           f"transitions {lead.get('leaseTransitions')}")
    return _check("Leader election", alive, "This replica is the leader or a warm standby", why)


def config_check(doc: dict[str, Any] | None, shim_doc: dict[str, Any] | None) -> dict[str, Any]:
    """The last configuration change was applied (engine reloadError, the shim's refusal)."""
    engine = (doc or {}).get("engine") or {}
    cms = (shim_doc or {}).get("configMaps") or {}
    refused = cms.get("refused") if cms else engine.get("reloadError")  # the shim's has both
    source = engine.get("configSource") or "file"
    where = f"ConfigMaps in namespace {cms['namespace']}" if cms else source
    if refused:
        why = refused.get("reason") or refused.get("message")
        return _check("Configuration", False, "The last configuration change was applied",
                      f"refused, the previous configuration stays in force ({where}): {why}")
    notes = config_notes(shim_doc, engine)
    return _check("Configuration", True, "The last configuration change was applied",
                  f"from {where}" + (f"; not applied: {'; '.join(notes)}" if notes else ""))


def shim_status(name: str) -> dict[str, Any] | None:
    """The state the instance's shim publishes (common.shimstatus); None when this machine runs
    no shim for the instance (no status file: e.g. a read replica), so nothing is claimed."""
    try:
        return read_status(status_path(name))
    except (OSError, ValueError):
        return None


def shim_check(doc: dict[str, Any]) -> dict[str, Any]:
    """The Kubernetes shim of this instance: failed when its state machine is Failed or its
    process is gone."""
    alive = pid_exists(int(doc.get("pid") or 0)) and not doc.get("stopped")
    state = str(doc.get("state") or "unknown")
    ok = alive and state != "Failed"
    why = f"state {state}" + (f": {doc['failure']}" if doc.get("failure") else "") + \
        ("" if alive else f"; pid {doc.get('pid')} is not running")
    return _check("Kubernetes shim", ok, "The shim runs and its state machine is not Failed", why)


async def healthcheck(app: "App", req: "Request", send) -> None:
    await app.send_json(send, 200, orjson.dumps(health_document(app)))


class WorkerMetrics:
    """This worker's writes into its metrics region of the shared segment."""

    def __init__(self, app: "App", layout: MetricLayout) -> None:
        self.app = app
        self.layout = layout

    def request(self, route: str, status: int, seconds: float) -> None:
        index = self.layout.route_index.get(route)
        if index is None:
            return
        seg, layout = self.app.segment, self.layout
        seg.add(layout.status_cell(index, status))
        # the first bucket whose bound is >= seconds; len(LATENCY_BUCKETS) is +Inf
        seg.add(layout.bucket_cell(index, bisect.bisect_left(LATENCY_BUCKETS, seconds)))
        seg.add(layout.sum_cell(index), seconds)

    def stream_opened(self) -> None:
        self.app.segment.add(self.layout.streams_opened)

    def stream_direct(self) -> None:
        self.app.segment.add(self.layout.streams_direct)

    def stream_rejected(self) -> None:
        self.app.segment.add(self.layout.streams_rejected)

    def stream_closed(self, reason: str) -> None:
        index = CLOSE_REASONS.index(reason) if reason in CLOSE_REASONS else CLOSE_REASONS.index("error")
        self.app.segment.add(self.layout.streams_closed + index)


class _Collector:
    def __init__(self, app: "App", layout: MetricLayout) -> None:
        self.app = app
        self.layout = layout

    def collect(self):
        app, layout = self.app, self.layout
        cells = app.segment.sum_cells(layout.total_cells)

        requests = CounterMetricFamily(
            "ykshm_web_requests", "HTTP requests answered, by route and status class", labels=["route", "code"]
        )
        latency = HistogramMetricFamily(
            "ykshm_web_request_duration_seconds",
            "Time to answer a request (for streams: until the headers were sent)",
            labels=["route"],
        )
        for index, route in enumerate(layout.route_names):
            for k, klass in enumerate(STATUS_CLASSES):
                value = cells[layout.status_cell(index, (k + 2) * 100)]
                if value:
                    requests.add_metric([route, klass], value)
            cumulative = 0.0
            buckets = []
            for b, bound in enumerate(LATENCY_BUCKETS):
                cumulative += cells[layout.bucket_cell(index, b)]
                buckets.append((repr(bound), cumulative))
            cumulative += cells[layout.bucket_cell(index, len(LATENCY_BUCKETS))]
            buckets.append(("+Inf", cumulative))
            if cumulative:
                latency.add_metric([route], buckets, cells[layout.sum_cell(index)])
        yield requests
        yield latency

        total, hosts = app.segment.open_streams()
        yield GaugeMetricFamily("ykshm_web_streams_open", "Event streams open now, all workers", value=total)
        yield CounterMetricFamily(
            "ykshm_web_streams_opened", "Event streams accepted", value=cells[layout.streams_opened]
        )
        yield CounterMetricFamily(
            "ykshm_web_streams_rejected",
            "Event streams refused with 503 Too many streaming connections",
            value=cells[layout.streams_rejected],
        )
        yield CounterMetricFamily(
            "ykshm_web_streams_direct",
            "Event streams served on the raw socket (web.direct), not through hypercorn",
            value=cells[layout.streams_direct],
        )
        closed = CounterMetricFamily("ykshm_web_streams_closed", "Event streams ended, by reason", labels=["reason"])
        for r, reason in enumerate(CLOSE_REASONS):
            closed.add_metric([reason], cells[layout.streams_closed + r])
        yield closed

        try:
            reader = app.ring.get()
        except Exception:  # Unavailable: no ring (yet)
            reader = None
        capacity = GaugeMetricFamily("ykshm_ring_capacity", "Events the ring holds")
        fill = GaugeMetricFamily("ykshm_ring_fill_ratio", "Retained events / capacity")
        lowest = GaugeMetricFamily("ykshm_ring_lowest_id", "Lowest retained event id")
        highest = GaugeMetricFamily("ykshm_ring_highest_id", "Highest event id")
        rate = GaugeMetricFamily("ykshm_ring_events_per_second", "Publish rate of the engine (sampled)")
        alive = GaugeMetricFamily("ykshm_engine_alive", "1 if the engine process is alive and its heartbeat recent")
        beat_age = GaugeMetricFamily("ykshm_engine_heartbeat_age_seconds", "Seconds since the engine's last heartbeat")
        if reader is not None:
            bounds = reader.bounds()
            cap = int(reader.capacity)
            capacity.add_metric([], cap)
            retained = 0 if bounds is None else bounds[1] - bounds[0] + 1
            fill.add_metric([], retained / cap if cap else 0.0)
            lowest.add_metric([], 0 if bounds is None else bounds[0])
            highest.add_metric([], 0 if bounds is None else bounds[1])
            rate.add_metric([], app.watcher.events_per_second())
            age = heartbeat_age(reader)
            beat_age.add_metric([], -1.0 if age is None else age)
            alive.add_metric([], 1.0 if engine_live(app, reader.writer_alive(), age) else 0.0)
        else:
            alive.add_metric([], 0.0)
        yield from (capacity, fill, lowest, highest, rate, alive, beat_age)
        if reader is not None:
            yield from _ring_stats(reader)
        yield from metric_families_for(app.options.name)  # `ykshm export` on this machine, if any
        yield from _state_stats(app)
        try:
            doc = app.snapshot.doc()
        except Exception:  # no engine state (yet): YuniKorn's families are absent, not zero
            return
        yield from yunikorn_metrics.families(doc)


def _state_stats(app: "App") -> list[GaugeMetricFamily]:
    """What the state snapshot leaves out (engine.daotags): tags cut from its DAOs."""
    try:
        engine = app.snapshot.doc().get("engine") or {}
    except Exception:  # Unavailable: no snapshot (yet), or one that did not fit
        return []
    return [GaugeMetricFamily("ykshm_state_tags_truncated",
                              "Tags (pod labels) left out of the REST views of applications, "
                              "requests and allocations to keep each object small",
                              value=engine.get("daoTagsTruncated", 0))]


def _ring_stats(reader) -> list[GaugeMetricFamily]:
    """Every numeric field of RingReader.stats() as `ykshm_ring_stat_<field>`."""
    try:
        stats = reader.stats_dict()
    except Exception:
        return []
    out = []
    for key, value in stats.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        family = GaugeMetricFamily(f"ykshm_ring_stat_{key}", f"RingReader.stats().{key}")
        family.add_metric([], float(value))
        out.append(family)
    return out


class MetricsRenderer:
    def __init__(self, app: "App", layout: MetricLayout) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(app, layout))

    def render(self) -> bytes:
        return generate_latest(self.registry)


async def metrics(app: "App", req: "Request", send) -> None:
    body = app.metrics_renderer.render()
    await app.send_body(send, 200, body, CONTENT_TYPE_LATEST.encode("ascii"))
