"""Retained applications cannot freeze the state views (issue 26.7).

A state that no longer fits NAME.state used to leave every REST view serving the last good
snapshot as if current, with the healthcheck saying "State snapshot: Succeeded". Here a real
scheduler's state overflows a small segment, read by a real `ykshm web`.
"""

from __future__ import annotations

import httpx
import orjson

from bench.retention_bench import FinishingCluster
from engine.config import parse_config
from engine.snapshot import BYTES_PER_RETAINED_APP, SnapshotPublisher, build, snapshot_size
from shm import SnapshotWriter
from webharness import WebServer, cleanup, unique_name


UID = "spark-{:030d}"
"""36-character application IDs, as Kubernetes UIDs."""


def _cluster(max_retained: int) -> FinishingCluster:
    return FinishingCluster(parse_config({"service": {"maxRetainedApplications": max_retained}}))


def test_the_snapshot_is_sized_for_the_retained_apps_it_may_hold():
    cluster = _cluster(1000)
    cluster.finish(0, 50, UID)
    small = len(orjson.dumps(build(cluster.sched, fragments=True)))
    cluster.finish(50, 400, UID)
    per_app = (len(orjson.dumps(build(cluster.sched, fragments=True))) - small) / 400
    assert per_app < BYTES_PER_RETAINED_APP
    assert snapshot_size(1, 10_000) == 4096 + 2 * ((32 << 20) + 10_000 * BYTES_PER_RETAINED_APP)
    assert snapshot_size(3, 10_000) > snapshot_size(1, 10_000)


def test_an_overflowing_state_is_a_503_and_an_unhealthy_check_not_stale_data():
    name = unique_name()
    writer = SnapshotWriter.create(name, 4096 + 2 * 120_000)
    server = None
    try:
        cluster = _cluster(1000)
        publisher = SnapshotPublisher(cluster.sched, writer)
        cluster.finish(0, 5, UID)
        publisher.maybe_publish()
        server = WebServer(name, workers=1)
        assert httpx.get(server.url + "/ws/v1/partitions", timeout=10).status_code == 200
        cluster.finish(5, 200, UID)  # ~200 KB of retained applications: over the 117 KiB half
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
        cluster.sched.timing.max_retained = 20
        cluster.finish(205, 1, UID)
        publisher.maybe_publish()
        assert publisher.failure == ""
        apps = httpx.get(server.url + "/ws/v1/partition/default/applications", timeout=10)
        assert apps.status_code == 200 and len(apps.json()) == 20
    finally:
        if server is not None:
            server.stop()
        writer.close()
        cleanup(name)
