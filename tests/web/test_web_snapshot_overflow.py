"""Retained applications cannot freeze the state views (issue 26.7).

A state that no longer fits NAME.state used to leave every REST view serving the last good
snapshot as if current, with the healthcheck saying "State snapshot: Succeeded". Here a real
scheduler's state overflows a small segment, read by a real `ykshm web`.
"""

from __future__ import annotations

import httpx

from engine.config import parse_config
from engine.events_out import MemoryEventSink
from engine.resources import to_si
from engine.scheduler import Scheduler
from engine.snapshot import BYTES_PER_RETAINED_APP, SnapshotPublisher, build, snapshot_size
from shm import SnapshotWriter
from webharness import WebServer, cleanup, unique_name

import orjson


def _scheduler(max_retained: int) -> tuple[Scheduler, list[int]]:
    clock = [0]
    sched = Scheduler(parse_config({"service": {"maxRetainedApplications": max_retained}}),
                      MemoryEventSink(tracking=False), instance_uuid="u", ring_name="r",
                      clock=lambda: clock[0])
    sched.handle({"type": "RegisterResourceManager", "rmID": "rm"}, None)
    sched.handle({"type": "NodeRequest", "rmID": "rm", "nodes": [
        {"nodeID": "node-0", "action": "CREATE", "attributes": {"ready": "true"},
         "schedulableResource": to_si({"memory": 1 << 50, "vcore": 1 << 40, "pods": 1 << 30})}]}, "rm")
    return sched, clock


def _finish(sched: Scheduler, clock: list[int], first: int, count: int) -> None:
    """`count` applications (36-character IDs, as Kubernetes UIDs) each run a pod and complete."""
    ask = to_si({"memory": 1 << 30, "vcore": 1000, "pods": 1})
    for i in range(first, first + count):
        app = f"spark-{i:030d}"
        sched.handle({"type": "ApplicationRequest", "rmID": "rm", "new": [
            {"applicationID": app, "queueName": "", "ugi": {"user": "alice"},
             "tags": {"namespace": "default"}}]}, "rm")
        sched.handle({"type": "AllocationRequest", "rmID": "rm", "asks": [
            {"allocationKey": f"{app}-driver", "applicationID": app, "resourceAsk": ask}]}, "rm")
        sched.cycle(1.0)
        sched.handle({"type": "AllocationRequest", "rmID": "rm", "releases": {"allocationsToRelease": [
            {"applicationID": app, "allocationKey": f"{app}-driver", "terminationType": "STOPPED_BY_RM"}]}}, "rm")
        sched.take_outgoing()
    clock[0] += 31 * 10**9
    sched.cycle(1.0)
    sched.take_outgoing()


def test_the_snapshot_is_sized_for_the_retained_apps_it_may_hold():
    sched, clock = _scheduler(1000)
    _finish(sched, clock, 0, 50)
    small = len(orjson.dumps(build(sched, fragments=True)))
    _finish(sched, clock, 50, 400)
    per_app = (len(orjson.dumps(build(sched, fragments=True))) - small) / 400
    assert per_app < BYTES_PER_RETAINED_APP
    assert snapshot_size(1, 10_000) == 4096 + 2 * ((32 << 20) + 10_000 * BYTES_PER_RETAINED_APP)
    assert snapshot_size(3, 10_000) > snapshot_size(1, 10_000)


def test_an_overflowing_state_is_a_503_and_an_unhealthy_check_not_stale_data():
    name = unique_name()
    writer = SnapshotWriter.create(name, 4096 + 2 * 120_000)
    server = None
    try:
        sched, clock = _scheduler(1000)
        publisher = SnapshotPublisher(sched, writer)
        _finish(sched, clock, 0, 5)
        publisher.maybe_publish()
        server = WebServer(name, workers=1)
        assert httpx.get(server.url + "/ws/v1/partitions", timeout=10).status_code == 200
        _finish(sched, clock, 5, 200)  # ~200 KB of retained applications: over the 117 KiB half
        publisher.maybe_publish()
        assert publisher.failure
        views = httpx.get(server.url + "/ws/v1/partition/default/applications", timeout=10)
        assert views.status_code == 503
        message = views.json()["message"]
        assert "no longer fits its snapshot" in message and "service.maxRetainedApplications" in message
        health = httpx.get(server.url + "/ws/v1/scheduler/healthcheck", timeout=10).json()
        check = next(c for c in health["HealthChecks"] if c["Name"] == "State snapshot")
        assert health["Healthy"] is False and check["Succeeded"] is False
        assert "no longer fits" in check["DiagnosisMessage"]
        # the bound on retained applications brings it back: the oldest expire (APP_EXPIRED)
        sched.timing.max_retained = 20
        _finish(sched, clock, 205, 1)
        publisher.maybe_publish()
        assert publisher.failure == ""
        apps = httpx.get(server.url + "/ws/v1/partition/default/applications", timeout=10)
        assert apps.status_code == 200 and len(apps.json()) == 20
    finally:
        if server is not None:
            server.stop()
        writer.close()
        cleanup(name)
