"""Pod labels cannot overflow the state snapshot (security review 2, N8).

A user who may create pods gave each of a few pods thousands of labels (about 1 MB each); every
label became an ask tag copied into the application, request and allocation views, the state
outgrew its fixed-size segment and every REST state view answered 503, with `Healthy: false`,
for everyone. Here a real scheduler holds such pods, pending and running, published into a
segment that fits their normal share of state, and a real `ykshm web` serves it.
"""

from __future__ import annotations

import httpx

from bench.retention_bench import FinishingCluster
from engine.daotags import MAX_DAO_TAG_BYTES, TRUNCATED_TAG
from engine.snapshot import SnapshotPublisher
from shm import SnapshotWriter
from si.resources import to_si
from si.tags import LABEL_TAG_PREFIX, NAMESPACE_TAG, POD_NAME_TAG
from webharness import WebServer, cleanup, unique_name

LABELS_PER_POD = 6500
"""The review's pods: 6,500 labels each, about 1 MB of tags."""


def _fat_tags(pod: str) -> dict[str, str]:
    tags = {NAMESPACE_TAG: "team", POD_NAME_TAG: pod}
    tags.update({f"{LABEL_TAG_PREFIX}example.com/fat-{i:05d}": "v" * 63 for i in range(LABELS_PER_POD)})
    return tags


def _submit_fat_pods(cluster: FinishingCluster, count: int, *, fits: bool) -> None:
    sched = cluster.sched
    for i in range(count):
        app = f"fat-{'run' if fits else 'pending'}-{i}"
        sched.handle({"type": "ApplicationRequest", "rmID": "bench", "new": [
            {"applicationID": app, "queueName": "", "ugi": {"user": "alice"},
             "tags": {"namespace": "team"}}]}, "bench")
        ask = cluster.ask if fits else to_si({"memory": 1 << 60, "vcore": 1, "pods": 1})
        sched.handle({"type": "AllocationRequest", "rmID": "bench", "asks": [
            {"allocationKey": f"{app}-pod", "applicationID": app, "resourceAsk": ask,
             "allocationTags": _fat_tags(f"{app}-pod")}]}, "bench")
    sched.cycle(1.0)
    sched.take_outgoing()


def test_fat_pod_labels_leave_the_state_views_answering():
    name = unique_name()
    writer = SnapshotWriter.create(name, 4096 + 2 * 400_000)  # ~10x the state without the labels
    server = None
    try:
        cluster = FinishingCluster()
        publisher = SnapshotPublisher(cluster.sched, writer)
        _submit_fat_pods(cluster, 3, fits=True)    # running: allocation views
        _submit_fat_pods(cluster, 3, fits=False)   # pending: request views
        publisher.maybe_publish(force=True)
        assert publisher.failure == ""
        server = WebServer(name, workers=1)
        with httpx.Client(base_url=server.url, timeout=10) as client:
            for view in ("/ws/v1/partitions", "/ws/v1/partition/default/queues",
                         "/ws/v1/partition/default/applications", "/ws/v1/partition/default/nodes",
                         "/debug/fullstatedump"):
                assert client.get(view).status_code == 200, view
            health = client.get("/ws/v1/scheduler/healthcheck").json()
            check = next(c for c in health["HealthChecks"] if c["Name"] == "State snapshot")
            assert check["Succeeded"] is True, check  # (no event ring here: Healthy is the ring's)
            pending = client.get("/ws/v1/partition/default/application/fat-pending-0").json()
            running = client.get("/ws/v1/partition/default/application/fat-run-0").json()
            metrics = client.get("/ws/v1/metrics").text
        for tags in (pending["requests"][0]["allocationTags"],
                     running["allocations"][0]["allocationTags"]):
            # the names the UI and YuniKorn read are kept; the view says how much was cut
            assert tags[NAMESPACE_TAG] == "team" and POD_NAME_TAG in tags
            assert sum(len(k) + len(v) for k, v in tags.items()) <= MAX_DAO_TAG_BYTES + 64
            assert int(tags[TRUNCATED_TAG]) > LABELS_PER_POD - 100
        assert "ykshm_state_tags_truncated" in metrics
        line = next(x for x in metrics.splitlines() if x.startswith("ykshm_state_tags_truncated "))
        assert float(line.split()[1]) > 6 * (LABELS_PER_POD - 100)
    finally:
        if server is not None:
            server.stop()
        writer.close()
        cleanup(name)
