"""Event sequences of application lifecycles: normal, gang Soft/Hard, rejected, failed, removed."""

from __future__ import annotations

import pytest
from engine_helpers import Harness, res

from engine.config import ConfigError, parse_config
from engine.events_out import MemoryEventSink
from engine.partition.timers import Timing
from engine.scheduler import Scheduler
from shm.events import EventChangeDetail as D
from shm.events import EventChangeType as C
from shm.events import EventRecordType as T

APP, ADD, REMOVE, SET = int(T.APP), int(C.ADD), int(C.REMOVE), int(C.SET)


def test_normal_lifecycle_events_and_states():
    h = Harness()
    h.nodes("n1")
    h.app("app-1")
    assert h.state("app-1") == "New"
    h.asks("app-1", "pod-1")
    assert h.state("app-1") == "Accepted"
    assert h.cycle() == 1
    assert h.allocated() == {"pod-1": "n1"}
    assert h.state("app-1") == "Running"
    h.release("app-1", "pod-1")
    assert h.state("app-1") == "Completing"
    h.clock.advance(31)
    h.cycle()
    assert h.state("app-1") == "Completed"
    h.clock.advance(3601)
    h.cycle()
    assert "app-1" not in h.part.terminated
    assert h.app_events("app-1") == [
        (APP, ADD, int(D.DETAILS_NONE), ""),
        (APP, SET, int(D.APP_NEW), ""),
        (APP, ADD, int(D.APP_REQUEST), "pod-1"),
        (APP, SET, int(D.APP_ACCEPTED), ""),
        (APP, ADD, int(D.APP_ALLOC), "pod-1"),
        (APP, SET, int(D.APP_STARTING), ""),
        (APP, SET, int(D.APP_RUNNING), ""),
        (APP, REMOVE, int(D.ALLOC_CANCEL), "pod-1"),
        (APP, SET, int(D.APP_COMPLETING), ""),
        (APP, SET, int(D.APP_COMPLETED), ""),
        (APP, SET, int(D.APP_EXPIRED), ""),
    ]
    # the node saw the allocation come and go; the dynamic queue came and went
    assert h.details("n1") == [int(D.DETAILS_NONE), int(D.NODE_ALLOC), int(D.NODE_ALLOC)]
    assert h.details("root.default") == [int(D.QUEUE_DYNAMIC), int(D.QUEUE_APP),
                                         int(D.QUEUE_APP), int(D.QUEUE_DYNAMIC)]
    updates = [u["state"] for m in h.responses if m["type"] == "ApplicationResponse"
               for u in m["updated"]]
    assert updates == ["Accepted", "Starting", "Running", "Completing", "Completed", "Expired"]


def test_starting_until_second_allocation_and_restart_from_completing():
    h = Harness()
    h.nodes("n1", cap=res(1, 1000))
    h.app("a")
    h.asks("a", "p1", "p2")
    h.cycle()
    assert h.state("a") == "Starting"  # p2 does not fit yet
    h.release("a", "p1")
    h.cycle()
    assert h.state("a") == "Running"
    h.release("a", "p2")
    assert h.state("a") == "Completing"
    h.asks("a", "p3")  # a restarted pod while completing
    assert h.state("a") == "Running"


def test_ask_released_by_shim_and_remove_app():
    h = Harness()
    h.app("a")
    h.asks("a", "p1", "p2")
    h.release_ask("a", "p1")
    assert (APP, REMOVE, int(D.APP_REQUEST), "p1") in h.app_events("a")
    h.remove_app("a")
    ev = h.app_events("a")
    assert (APP, REMOVE, int(D.REQUEST_CANCEL), "p2") in ev
    assert ev[-1] == (APP, REMOVE, int(D.DETAILS_NONE), "")
    assert "a" not in h.part.apps and "a" not in h.part.terminated


def test_rejected_application():
    h = Harness({"partitions": [{"name": "default", "queues": [
        {"name": "root", "queues": [{"name": "parent", "queues": [{"name": "leaf"}]},
                                    {"name": "default", "queues": [{"name": "x"}]}]}]}]})
    h.app("a", queue="root.parent")
    assert h.state("a") == "Rejected"
    resp = [m for m in h.responses if m["type"] == "ApplicationResponse" and m["rejected"]]
    assert resp[-1]["rejected"][0]["applicationID"] == "a"
    assert resp[-1]["rejected"][0]["reason"] == "failed to place application a: application rejected: no placement rule matched"
    assert h.app_events("a") == [(APP, ADD, 0, ""), (APP, SET, int(D.APP_NEW), ""),
                                 (APP, REMOVE, int(D.APP_REJECT), "")]
    h.clock.advance(3601)
    h.cycle()
    assert h.app_events("a")[-1] == (APP, SET, int(D.APP_EXPIRED), "")


def gang(h: Harness, style: str, timeout_ms: int = 5000, count: int = 2):
    h.app("g", gangSchedulingStyle=style, executionTimeoutMilliSeconds=timeout_ms)
    h.asks("g", *[f"ph-{i}" for i in range(count)], placeholder=True, task_group="tg",
           resource=res(1, 1000))


def test_gang_placeholders_replaced_by_real_asks():
    h = Harness()
    h.nodes("n1", "n2")
    gang(h, "Soft")
    h.cycle()
    assert set(h.allocated()) == {"ph-0", "ph-1"}
    h.asks("g", "real-0", task_group="tg", resource=res(1, 500))
    h.cycle()
    released = h.released()
    assert released[0]["terminationType"] == "PLACEHOLDER_REPLACED"
    replaced_key = released[0]["allocationKey"]
    assert h.allocated()["real-0"] == h.allocated()[replaced_key]  # on the placeholder's node
    ev = h.app_events("g")
    assert (APP, REMOVE, int(D.ALLOC_REPLACED), replaced_key) in ev
    assert ev.index((APP, REMOVE, int(D.ALLOC_REPLACED), replaced_key)) < \
        ev.index((APP, ADD, int(D.APP_ALLOC), "real-0"))
    app = h.part.apps["g"]
    assert app.placeholder_data["tg"]["replaced"] == 1
    node = h.allocated()["real-0"]
    assert [e["message"] for e in h.request_events() if e["objectID"] == "real-0"] == [
        f"Successfully allocated on node {node}"]  # a gang member is told too
    # the timeout now only cleans the remaining placeholder: no state change to Resuming
    h.clock.advance(6)
    h.cycle()
    assert h.state("g") == "Running"
    assert (APP, REMOVE, int(D.ALLOC_TIMEOUT), [k for k in ("ph-0", "ph-1")
                                                if k != replaced_key][0]) in h.app_events("g")


def test_gang_soft_timeout_resumes():
    h = Harness()
    h.nodes("n1", cap=res(1, 1000))
    gang(h, "Soft", count=2)  # only one placeholder fits
    h.asks("g", "real-0", resource=res(2, 500))  # does not fit anywhere
    h.cycle()
    assert h.state("g") == "Starting"  # ph-0 allocated, ph-1 and real-0 pending
    h.clock.advance(6)
    h.cycle()
    details = [e[2] for e in h.app_events("g") if e[1] == SET]
    assert int(D.APP_RESUMING) in details
    ev = h.app_events("g")
    assert (APP, REMOVE, int(D.ALLOC_TIMEOUT), "ph-0") in ev
    assert (APP, REMOVE, int(D.REQUEST_TIMEOUT), "ph-1") in ev
    assert h.state("g") == "Accepted"  # back to normal scheduling of real asks
    released = h.released()
    assert [r["terminationType"] for r in released] == ["TIMEOUT"]
    asks_released = [r for m in h.responses if m["type"] == "AllocationResponse"
                     for r in m["releasedAsks"]]
    assert [r["allocationKey"] for r in asks_released] == ["ph-1"]


def test_gang_hard_timeout_fails():
    h = Harness()
    h.nodes("n1", cap=res(1, 1000))
    gang(h, "Hard", count=2)
    h.asks("g", "real-0", resource=res(2, 500))
    h.cycle()
    h.clock.advance(6)
    h.cycle()
    sets = [e[2] for e in h.app_events("g") if e[1] == SET]
    assert sets[-2:] == [int(D.APP_FAILING), int(D.APP_FAILED)]
    ev = h.app_events("g")
    assert (APP, REMOVE, int(D.REQUEST_CANCEL), "real-0") in ev
    assert h.state("g") == "Failed"
    assert h.part.root.running_apps == 0
    assert not h.part.root.allocated or all(v == 0 for v in h.part.root.allocated.values())


def test_placeholder_size_mismatch_sends_request_event():
    h = Harness()
    h.nodes("n1", "n2")
    gang(h, "Soft", count=1)
    h.cycle()
    h.asks("g", "big", task_group="tg", resource=res(2, 500))
    h.cycle()
    msgs = [r for r in h.request_events() if r["objectID"] == "big"]
    assert any("not matching placeholder" in r["message"] for r in msgs)
    assert msgs[0]["referenceID"] == "g" and msgs[0]["type"] == 1
    assert (APP, REMOVE, int(D.ALLOC_TIMEOUT), "ph-0") in h.app_events("g")
    assert "big" in h.allocated()  # scheduled normally afterwards


def test_recovered_allocations_accepted_above_queue_max_and_node_drain():
    h = Harness({"partitions": [{"name": "default", "queues": [{"name": "root", "queues": [
        {"name": "small", "resources": {"max": {"memory": "1Gi"}}}]}]}]})
    h.nodes("n1", action="CREATE_DRAIN")
    assert not h.part.nodes["n1"].schedulable
    h.app("a", queue="root.small")
    h.handle({"type": "AllocationRequest", "allocations": [
        {"allocationKey": f"p{i}", "applicationID": "a", "nodeID": "n1",
         "resourcePerAlloc": {"resources": {"memory": {"value": 1 << 30}}}} for i in range(3)]})
    q = h.part.queues["root.small"]
    assert q.allocated["memory"] == 3 << 30  # above max: recovery accepts
    assert h.state("a") == "Running"
    assert h.cycle() == 0 and h.allocated() == {}  # recovered: nothing sent back
    h.handle({"type": "NodeRequest", "nodes": [{"nodeID": "n1",
                                                "action": "DRAIN_TO_SCHEDULABLE"}]})
    assert h.part.nodes["n1"].schedulable


def test_recovered_allocations_above_a_user_limit_are_tracked_for_that_user():
    """After a restart with a lowered user limit, the user's usage still equals what runs."""
    h = Harness({"partitions": [{"name": "default", "queues": [{"name": "root", "queues": [
        {"name": "small", "limits": [{"limit": "alice", "users": ["alice"],
                                      "maxresources": {"memory": "1Gi"}}]}]}]}]})
    h.nodes("n1", action="CREATE_DRAIN")
    h.app("a", queue="root.small", user="alice")
    h.handle({"type": "AllocationRequest", "allocations": [
        {"allocationKey": f"p{i}", "applicationID": "a", "nodeID": "n1",
         "resourcePerAlloc": {"resources": {"memory": {"value": 1 << 30}}}} for i in range(3)]})
    assert h.part.ugm.user_usage("alice", "root.small") == {"memory": 3 << 30}
    h.asks("a", "more", resource={"memory": 1 << 30})
    h.handle({"type": "NodeRequest", "nodes": [{"nodeID": "n1", "action": "DRAIN_TO_SCHEDULABLE"}]})
    h.cycle()
    assert "more" not in h.allocated()  # the limit still holds for new usage


def test_finished_apps_stay_visible_for_the_configured_retention_then_expire():
    config = parse_config({"service": {"applicationRetentionSeconds": 60}})
    assert config.retention_s == 60 and parse_config({}).retention_s == 3 * 24 * 3600  # YuniKorn: 3 days
    sched = Scheduler(config, MemoryEventSink(), instance_uuid="u", ring_name="r")
    assert sched.timing.retention_ns == 60 * 10**9
    with pytest.raises(ConfigError) as err:
        parse_config({"service": {"applicationRetentionSeconds": "-1"}})
    assert err.value.key == "service.applicationRetentionSeconds"
    h = Harness(timing=Timing(completing_s=30, retention_s=60))
    h.nodes("n1")
    h.app("a")
    h.asks("a", "p1")
    h.cycle()
    h.release("a", "p1")
    h.clock.advance(31)
    h.cycle()
    assert h.state("a") == "Completed"
    h.clock.advance(59)
    h.cycle()
    assert h.state("a") == "Completed"  # still visible
    h.clock.advance(2)
    h.cycle()
    assert h.app_events("a")[-1] == (APP, SET, int(D.APP_EXPIRED), "")


def test_retained_apps_are_bounded_and_the_oldest_expires_first():
    assert parse_config({"service": {"maxRetainedApplications": 2}}).max_retained_apps == 2
    h = Harness(timing=Timing(completing_s=30, retention_s=3600, max_retained=2))
    h.nodes("n1")
    for app in ("a", "b", "c"):
        h.app(app)
        h.asks(app, f"{app}-p")
        h.cycle()
        h.release(app, f"{app}-p")
        h.clock.advance(31)
        h.cycle()
        assert h.state(app) == "Completed"
    assert h.app_events("a")[-1] == (APP, SET, int(D.APP_EXPIRED), "")
    assert "a" not in h.part.terminated
    assert [app.app_id for app in h.part.all_apps()] == ["b", "c"]  # well before the retention time
    messages = [e.message for e in h.sink.events if e.object_id == "a" and e.detail == int(D.APP_EXPIRED)]
    assert messages == ["more than 2 finished applications retained"]


def test_a_placeholder_reported_bound_while_still_asked_counts_once():
    """The shim may report a placeholder pod it sees bound (an existing allocation) before the
    engine's own allocation of its ask: YuniKorn's placeholderData count stays the gang's size
    (a gang of 3 showed count 4 in `ykshm run`)."""
    from si import messages

    h = Harness()
    h.nodes("n1", "n2")
    gang(h, "Soft", count=3)
    assert h.part.apps["g"].placeholder_data["tg"]["count"] == 3
    h.handle(messages.AllocationRequest("rm-1", allocations=(messages.ExistingAllocation(
        "ph-0", "g", "n1", "default", res(1, 1000), placeholder=True, task_group_name="tg"),)))
    assert h.part.apps["g"].placeholder_data["tg"]["count"] == 3
