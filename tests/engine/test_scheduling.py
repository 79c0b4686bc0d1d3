"""Scheduling: ordering (fifo/fair, priority), quota and UGM limits, reservations, counting."""

from __future__ import annotations

import pytest
from engine_helpers import GI, Harness, res

from shm.events import EventChangeDetail as D
from shm.events import EventChangeType as C
from shm.events import EventRecordType as T


def leaf(name, **kw):
    return {"name": name, **kw}


def cfg(*queues, **root):
    return {"partitions": [{"name": "default",
                            "queues": [{"name": "root", "queues": list(queues), **root}]}]}


def test_asks_by_priority_then_age():
    h = Harness()
    h.nodes("n1", cap=res(2, 2000))
    h.app("a")
    h.asks("a", "low-old", priority=0)
    h.asks("a", "high", priority=10)
    h.asks("a", "low-new", priority=0)
    h.cycle()
    assert set(h.allocated()) == {"high", "low-old"}


@pytest.mark.parametrize("policy, ask_order, expected", [
    # fifo serves applications in submission order, whatever order their asks came in
    ("fifo", ("second", "first"), {"f1", "f2", "f3", "s1"}),
    # fair shares between applications
    ("fair", ("first", "second"), {"f1", "f2", "s1", "s2"}),
    ("fair", ("second", "first"), {"f1", "f2", "s1", "s2"}),
])
def test_application_sort_policy(policy, ask_order, expected):
    h = Harness(cfg(leaf("q", properties={"application.sort.policy": policy})))
    h.nodes("n1", cap=res(4, 4000))
    for app in ("first", "second"):
        h.app(app, queue="root.q")
    for app in ask_order:
        h.asks(app, *(f"{app[0]}{i}" for i in (1, 2, 3)))
    h.cycle()
    assert set(h.allocated()) == expected


@pytest.mark.parametrize("policy", ["fifo", "fair"])
@pytest.mark.parametrize("sorting, expected", [
    # YuniKorn's default `application.sort.priority: enabled`: the later app's higher-priority
    # asks go first; then the sort policy decides among equals
    (None, {"s1", "s2", "s3", "f1"}),
    ("enabled", {"s1", "s2", "s3", "f1"}),
    ("disabled", None),
])
def test_applications_sorted_by_priority_first(policy, sorting, expected):
    props = {"application.sort.policy": policy}
    if sorting is not None:
        props["application.sort.priority"] = sorting
    h = Harness(cfg(leaf("q", properties=props)))
    h.nodes("n1", cap=res(4, 4000))
    for app in ("first", "second"):
        h.app(app, queue="root.q")
    h.asks("first", "f1", "f2", "f3", priority=0)
    h.asks("second", "s1", "s2", "s3", priority=10)
    h.cycle()
    if expected is None:  # as without priorities: fifo first-come, fair shares
        expected = {"f1", "f2", "f3", "s1"} if policy == "fifo" else {"f1", "f2", "s1", "s2"}
    assert set(h.allocated()) == expected
    # the leaf counts the pending asks with a priority (0 puts it back on the fifo fast path)
    waiting = {"s1", "s2", "s3"} - set(h.allocated())
    assert h.part.queues["root.q"].prioritized == len(waiting)


def test_queues_sorted_by_share_of_guaranteed():
    h = Harness(cfg(leaf("a", resources={"guaranteed": {"memory": "1Gi"}}),
                    leaf("b", resources={"guaranteed": {"memory": "3Gi"}})))
    h.nodes("n1", cap=res(4, 4000))
    h.app("app-a", queue="root.a")
    h.app("app-b", queue="root.b")
    h.asks("app-a", *[f"a{i}" for i in range(4)])
    h.asks("app-b", *[f"b{i}" for i in range(4)])
    h.cycle()
    got = h.allocated()
    assert sum(k.startswith("a") for k in got) == 1 and sum(k.startswith("b") for k in got) == 3


def test_queue_max_is_enforced_with_a_request_event():
    h = Harness(cfg(leaf("small", resources={"max": {"memory": "2Gi"}})))
    h.nodes("n1")
    h.app("a", queue="root.small")
    h.asks("a", "p1", "p2", "p3")
    h.cycle()
    assert set(h.allocated()) == {"p1", "p2"}
    events = h.request_events()
    assert [e["objectID"] for e in events if "does not fit in queue" in e["message"]] == ["p3"]
    assert events[-1]["referenceID"] == "a"
    # the UGM increase for p3 was rolled back (seed order: user first, queue, rollback)
    users = h.part.ugm.users_json()
    assert users[0]["queues"]["resourceUsage"]["memory"] == 2 * GI
    h.cycle()
    assert len([e for e in h.request_events() if e["objectID"] == "p3"]) == 1  # once per ask


def test_parent_max_applies_to_children():
    h = Harness(cfg({"name": "p", "resources": {"max": {"memory": "1Gi"}},
                     "queues": [leaf("x"), leaf("y")]}))
    h.nodes("n1")
    h.app("a", queue="root.p.x")
    h.app("b", queue="root.p.y")
    h.asks("a", "a1")
    h.asks("b", "b1")
    h.cycle()
    assert len(h.allocated()) == 1


def test_queue_maxapplications_counts_running_apps():
    h = Harness(cfg(leaf("q", maxapplications=1)))
    h.nodes("n1")
    h.app("a", queue="root.q")
    h.app("b", queue="root.q")
    h.asks("a", "a1")
    h.asks("b", "b1")
    h.cycle()
    assert set(h.allocated()) == {"a1"}
    assert h.part.queues["root.q"].running_apps == 1
    h.release("a", "a1")  # a no longer runs
    assert h.part.queues["root.q"].running_apps == 0
    h.cycle()
    assert "b1" in h.allocated()
    assert h.part.queues["root.q"].running_apps == 1


def test_reservation_does_not_bypass_queue_maxapplications():
    h = Harness(cfg(leaf("q", maxapplications=1), leaf("default")))
    h.nodes("n1", cap=res(4, 4000))
    h.app("x")
    h.asks("x", "x1", resource=res(3, 100))
    h.cycle()
    h.app("a", queue="root.q")
    h.asks("a", "a1", resource=res(4, 100))
    h.cycle()
    assert h.part.nodes["n1"].reserved_for == ("a", "a1")
    h.nodes("n2", cap=res(1, 1000))
    h.app("b", queue="root.q")
    h.asks("b", "b1", resource=res(1, 100))
    h.cycle()
    assert h.allocated()["b1"] == "n2"  # b runs: root.q is full of applications
    h.release("x", "x1")  # the reserved node has room now, but a may not start
    h.cycle()
    assert "a1" not in h.allocated()
    assert h.part.queues["root.q"].running_apps == 1
    h.release("b", "b1")
    h.cycle()
    assert h.allocated()["a1"] == "n1"


def test_user_limits_enforced():
    h = Harness(cfg(leaf("q", limits=[
        {"limit": "bob", "users": ["bob"], "maxresources": {"memory": "2Gi"}},
        {"limit": "apps", "users": ["carol"], "maxapplications": 1}])))
    h.nodes("n1")
    h.app("bob-app", queue="root.q", user="bob")
    h.asks("bob-app", "b1", "b2", "b3")
    h.app("c1", queue="root.q", user="carol")
    h.app("c2", queue="root.q", user="carol")
    h.asks("c1", "c1-1")
    h.asks("c2", "c2-1")
    h.cycle()
    assert set(h.allocated()) == {"b1", "b2", "c1-1"}
    assert any("exceeds the available user quota" in e["message"] for e in h.request_events()
               if e["objectID"] == "b3")
    queue_usage = h.part.queues["root.q"].allocated["memory"]
    assert queue_usage == 3 * GI


def test_reservation_when_only_capacity_fits():
    h = Harness()
    h.nodes("n1", "n2", cap=res(4, 4000))
    h.app("small")
    h.asks("small", "s1", "s2", resource=res(3, 1000))
    h.cycle()
    h.app("big")
    h.asks("big", "b1", resource=res(4, 1000))
    h.cycle()
    node_ev = [(e.object_id, e.change_type, e.reference_id) for e in h.sink.events
               if e.type == int(T.NODE) and e.detail == int(D.NODE_RESERVATION)]
    assert len(node_ev) == 1 and node_ev[0][1] == int(C.ADD) and node_ev[0][2] == "b1"
    reserved = node_ev[0][0]
    assert h.part.nodes[reserved].reserved_for == ("big", "b1")
    h.asks("small", "s3", resource=res(1, 100))
    h.cycle()
    assert h.allocated()["s3"] != reserved  # the reserved node serves only its ask
    owner = [k for k, n in h.allocated().items() if n == reserved and k.startswith("s")][0]
    h.release("small", owner)
    h.cycle()
    assert h.allocated()["b1"] == reserved
    node_ev = [(e.object_id, e.change_type) for e in h.sink.events
               if e.type == int(T.NODE) and e.detail == int(D.NODE_RESERVATION)]
    assert node_ev[-1] == (reserved, int(C.REMOVE))
    assert h.part.nodes[reserved].reserved_for is None


def test_ask_that_fits_nowhere_reports_once():
    h = Harness()
    h.nodes("n1", cap=res(1, 1000))
    h.app("a")
    h.asks("a", "huge", resource=res(64, 1000))
    h.cycle(3)
    msgs = [e["message"] for e in h.request_events() if e["objectID"] == "huge"]
    assert len(msgs) == 2 and "added to queue" in msgs[0] and "does not fit on any" in msgs[1]


def test_tracking_and_request_switches():
    h = Harness(tracking=False, requests=False)
    h.nodes("n1")
    h.app("a")
    h.asks("a", "p1")
    h.cycle()
    assert h.sink.events == [] and h.request_events() == []
    assert h.allocated() == {"p1": "n1"}


def test_request_event_on_new_application_and_allocation():
    h = Harness()
    h.nodes("n1")
    h.app("a")
    h.asks("a", "p1")
    h.cycle()
    msgs = [(e["objectID"], e["referenceID"], e["eventChangeType"], e["eventChangeDetail"])
            for e in h.request_events()]
    assert msgs == [("p1", "a", 0, 0), ("p1", "a", 0, 0)]
    texts = [e["message"] for e in h.request_events()]
    assert "added to queue" in texts[0] and "allocated on node n1" in texts[1]


def test_running_application_counting_and_ugm_usage_follow_allocations():
    h = Harness()
    h.nodes("n1")
    h.app("a", user="dave")
    h.asks("a", "p1", "p2")
    h.cycle()
    root = h.part.root
    assert root.running_apps == 1
    assert h.part.ugm.users_json()[0]["queues"]["runningApplications"] == ["a"]
    h.release("a", "p1")
    assert root.running_apps == 1
    h.release("a", "p2")
    assert root.running_apps == 0
    assert h.part.ugm.users_json() == []


def test_reregister_wipes_rm_state():
    h = Harness()
    h.nodes("n1")
    h.app("a")
    h.asks("a", "p1")
    h.cycle()
    h.handle({"type": "RegisterResourceManager"}, None)
    assert not h.part.nodes and not h.part.apps and not h.part.terminated
    assert h.part.ugm.users_json() == []
    assert all(v == 0 for v in h.part.root.allocated.values())


def test_many_nodes_choice_is_spread_and_fast_fail_is_exact():
    h = Harness()
    h.nodes(*[f"n{i}" for i in range(50)], cap=res(2, 2000))
    h.app("a")
    h.asks("a", *[f"p{i}" for i in range(100)])
    assert h.cycle() == 100
    assert len(set(h.allocated().values())) == 50
    h.asks("a", "extra")
    assert h.cycle() == 0
    assert h.part.index.find({"memory": 1}) is None


def test_an_app_blocked_at_its_queue_max_adds_no_usergroup_event():
    """Queue max is checked before the UGM is touched: 10 s of cycles (at the engine's ~60 cycles
    a second) while an ask waits at its queue's max write no usage that never existed."""
    h = Harness(cfg(leaf("q", resources={"max": {"memory": "2Gi"}})))
    h.nodes("n1", cap=res(16, 16000))
    h.app("a", queue="root.q")
    h.asks("a", "a1", resource=res(2, 100))
    h.cycle()
    assert h.allocated() == {"a1": "n1"}
    h.asks("a", "a2", resource=res(1, 100))  # fits the node, not the queue
    before = [e for e in h.sink.events if e.type == T.USERGROUP]
    for _ in range(600):
        h.clock.advance(1 / 60)
        h.cycle()
    assert "a2" not in h.allocated()
    assert [e for e in h.sink.events if e.type == T.USERGROUP] == before


LIMIT_GROUP_ALICE = {"partitions": [{"name": "default", "queues": [{
    "name": "root", "submitacl": "*", "queues": [{"name": "default"}],
    "limits": [{"limit": "g", "groups": ["alice"], "maxapplications": 1}]}]}]}


def test_a_user_without_groups_has_the_primary_group_named_after_it():
    """YuniKorn's no-resolver cache (the k8shim's): group `alice` limits alice's pods that carry
    no groups (R3)."""
    h = Harness(LIMIT_GROUP_ALICE)
    h.nodes("n1")
    for app in ("a1", "a2"):
        h.app(app, user="alice")
        h.asks(app, f"{app}-p")
    h.cycle(3)
    assert h.part.apps["a1"].ugi.groups == ("alice",)
    assert [g["groupName"] for g in h.part.ugm.groups_json()] == ["alice"]
    assert set(h.allocated()) == {"a1-p"}  # the group's maxapplications 1 holds a2 back


def test_a_user_name_yunikorn_refuses_rejects_the_application_only_with_groups():
    h = Harness()
    h.app("bad", user="bad user", groups=("dev",))
    assert h.state("bad") == "Rejected"
    assert h.part.terminated["bad"].rejected_message == (
        "invalid username, it contains invalid characters")
    h.app("resolved", user="bad user")  # no groups: resolved, not checked (usergroup.go)
    assert h.state("resolved") != "Rejected"


def test_an_application_that_fell_back_to_root_default_says_which_queue_it_asked_for():
    """newcomer-2: pods labelled `root.nosuch`, `root..bad` or `nosuch` landed in root.default
    with nothing to tell the user; YuniKorn's fallback is kept, the first request event says it."""
    h = Harness()
    h.nodes("n1")
    for app_id, queue in (("typo", "root.nosuch"), ("plain", "nosuch"), ("ok", "root.default"), ("short", "default")):
        h.app(app_id, queue=queue)
        h.asks(app_id, f"{app_id}-p")
    h.cycle()
    first = {e["referenceID"]: e["message"] for e in reversed(h.request_events())}
    assert first["typo"] == ("Application typo added to queue root.default, not the queue 'root.nosuch' it "
                             "asked for (no such leaf queue it may use: placement fell back to root.default)")
    assert "not the queue 'nosuch'" in first["plain"]
    assert first["ok"] == "Application ok added to queue root.default"
    assert first["short"] == "Application short added to queue root.default"


@pytest.mark.parametrize("sorting", [None, "enabled"])
def test_equal_priority_apps_in_a_fifo_queue_run_oldest_first(sorting):
    """Under a globalDefault PriorityClass every pod carries the same non-zero priority (here
    1000): the priority sort then ties and fifo must still serve applications in submission
    order, oldest first, never the newest (YuniKorn's sortApplications: a stable sort by priority
    over the fifo order)."""
    props = {"application.sort.policy": "fifo"}
    if sorting is not None:
        props["application.sort.priority"] = sorting
    h = Harness(cfg(leaf("q", properties=props)))
    h.nodes("n1", cap=res(4, 4000))
    for app in ("a-10h00", "b-10h05", "c-10h10"):
        h.app(app, queue="root.q")
    for app in ("c-10h10", "a-10h00", "b-10h05"):       # ask arrival order does not matter
        h.asks(app, *(f"{app[0]}{i}" for i in (1, 2, 3)), priority=1000)
    h.cycle()
    assert set(h.allocated()) == {"a1", "a2", "a3", "b1"}
