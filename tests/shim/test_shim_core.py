"""ShimCore driven directly: recovery order, running, releases, restart, orphans (no I/O).

`FakeEngine` applies the SI messages the core sends in order, acks every request that has an id,
and checks the invariant the recovery exists for: no node is schedulable while an existing
allocation of a bound pod on it is unknown to the engine.
"""

from __future__ import annotations

import orjson
import pytest
from shim_core_helpers import FakeEngine, node, pod, start

from shim_k8s import mapping
from shim_k8s.core import ShimCore
from shim_k8s.core.binding import MAX_BIND_ATTEMPTS
from shim_k8s.state import NodeState, ShimState


def test_nothing_sent_before_connect_and_registration():
    core = ShimCore()
    core.on_node("ADDED", node("n1"))
    core.on_pod("ADDED", pod("p1"))
    core.on_synced("nodes"), core.on_synced("pods")
    assert not core.take().si
    core.on_connect()
    msgs = core.take().si
    assert [m["type"] for m in msgs] == ["RegisterResourceManager"]
    assert core.state is ShimState.NEW


def test_recovery_message_order_and_states():
    nodes = [node("n1"), node("n2"), node("n3")]
    pods = [pod("b1", "n1"), pod("b2", "n2", app="app-2"), pod("pend", ""),
            pod("done", "n1", phase="Succeeded"), pod("other", "n3", sched="default-scheduler")]
    core, eng = start(nodes, pods)
    types = [(m["type"], m.get("nodes", [{}])[0].get("action") if m["type"] == "NodeRequest"
              else None) for m in eng.log]
    assert types == [("RegisterResourceManager", None), ("ApplicationRequest", None),
                     ("NodeRequest", "CREATE_DRAIN"), ("AllocationRequest", None),
                     ("NodeRequest", "DRAIN_TO_SCHEDULABLE"), ("AllocationRequest", None)]
    recovery_apps = eng.log[1]["new"]
    assert sorted(a["applicationID"] for a in recovery_apps) == ["app-1", "app-2"]
    assert sorted(a["allocationKey"] for a in eng.log[3]["allocations"]) == ["uid-b1", "uid-b2"]
    assert "asks" not in eng.log[3]
    assert [a["allocationKey"] for a in eng.log[5]["asks"]] == ["uid-pend"]
    occupied = {n["nodeID"]: n["occupiedResource"] for n in eng.log[2]["nodes"]}
    assert occupied["n3"] == {"resources": {"vcore": {"value": 1000}, "pods": {"value": 1}}}
    assert core.state is ShimState.RUNNING
    assert [t.new for t in core.machine.history] == ["Registered", "Recovering", "Running"]
    assert set(core.node_recovery.states.values()) == {NodeState.RECOVERED}
    assert eng.nodes == {"n1": True, "n2": True, "n3": True}


def test_no_node_schedulable_until_every_node_recovered():
    # hold back the acks: nothing may become schedulable
    core2, eng2 = start([node("n1"), node("n2")], [pod("b1", "n1")], auto_ack=False)
    core2.on_si({"type": "Ack", "replyTo": eng2.log[0]["id"]})
    eng2.pump()
    assert core2.state is ShimState.RECOVERING
    assert eng2.nodes == {"n1": False, "n2": False}
    assert core2.node_recovery.counts()["recovering"] == 2
    last = [m for m in eng2.log if "id" in m][-1]
    core2.on_si({"type": "Ack", "replyTo": last["id"]})
    eng2.pump()
    assert core2.node_recovery.counts()["recovered"] == 2
    assert core2.state is ShimState.RECOVERING   # drain-to-schedulable not acked yet
    drains = eng2.log[-1]
    assert drains["type"] == "NodeRequest" and {n["action"] for n in drains["nodes"]} == {
        "DRAIN_TO_SCHEDULABLE"}
    core2.on_si({"type": "Ack", "replyTo": drains["id"]})
    eng2.pump()
    assert core2.state is ShimState.RUNNING


def test_cordoned_node_stays_drained_after_recovery():
    core, eng = start([node("n1"), node("n2", unschedulable=True)])
    assert eng.nodes == {"n1": True, "n2": False}
    core.on_node("MODIFIED", node("n2"))
    eng.pump()
    assert eng.nodes["n2"] is True
    core.on_node("MODIFIED", node("n1", unschedulable=True))
    eng.pump()
    assert eng.nodes["n1"] is False


def test_running_asks_bind_and_release_and_app_removal():
    core, eng = start([node("n1")])
    core.on_pod("ADDED", pod("p1"))
    core.on_pod("ADDED", pod("p2"))
    eng.pump()
    assert sorted(eng.asks) == ["uid-p1", "uid-p2"]
    assert len([m for m in eng.log if m["type"] == "ApplicationRequest" and m.get("new")]) == 1
    eng.allocate("uid-p1", "n1")
    eng.pump()
    assert [(b.uid, b.node) for b in eng.binds] == [("uid-p1", "n1")]
    core.on_bind_result(eng.binds[0], ok=True)
    eng.pump()
    core.on_pod("MODIFIED", pod("p1", "n1"))
    eng.pump()
    assert eng.allocs == {"uid-p1": "n1"}
    # pending pod deleted -> ask released; bound pod succeeds -> allocation released
    core.on_pod("DELETED", pod("p2"))
    core.on_pod("MODIFIED", pod("p1", "n1", phase="Succeeded"))
    eng.pump()
    assert eng.asks == {} and eng.allocs == {}
    assert eng.apps == {}                       # no pods left: application removed
    last = eng.log[-1]
    assert last["type"] == "ApplicationRequest" and last["remove"][0]["applicationID"] == "app-1"


def test_pod_with_node_name_is_never_bound():
    core, eng = start([node("n1"), node("n2")])
    core.on_pod("ADDED", pod("p1"))
    eng.pump()
    core.on_pod("MODIFIED", pod("p1", "n2"))    # someone else bound it meanwhile
    eng.pump()
    assert eng.asks == {} and eng.allocs == {"uid-p1": "n2"}
    assert not eng.binds


def test_bind_failure_releases_and_retries_409_is_bound():
    core, eng = start([node("n1")])
    core.on_pod("ADDED", pod("p1"))
    eng.pump()
    eng.allocate("uid-p1", "n1")
    eng.pump()
    core.on_bind_result(eng.binds[-1], ok=False, reason="500 boom")
    eng.pump()
    rel = [m for m in eng.log if m.get("releases")][-1]["releases"]["allocationsToRelease"]
    assert rel[0]["terminationType"] == "STOPPED_BY_RM"
    assert eng.allocs == {} and "uid-p1" in eng.asks        # asked again
    assert eng.events[-1].reason == "FailedBinding"
    eng.allocate("uid-p1", "n1")
    eng.pump()
    core.on_bind_result(eng.binds[-1], ok=False, conflict=True, reason="409 already bound")
    eng.pump()
    assert eng.allocs == {"uid-p1": "n1"} and eng.asks == {}   # kept: already bound


def test_a_bind_that_keeps_failing_is_tried_exactly_max_bind_attempts_times():
    """POST binding failing every time (a 500, a webhook refusing pods/binding): the pod is bound
    MAX_BIND_ATTEMPTS (3) times, each failure a FailedBinding Warning, then given up: not asked
    of the engine nor bound again, rejected as `binding failed 3 times`."""
    assert MAX_BIND_ATTEMPTS == 3
    core, eng = start([node("n1")])
    core.on_pod("ADDED", pod("p1"))
    eng.pump()
    for attempt in range(1, MAX_BIND_ATTEMPTS + 1):
        assert "uid-p1" in eng.asks, f"attempt {attempt} was never asked"
        eng.allocate("uid-p1", "n1")
        eng.pump()
        assert len(eng.binds) == attempt
        core.on_bind_result(eng.binds[-1], ok=False, reason="500 boom")
        eng.pump()
    assert eng.asks == {} and eng.allocs == {} and len(eng.binds) == MAX_BIND_ATTEMPTS
    assert [e.reason for e in eng.events].count("FailedBinding") == MAX_BIND_ATTEMPTS
    assert core.rejected_asks["uid-p1"] == "binding failed 3 times"


def test_engine_restart_recovers_same_allocations_and_no_double_bind():
    core, eng = start([node("n1"), node("n2")], [pod("a", "n1"), pod("b", "n2")])
    core.on_pod("ADDED", pod("c"))
    eng.pump()
    eng.allocate("uid-c", "n1")
    eng.pump()
    bind_c = eng.binds[-1]
    before = dict(eng.allocs)
    # the engine dies while c's bind is in flight
    core.on_disconnect("engine killed")
    assert core.state is ShimState.NEW
    eng2 = FakeEngine(core)
    core.on_connect()
    eng2.pump()
    assert core.state is ShimState.REGISTERED            # waits for the bind in flight
    core.on_bind_result(bind_c, ok=True)
    eng2.pump()
    assert core.state is ShimState.RUNNING
    assert eng2.allocs == before == {"uid-a": "n1", "uid-b": "n2", "uid-c": "n1"}
    assert eng2.asks == {} and not eng2.binds             # c is not asked or bound again
    assert [t.new for t in core.machine.history][-4:] == ["New", "Registered", "Recovering",
                                                          "Running"]
    core.on_pod("MODIFIED", pod("c", "n1"))
    eng2.pump()
    assert eng2.allocs == before


def test_orphan_pod_held_until_node_appears():
    core, eng = start([node("n1")], [pod("orphan", "n9"), pod("ok", "n1")])
    assert core.state is ShimState.RUNNING
    assert eng.allocs == {"uid-ok": "n1"} and core.held_count() == 1
    core.on_node("ADDED", node("n9"))
    eng.pump()
    create = [m for m in eng.log if m["type"] == "NodeRequest"][-2]
    assert create["nodes"][0]["action"] == "CREATE_DRAIN"
    assert eng.allocs == {"uid-ok": "n1", "uid-orphan": "n9"}
    assert eng.nodes["n9"] is True and core.held_count() == 0
    assert core.node_recovery.get("n9") is NodeState.RECOVERED


def test_node_lost_while_recovering_and_return():
    core, eng = start([node("n1"), node("n2")], [pod("x", "n2")], auto_ack=False)
    core.on_si({"type": "Ack", "replyTo": 1})
    eng.pump()
    core.on_node("DELETED", node("n2"))         # lost while recovering
    eng.pump()
    assert core.node_recovery.get("n2") is NodeState.LOST
    eng.auto_ack = True
    for m in [m for m in eng.log if "id" in m][1:]:
        core.on_si({"type": "Ack", "replyTo": m["id"]})
    eng.pump()
    assert core.state is ShimState.RUNNING     # the lost node does not block recovery
    assert "uid-x" not in eng.allocs and core.held_count() == 1
    core.on_node("ADDED", node("n2"))          # it comes back: recovered, pod adopted
    eng.pump()
    assert eng.allocs == {"uid-x": "n2"} and eng.nodes["n2"] is True
    assert core.node_recovery.get("n2") is NodeState.RECOVERED


def test_other_scheduler_pods_are_occupied_resource_updates():
    core, eng = start([node("n1")])
    core.on_pod("ADDED", pod("o1", "n1", sched="default-scheduler", cpu="2"))
    eng.pump()
    upd = eng.log[-1]["nodes"][0]
    assert upd["action"] == "UPDATE"
    assert upd["occupiedResource"]["resources"]["vcore"]["value"] == 2000
    core.on_pod("MODIFIED", pod("o1", "n1", sched="default-scheduler", cpu="2", phase="Failed"))
    eng.pump()
    assert eng.log[-1]["nodes"][0]["occupiedResource"] == {"resources": {}}


def _bad_task_groups(name):
    bad = pod(name)
    bad["metadata"]["annotations"]["yunikorn.apache.org/task-groups"] = "{not json"
    return bad


def test_bad_pod_gets_event_and_rest_scheduled():
    core, eng = start([node("n1")])
    core.on_pod("ADDED", _bad_task_groups("bad"))
    core.on_pod("ADDED", pod("good"))
    eng.pump()
    assert list(eng.asks) == ["uid-good"]
    assert [(e.name, e.reason, e.type) for e in eng.events] == [("bad", "InvalidPod", "Warning"),
                                                               ("good", "Scheduling", "Normal")]
    assert "task-groups" in eng.events[0].message
    core.on_pod("MODIFIED", _bad_task_groups("bad"))
    eng.pump()
    assert len(eng.events) == 2                    # once per reason


def test_a_malformed_user_info_schedules_as_nobody():
    """YuniKorn's shim (utils.go GetUserFromPod) falls back to nobody instead of refusing."""
    core, eng = start([node("n1")])
    core.on_pod("ADDED", pod("odd", user="x\"broken"))
    eng.pump()
    assert list(eng.asks) == ["uid-odd"] and [e.reason for e in eng.events] == ["Scheduling"]
    assert eng.apps["app-1"]["ugi"] == {"user": "nobody", "groups": []}


def test_request_events_and_rejections_become_kube_events():
    core, eng = start([node("n1")])
    core.on_pod("ADDED", pod("p1"))
    eng.pump()
    eng.events.clear()
    core.on_si({"type": "EventRecords", "events": [
        {"type": 1, "objectID": "uid-p1", "referenceID": "app-1", "message": "waiting"}]})
    core.on_si({"type": "AllocationResponse", "rejected": [
        {"allocationKey": "uid-p1", "applicationID": "app-1", "reason": "too big"}]})
    eng.pump()
    assert [(e.reason, e.message) for e in eng.events] == [("Informational", "waiting"),
                                                         ("AskRejected", "too big")]


def _request_event(core, uid, message):
    core.on_si({"type": "EventRecords", "events": [
        {"type": 1, "objectID": uid, "referenceID": "app-1", "message": message}]})


def test_yunikorns_pod_events_tell_the_pods_story():
    """k8shim task.go / context.go: Scheduling, PodUnschedulable (once per kind), Informational,
    Scheduled, PodBindSuccessful, TaskCompleted, with their texts."""
    core, eng = start([node("n1")])
    core.on_pod("ADDED", pod("p1"))
    eng.pump()
    quota = "Request 'uid-p1' does not fit in queue 'root.a' (requested map[], available map[])"
    user = "Request 'uid-p1' exceeds the available user quota in queue 'root.a': limit reached"
    nodes = "Request 'uid-p1' does not fit on any of 1 nodes: 0/1 nodes are available: ..."
    for message in (quota, user, nodes):
        _request_event(core, "uid-p1", message)
    eng.allocate("uid-p1", "n1")
    eng.pump()
    core.on_bind_result(eng.binds[0], ok=True)
    core.on_pod("MODIFIED", pod("p1", "n1"))
    core.on_pod("MODIFIED", pod("p1", "n1", phase="Succeeded"))
    core.on_pod("MODIFIED", pod("p1", "n1", phase="Succeeded"))
    eng.pump()
    assert [(e.reason, e.message) for e in eng.events] == [
        ("Scheduling", "ns/p1 is queued and waiting for allocation"),
        ("Informational", quota),
        ("PodUnschedulable",
         "Task ns/p1 is skipped from scheduling because the queue quota has been exceed"),
        ("Informational", user),
        ("Informational", nodes),
        ("PodUnschedulable", "Task ns/p1 is pending for the requested resources become available"),
        ("Scheduled", "Successfully assigned ns/p1 to node n1"),
        ("PodBindSuccessful", "Pod ns/p1 is successfully bound to node n1"),
        ("TaskCompleted", "Task ns/p1 is completed"),
    ]
    assert {e.type for e in eng.events} == {"Normal"}


def test_node_deleted_in_running_decommissions_and_holds_pods():
    core, eng = start([node("n1"), node("n2")], [pod("a", "n1")])
    core.on_node("DELETED", node("n1"))
    eng.pump()
    assert "n1" not in eng.nodes and eng.allocs == {}
    assert core.held_count() == 1 and core.node_recovery.get("n1") is NodeState.LOST
    core.on_node("ADDED", node("n1"))
    eng.pump()
    assert eng.allocs == {"uid-a": "n1"}


def test_registration_refused_is_failed_sticky():
    core = ShimCore()
    core.on_connect()
    core.take()
    core.on_si({"type": "Error", "replyTo": 1, "message": "no such policy"})
    actions = core.take()
    assert core.state is ShimState.FAILED
    assert actions.transitions[-1].new == "Failed"
    core.on_connect()
    assert core.take().si == []


@pytest.mark.parametrize("n_nodes,n_pods", [(50, 400)])
def test_recovery_scale_batches(n_nodes, n_pods):
    nodes = [node(f"n{i}") for i in range(n_nodes)]
    pods = [pod(f"p{i}", f"n{i % n_nodes}", app=f"app-{i % 7}") for i in range(n_pods)]
    core, eng = start(nodes, pods)
    assert core.state is ShimState.RUNNING and len(eng.allocs) == n_pods
    assert len(eng.log) == 5       # register, apps, nodes, allocations, drains


def test_gang_app_creates_placeholders_once_and_deletes_replaced():
    groups = '[{"name": "workers", "minMember": 2, "minResource": {"cpu": "500m", "memory": "1Gi"}}]'
    core, eng = start([node("n1")])
    gang = pod("driver", app="gang-1")
    gang["metadata"]["annotations"].update({
        "yunikorn.apache.org/task-groups": groups,
        "yunikorn.apache.org/task-group-name": "workers",
        "yunikorn.apache.org/schedulingPolicyParameters":
            "placeholderTimeoutInSeconds=60 gangSchedulingStyle=Hard"})
    core.on_pod("ADDED", gang)
    actions = core.take()
    app = [m for m in actions.si if m["type"] == "ApplicationRequest"][0]["new"][0]
    assert app["placeholderAsk"] == {"resources": {"vcore": {"value": 1000},
                                                   "memory": {"value": 2 << 30},
                                                   "pods": {"value": 2}}}
    assert app["gangSchedulingStyle"] == "Hard" and app["executionTimeoutMilliSeconds"] == 60000
    names = [p["metadata"]["name"] for p in actions.creates]
    assert names == ["tg-gang-1-workers-0", "tg-gang-1-workers-1"]
    ph = actions.creates[0]
    assert ph["metadata"]["annotations"]["yunikorn.apache.org/placeholder"] == "true"
    assert ph["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "500m",
                                                                    "memory": str(1 << 30)}
    # the placeholders come back through the watch as our pods, asked as placeholders
    for p in actions.creates:
        p = {**p, "metadata": {**p["metadata"], "uid": "uid-" + p["metadata"]["name"]},
             "status": {"phase": "Pending"}}
        core.on_pod("ADDED", p)
    later = core.take()
    assert not later.creates                     # once per application
    asks = [a for m in later.si if m["type"] == "AllocationRequest" for a in m.get("asks", [])]
    assert [(a["placeholder"], a["taskGroupName"]) for a in asks] == [(True, "workers")] * 2
    # Reserving: the real pod's ask waits until every placeholder is placed
    assert not any(a["allocationKey"] == "uid-driver" for a in asks)
    core.on_si({"type": "AllocationResponse", "new": [
        {"allocationKey": "uid-tg-gang-1-workers-0", "applicationID": "gang-1", "nodeID": "n1"}]})
    assert not [a for m in core.take().si for a in m.get("asks", [])]
    core.on_si({"type": "AllocationResponse", "new": [
        {"allocationKey": "uid-tg-gang-1-workers-1", "applicationID": "gang-1", "nodeID": "n1"}]})
    released = core.take()
    assert len(released.binds) == 1
    assert [a["allocationKey"] for m in released.si for a in m.get("asks", [])] == ["uid-driver"]
    # the engine replaces a placeholder: the shim deletes that pod
    core.on_si({"type": "AllocationResponse", "released": [
        {"allocationKey": "uid-tg-gang-1-workers-0", "applicationID": "gang-1",
         "terminationType": "PLACEHOLDER_REPLACED"}]})
    assert core.take().deletes == [("ns", "tg-gang-1-workers-0")]
    # its watch events until it is gone (bound and Running, then terminating) do not hand it back
    # to the engine as an existing allocation (a gang of 3 showed placeholderData count 4)
    created = actions.creates[0]
    running = {**created, "metadata": {**created["metadata"], "uid": "uid-tg-gang-1-workers-0"},
               "spec": {**created["spec"], "nodeName": "n1"}, "status": {"phase": "Running"}}
    core.on_pod("MODIFIED", running)
    core.on_pod("MODIFIED", {**running, "metadata": {**running["metadata"],
                                                     "deletionTimestamp": "2026-11-28T00:00:00Z"}})
    assert not [a for m in core.take().si for a in m.get("allocations", [])]


def test_placeholders_carry_their_task_groups_placement():
    """YuniKorn copies a task group's nodeSelector/affinity/tolerations onto its placeholder
    pods, so placeholders hold nodes the real pods may use; the placeholders' asks then carry
    the same placement tag as the real pods'."""
    constraint = {"nodeSelector": {"disktype": "ssd"},
                  "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu",
                                   "effect": "NoSchedule"}]}
    groups = orjson.dumps([{"name": "w", "minMember": 1, "minResource": {"cpu": "500m"},
                            **constraint}]).decode()
    core, eng = start([node("n1")])
    gang = pod("driver", app="gang-2")
    gang["spec"].update(constraint)
    gang["metadata"]["annotations"].update({"yunikorn.apache.org/task-groups": groups,
                                            "yunikorn.apache.org/task-group-name": "w"})
    core.on_pod("ADDED", gang)
    (ph,) = core.take().creates
    assert ph["spec"]["nodeSelector"] == {"disktype": "ssd"}
    assert ph["spec"]["tolerations"] == constraint["tolerations"]
    ph = {**ph, "metadata": {**ph["metadata"], "uid": "uid-ph"}, "status": {"phase": "Pending"}}
    core.on_pod("ADDED", ph)
    (ask,) = [a for m in core.take().si for a in m.get("asks", [])]
    assert ask["placeholder"] is True
    assert ask["allocationTags"]["ykshm.io/placement"] == mapping.placement_of(gang["spec"])


def test_refused_existing_allocation_counts_as_occupied():
    core = ShimCore()
    eng = FakeEngine(core)
    core.on_node("ADDED", node("n1"))
    core.on_pod("ADDED", pod("bad-queue", "n1", app="app-x", cpu="3"))
    core.on_synced("nodes"), core.on_synced("pods")
    core.on_connect()
    eng.auto_ack = False
    eng.pump()
    core.on_si({"type": "Ack", "replyTo": 1})
    actions = core.take()
    assert [m["type"] for m in actions.si] == ["ApplicationRequest", "NodeRequest",
                                               "AllocationRequest"]
    # the engine rejects the application, then the allocation of its pod
    core.on_si({"type": "ApplicationResponse", "rejected": [
        {"applicationID": "app-x", "reason": "queue root.nope does not exist"}]})
    core.on_si({"type": "AllocationResponse", "rejected": [
        {"allocationKey": "uid-bad-queue", "applicationID": "app-x", "reason": "unknown app"}]})
    core.on_si({"type": "Ack", "replyTo": actions.si[-1]["id"]})
    follow = core.take()
    update = [m for m in follow.si if m["type"] == "NodeRequest"][0]["nodes"][0]
    assert update["action"] == "UPDATE"
    assert update["occupiedResource"]["resources"]["vcore"]["value"] == 3000
    assert {e.reason for e in follow.events} == {"AskRejected"}  # a bound pod runs on
    assert core.occupied("n1")["vcore"] == 3000
    core.on_pod("MODIFIED", pod("bad-queue", "n1", app="app-x", cpu="3", phase="Succeeded"))
    assert core.occupied("n1") == {}


def _recovering(nodes_=(node("n1"), node("n2"))):
    """A shim registered and recovering, its recovery messages not yet answered."""
    core, eng = start(list(nodes_), auto_ack=False)
    core.on_si({"type": "Ack", "replyTo": eng.held_acks.pop(0)})  # registration
    actions = core.take()
    assert core.state is ShimState.RECOVERING
    return core, [m for m in actions.si if "id" in m]


def test_an_error_reply_to_a_recovery_message_fails_the_shim():
    core, sent = _recovering()
    recover = [m for m in sent if m["type"] == "NodeRequest"][0]
    core.on_si({"type": "Error", "replyTo": recover["id"], "message": "node n1 already exists"})
    assert core.state is ShimState.FAILED
    assert "engine refused a recovery message: node n1 already exists" in core.status()["failure"]
    assert core.node_recovery.counts()["recovered"] == 0  # an errored node is not recovered


def test_a_recovery_past_its_deadline_fails_the_shim_and_only_that_recovery():
    from shim_k8s.core.registration import check_recovery_deadline

    core, _sent = _recovering()
    check_recovery_deadline(core, core.recoveries - 1, 30)  # an earlier recovery: nothing happens
    assert core.state is ShimState.RECOVERING
    check_recovery_deadline(core, core.recoveries, 30)
    assert core.state is ShimState.FAILED
    assert core.status()["failure"].startswith("recovery did not complete within 30 s (2 nodes still recovering")


async def test_the_watchdog_fails_a_recovery_that_outlives_its_timeout(autojump_clock):
    """Process side of the deadline: the shim's watchdog task tells the core loop once the
    recovery has run `recovery_timeout` seconds (trio's MockClock jumps there); the core fails,
    and the core loop then ends the process with ShimFailed (exit 1)."""
    import trio

    from kube.config import KubeConfig
    from shim_k8s.shim import RecoveryDeadline, Shim, ShimOptions

    core, _sent = _recovering()
    shim = Shim(ShimOptions(kube=KubeConfig(server="http://127.0.0.1:9"), name="t", recovery_timeout=30.0),
                core=core)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(shim._recovery_watchdog)
        start = trio.current_time()
        with trio.fail_after(120):  # virtual seconds: no deadline by then is a failure
            item = await shim._in_recv.receive()
        assert isinstance(item, RecoveryDeadline) and item.recovery == core.recoveries
        assert trio.current_time() - start >= 30.0
        nursery.cancel_scope.cancel()
    shim._apply(item)
    assert core.state is ShimState.FAILED


def test_an_accepted_app_is_ended_by_the_engine_not_removed_by_the_shim():
    """YuniKorn's lifecycle: the engine accepted app-1, so when its last pod ends the shim sends
    no RemoveApplication (the engine goes Completing -> Completed); once the engine says
    Completed, a new pod of the same application adds it again."""
    core, eng = start([node("n1")])
    core.on_pod("ADDED", pod("p1"))
    eng.pump()
    core.on_si({"type": "ApplicationResponse", "accepted": [{"applicationID": "app-1"}]})
    eng.allocate("uid-p1", "n1")
    eng.pump()
    core.on_bind_result(eng.binds[0], ok=True)
    core.on_pod("MODIFIED", pod("p1", "n1"))
    eng.pump()
    core.on_pod("MODIFIED", pod("p1", "n1", phase="Succeeded"))
    eng.pump()
    assert eng.allocs == {} and "app-1" in eng.apps  # released, not removed
    assert not any(m.get("remove") for m in eng.log if m["type"] == "ApplicationRequest")
    core.on_si({"type": "ApplicationResponse", "updated": [{"applicationID": "app-1", "state": "Completed"}]})
    del eng.apps["app-1"]  # the engine keeps it as Completed; a new submission is a new add
    core.on_pod("ADDED", pod("p9"))
    eng.pump()
    adds = [a["applicationID"] for m in eng.log if m["type"] == "ApplicationRequest" for a in m.get("new", [])]
    assert adds == ["app-1", "app-1"] and "uid-p9" in eng.asks


def test_the_pod_that_defines_an_application_is_its_originator():
    # YuniKorn's shim: the application's first pod owns it (its placeholders' owner) and its
    # task is the originator; the REST views mark its allocation so
    core, eng = start([node("n1")], [pod("first", "n1", app="app-1"), pod("later", "", app="app-1")])
    core.on_pod("ADDED", pod("other-app", "", app="app-2"))
    eng.pump()
    sent = {a["allocationKey"]: a.get("originator", False) for m in eng.log
            if m["type"] == "AllocationRequest" for a in (*m.get("allocations", ()), *m.get("asks", ()))}
    assert sent == {"uid-first": True, "uid-later": False, "uid-other-app": True}
