"""The state views answer what Apache YuniKorn v1.8.0's REST answers (issue 32 item 3, the
differences `ykshm bench vs-yunikorn` found): its field names, its `omitempty` fields absent when
empty, its defaults, and nothing it does not answer. Shapes from YuniKorn's core
(pkg/webservice/dao, pkg/webservice/handlers.go) at v1.8.0-1."""

from __future__ import annotations

from engine_helpers import GI, Harness, res

from engine.snapshot import build
from shm.events import EventChangeDetail as D
from shm.events import EventChangeType as C
from shm.events import EventRecordType as T

CONFIG = {"partitions": [{"name": "default", "queues": [{"name": "root", "queues": [
    {"name": "capped", "resources": {"max": {"memory": "4Gi"}}},
    {"name": "open"}]}]}]}
PLACEMENT = {"ykshm.io/placement": '{"nodeSelector":{"zone":"a"}}', "kubernetes.io/meta/podName": "p"}


def _cluster() -> Harness:
    h = Harness(CONFIG)
    h.nodes("n1", cap=res(8, 8000), attributes={"si.io/hostname": "n1", "si.io/rackname": "/rack-default",
                                                 "si/node-partition": "default", "zone": "a"})
    return h


def _doc(h: Harness) -> dict:
    return build(h.sched, pid=1)


def _app(doc: dict, app_id: str) -> dict:
    return next(a for a in doc["applications"]["default"] if a["applicationID"] == app_id)


def test_a_running_application_answers_yunikorns_fields_only():
    h = _cluster()
    h.app("a", queue="root.open")
    h.asks("a", "p1", tags=PLACEMENT)
    h.cycle()
    app = _app(_doc(h), "a")
    # the state log opens with the first change (an application starts New)
    assert [s["applicationState"] for s in app["stateLog"]][0] == "Accepted"
    # no pending ask: YuniKorn's configs.MinPriority, not 0
    assert app["maxRequestPriority"] == -2**31
    for absent in ("pendingResource", "hasReserved", "reservations", "rejectedMessage", "requests",
                   "finishedTime", "placeholderData", "tags"):
        assert absent not in app, absent
    assert app["resourceHistory"] == {}  # a struct in YuniKorn: there, empty until a release
    alloc = app["allocations"][0]
    for absent in ("partition", "placeholder", "taskGroupName", "allocationID"):
        assert absent not in alloc, absent
    # the placement tag is the engine's, not the user's: no YuniKorn view has it
    assert "ykshm.io/placement" not in alloc["allocationTags"]
    assert alloc["allocationTags"]["kubernetes.io/meta/podName"] == "p"
    assert app["startTime"] < 10**13  # milliseconds, as YuniKorn's UnixMilli


def test_a_pending_ask_sets_max_request_priority_and_a_zero_one_is_absent():
    h = _cluster()
    h.app("hi", queue="root.open")
    h.asks("hi", "big", resource=res(64, 1000), priority=7)  # fits no node: stays pending
    h.app("zero", queue="root.open")
    h.asks("zero", "big0", resource=res(64, 1000))
    h.cycle()
    doc = _doc(h)
    assert _app(doc, "hi")["maxRequestPriority"] == 7
    assert "maxRequestPriority" not in _app(doc, "zero")  # omitempty: 0 is not said


def test_a_released_allocation_is_counted_in_resource_seconds_by_instance_type():
    h = _cluster()
    h.part.wall_clock = h.clock  # the times an allocation is made and released at
    h.app("a", queue="root.open")
    h.asks("a", "p1", resource=res(1, 100))
    h.cycle()
    h.clock.advance(3.6)  # whole seconds count, as YuniKorn's int64(Seconds())
    h.release("a", "p1")
    app = _app(_doc(h), "a")
    assert app["resourceHistory"] == {"resourceUsage": {"UNKNOWN": {"memory": 3 * GI, "vcore": 300}}}
    assert "usedResource" not in app and app["maxUsedResource"] == {"memory": GI, "vcore": 100}


def test_queues_answer_headroom_everywhere_and_abs_used_only_against_their_own_max():
    h = _cluster()
    h.app("a", queue="root.open")
    h.asks("a", "p1", resource=res(1, 100))
    h.cycle()
    root = _doc(h)["queues"]["default"]
    kids = {c["queuename"]: c for c in root["children"]}
    # root's max is the cluster: 8Gi - 1Gi left; a queue without max has its parent's headroom
    assert root["headroom"] == {"memory": 7 * GI, "vcore": 7900}
    assert kids["root.open"]["headroom"] == root["headroom"]
    assert kids["root.capped"]["headroom"] == {"memory": 4 * GI, "vcore": 7900}
    assert root["absUsedCapacity"] == {"memory": 12, "vcore": 1}
    assert "absUsedCapacity" not in kids["root.open"]  # no max of its own: nothing to compare
    assert root["sortingPolicy"] == "fair" and kids["root.open"]["sortingPolicy"] == "fifo"
    assert all(q["quotaPreemptionDelay"] == "0s" for q in (root, *kids.values()))


def test_nodes_answer_as_yunikorns_core_names_them():
    h = _cluster()
    node = _doc(h)["nodes"]["default"][0]
    assert node["attributes"]["si/node-partition"] == "[rm-1]default"  # YuniKorn's rmproxy
    assert node["attributes"]["si.io/rackname"] == "/rack-default"
    for absent in ("hostName", "rackName", "ready", "partition", "allocated", "utilized",
                   "allocations", "reservations", "occupied"):
        assert absent not in node, absent
    assert node["schedulable"] is True and node["isReserved"] is False


def test_an_idle_partition_says_no_usage_and_no_containers():
    h = _cluster()
    part = _doc(h)["partitions"][0]
    assert part["capacity"] == {"capacity": res(8, 8000)}
    assert "totalContainers" not in part and part["totalNodes"] == 1


def test_the_partition_size_is_the_root_queues_max_event():
    h = Harness(CONFIG)
    h.nodes("n1", cap=res(8, 8000), action="CREATE_DRAIN")
    h.handle({"type": "NodeRequest", "nodes": [{"nodeID": "n1", "action": "DRAIN_TO_SCHEDULABLE"}]})
    h.nodes("n2", cap=res(8, 8000))
    maxes = [e for e in h.sink.events if (e.type, e.change_type, e.detail) == (T.QUEUE, C.SET, D.QUEUE_MAX)]
    assert [(e.object_id, e.resource) for e in maxes] == [("root", res(8, 8000)), ("root", res(16, 16000))]
    sched = [e.message for e in h.sink.events if e.object_id == "n1" and e.detail == D.NODE_SCHEDULABLE]
    assert sched == ["schedulable: false", "schedulable: true"]  # YuniKorn's two, in its words


def test_the_originator_pods_allocation_says_so_and_no_other():
    h = _cluster()
    h.app("a", queue="root.open")
    h.handle({"type": "AllocationRequest", "asks": [
        {"allocationKey": "driver", "applicationID": "a", "resourceAsk": {"resources": {"vcore": {"value": 100}}},
         "originator": True},
        {"allocationKey": "executor", "applicationID": "a", "resourceAsk": {"resources": {"vcore": {"value": 100}}}}]})
    h.cycle()
    allocs = {a["allocationKey"]: a for a in _app(_doc(h), "a")["allocations"]}
    assert allocs["driver"]["originator"] is True
    assert "originator" not in allocs["executor"]  # omitempty
