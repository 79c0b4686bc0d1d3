"""The snapshot document, its rate-limited publisher, and the ring-backed event sink."""

from __future__ import annotations

import orjson
from engine_helpers import GI, Harness, res

from engine.events_out import RingEventSink
from engine.snapshot import SnapshotPublisher, build


def test_snapshot_document_shapes():
    h = Harness({"partitions": [{"name": "default", "queues": [{"name": "root", "queues": [
        {"name": "a", "resources": {"max": {"memory": "4Gi"}}, "maxapplications": 3}]}]}]})
    h.nodes("n1", cap=res(8, 8000))
    h.app("app-1", queue="root.a", user="bob")
    h.asks("app-1", "p1", "p2")
    h.cycle()
    doc = build(h.sched, pid=42)
    orjson.dumps(doc)  # serialisable as-is
    assert doc["engine"]["pid"] == 42 and doc["engine"]["rmIDs"] == ["rm-1"]
    part = doc["partitions"][0]
    assert part["name"] == "default" and part["totalNodes"] == 1
    assert part["applications"] == {"total": 1, "Running": 1}
    assert part["capacity"]["usedCapacity"]["memory"] == 2 * GI
    root = doc["queues"]["default"]
    assert root["queuename"] == "root" and root["children"][0]["queuename"] == "root.a"
    qa = root["children"][0]
    assert qa["maxResource"] == {"memory": 4 * GI} and qa["allocatedResource"]["memory"] == 2 * GI
    assert qa["runningApps"] == 1 and qa["maxRunningApps"] == 3 and qa["isLeaf"]
    assert qa["headroom"]["memory"] == 2 * GI
    app = doc["applications"]["default"][0]
    assert app["applicationID"] == "app-1" and app["applicationState"] == "Running"
    assert app["queueName"] == "root.a" and app["user"] == "bob"
    assert {a["allocationKey"] for a in app["allocations"]} == {"p1", "p2"}
    assert [s["applicationState"] for s in app["stateLog"]] == \
        ["Accepted", "Starting", "Running"]  # New is the start, not a change (YuniKorn)
    node = doc["nodes"]["default"][0]
    assert node["nodeID"] == "n1" and node["allocated"]["memory"] == 2 * GI
    assert node["available"]["memory"] == 6 * GI and len(node["allocations"]) == 2
    users = doc["usage"]["default"]["users"]
    assert users[0]["userName"] == "bob"


class _Writer:
    def __init__(self):
        self.docs = []

    def publish(self, doc):
        self.docs.append(doc)


def test_publisher_skips_when_nothing_changed():
    h = Harness()
    writer = _Writer()
    pub = SnapshotPublisher(h.sched, writer, min_interval=0.2)
    assert pub.maybe_publish()
    assert not pub.maybe_publish()
    h.nodes("n1")
    assert pub.maybe_publish()
    assert len(writer.docs) == 2
    assert pub.last_cost > 0 and pub.interval == max(0.2, pub.last_cost * 10.0)
    pub.last_cost = 0.1  # a costly build backs off to cost_factor x its cost
    assert pub.interval == 0.1 * 10.0


def test_ring_sink_publishes_and_forwards_request_events(ring_name):
    from shm import RingReader, RingWriter
    writer = RingWriter.create(ring_name, 1000, 100)
    try:
        sink = RingEventSink(writer, tracking=True, requests_enabled=True)
        sink.emit(2, 2, 203, "app-1", "", "hello", {"memory": 5})
        sink.request("pod-1", "app-1", "no room")
        reader = RingReader.attach(ring_name)
        ev = reader.read_range(0, 10)
        assert [(e.type, e.change_type, e.change_detail, e.object_id) for e in ev] == \
            [(2, 2, 203, "app-1")]
        assert ev[0].resource == {"memory": 5}
        reader.close()
        taken = sink.take_requests()
        assert [(e.object_id, e.reference_id, e.message) for e in taken] == \
            [("pod-1", "app-1", "no room")]
        assert sink.take_requests() == []
        off = RingEventSink(writer, tracking=False, requests_enabled=False)
        off.emit(2, 2, 203, "x")
        off.request("p", "a", "m")
        assert off.take_requests() == [] and writer.take_requests() == []
    finally:
        writer.close()
        writer.unlink()
