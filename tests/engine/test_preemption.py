"""Preemption (engine.partition.preemption): YuniKorn's test vectors, its rules, the SI path.

The vectors are YuniKorn core's preemption_test.go / queue_test.go cases, driven through the
scheduler as the shim would drive it: resources "first" and "pods", a fake monotonic clock for
the 30 s preemption delay.
"""

from __future__ import annotations

import json

import pytest
from engine_helpers import Harness

from engine.partition.preemption import Search
from shm.events import EventChangeDetail as D
from shm.events import EventChangeType as C
from shm.events import EventRecordType as T
from si import messages

MAY_PREEMPT = messages.PreemptionPolicy(allow_preempt_self=True, allow_preempt_other=True)
NOT_A_VICTIM = messages.PreemptionPolicy(allow_preempt_self=False, allow_preempt_other=True)
PREEMPTED = "PREEMPTED_BY_SCHEDULER"


def first(n: int) -> dict[str, int]:
    return {"first": n, "pods": 1}


def q(name: str, guaranteed: int | None = None, maximum: int | None = None, *children,
      **properties: str) -> dict:
    out: dict = {"name": name}
    resources = {}
    if guaranteed is not None:
        resources["guaranteed"] = {"first": guaranteed}
    if maximum is not None:
        resources["max"] = {"first": maximum}
    if resources:
        out["resources"] = resources
    if children:
        out["queues"] = list(children)
    if properties:
        out["properties"] = {k.replace("_", "."): v for k, v in properties.items()}
    return out


def config(*queues: dict, **partition) -> dict:
    return {"partitions": [{"name": "default", "queues": [{"name": "root",
                                                            "queues": list(queues)}],
                            **partition}]}


def run(h: Harness, app: str, queue: str, *keys: str, size: int = 5, priority: int = 0,
        policy: messages.PreemptionPolicy = MAY_PREEMPT) -> None:
    """Submit and allocate (one cycle per key, so the later ones are the newer)."""
    if app not in h.part.apps:
        h.app(app, queue=queue)
    for key in keys:
        h.asks(app, key, resource=first(size), priority=priority, preemption=policy)
        h.cycle()


def preempted(h: Harness) -> list[str]:
    return [r["allocationKey"] for r in h.released() if r["terminationType"] == PREEMPTED]


def reserved(h: Harness, key: str) -> str | None:
    for app in h.part.apps.values():
        if key in app.asks:
            return app.asks[key].reserved_node
    return None


def wait(h: Harness, seconds: float = 31) -> None:
    h.clock.advance(seconds)
    h.cycle()


# --- vector 1: TestTryPreemption ---------------------------------------------------------------

def vector1() -> Harness:
    """parent g10; child1 g5 uses 10 on the one node (alloc1 prio 0, alloc2 prio 1000: not a
    candidate, YuniKorn's "node-only" allocation); child2 g5 asks 5."""
    h = Harness(config(q("parent", 10, None, q("child1", 5), q("child2", 5))))
    h.nodes("node1", cap={"first": 10, "pods": 5})
    run(h, "app1", "root.parent.child1", "alloc1")
    run(h, "app1", "root.parent.child1", "alloc2", priority=1000)
    h.app("app2", queue="root.parent.child2")
    h.asks("app2", "ask3", resource=first(5), preemption=MAY_PREEMPT)
    return h


def test_vector1_victim_released_node_reserved_then_allocated_after_confirmation():
    h = vector1()
    h.cycle()
    assert preempted(h) == []
    wait(h)
    assert preempted(h) == ["alloc1"]
    [release] = [r for r in h.released() if r["allocationKey"] == "alloc1"]
    assert release["message"] == "preempting allocations to free up resources to run ask: ask3"
    assert release["applicationID"] == "app1"
    assert reserved(h, "ask3") == "node1"
    events = [e for e in h.request_events() if e["message"].startswith("Preempted")]
    assert [(e["objectID"], e["referenceID"], e["message"]) for e in events] == [
        ("alloc1", "app1", "Preempted by ask3 from application app2 in root.parent.child2")]
    # the victim stays booked (and counts as preempting) until the shim confirms
    assert "alloc1" in h.part.apps["app1"].allocations
    assert h.part.queues["root.parent.child1"].preempting["first"] == 5
    assert "ask3" not in h.allocated()
    before = len(h.sink.events)
    h.release("app1", "alloc1", PREEMPTED)
    removed = [e for e in h.sink.events[before:] if e.type == T.APP and e.object_id == "app1"]
    assert [(e.change_type, e.detail, e.reference_id) for e in removed] == [
        (C.REMOVE, D.ALLOC_PREEMPT, "alloc1")]
    assert h.part.queues["root.parent.child1"].preempting.get("first", 0) == 0
    h.cycle()
    assert h.allocated()["ask3"] == "node1"
    assert preempted(h) == ["alloc1"]  # the shim's confirmation is not echoed


def test_vector1_nothing_before_the_delay_and_never_twice():
    h = vector1()
    wait(h, 29)
    assert preempted(h) == []
    wait(h, 2)
    assert preempted(h) == ["alloc1"]
    wait(h, 120)
    assert preempted(h) == ["alloc1"]  # an ask preempts once


def test_preemption_delay_is_the_queue_property():
    h = Harness(config(q("parent", 10, None, q("child1", 5),
                         q("child2", 5, preemption_delay="2m"))))
    h.nodes("node1", cap={"first": 10, "pods": 5})
    run(h, "app1", "root.parent.child1", "alloc1", "alloc2")
    h.app("app2", queue="root.parent.child2")
    h.asks("app2", "ask3", resource=first(5), preemption=MAY_PREEMPT)
    wait(h, 100)
    assert preempted(h) == []
    wait(h, 21)
    assert preempted(h) == ["alloc2"]  # the newest of two equal victims


# --- vector 2: TestTryPreemptionOnNode ---------------------------------------------------------

def test_vector2_the_node_the_ask_may_use_is_chosen():
    """Two full nodes with one child1 allocation each; only node2 passes the ask's node
    predicates (YuniKorn's mock shim accepted node2): alloc2 is the victim, node2 reserved."""
    h = Harness(config(q("parent", 10, None, q("child1", 5), q("child2", 5))))
    h.nodes("node1", cap={"first": 5, "pods": 1}, attributes={"zone": "a"})
    h.nodes("node2", cap={"first": 5, "pods": 1}, attributes={"zone": "b"})
    run(h, "app1", "root.parent.child1", "alloc1", "alloc2")
    assert set(h.allocated().values()) == {"node1", "node2"}
    on_node2 = next(k for k, n in h.allocated().items() if n == "node2")
    h.app("app2", queue="root.parent.child2")
    h.asks("app2", "ask3", resource=first(5), preemption=MAY_PREEMPT,
           tags={"ykshm.io/placement": '{"nodeSelector":{"zone":"b"}}'})
    wait(h)
    assert preempted(h) == [on_node2]
    assert reserved(h, "ask3") == "node2"


# --- vector 3: ..._OnQueue_VictimsAvailable_LowerPriority --------------------------------------

def test_vector3_queue_max_blocks_lower_priority_victims_go_higher_stays():
    h = Harness(config(q("parent", None, 18, q("child1"), q("child2", 15), q("child3"))))
    h.nodes("node1", "node2", cap={"first": 30, "pods": 10})
    run(h, "app1", "root.parent.child1", "alloc1", "alloc2")
    run(h, "app3", "root.parent.child3", "alloc4", priority=1000)
    h.app("app2", queue="root.parent.child2")
    h.asks("app2", "alloc3", resource=first(10), preemption=MAY_PREEMPT)
    wait(h)
    assert sorted(preempted(h)) == ["alloc1", "alloc2"]
    # the queue's max still refuses the ask: no reservation, the cycle places it later
    assert reserved(h, "alloc3") is None
    for key in ("alloc1", "alloc2"):
        h.release("app1", key, PREEMPTED)
    h.cycle()
    assert "alloc3" in h.allocated()
    assert "alloc4" in h.part.apps["app3"].allocations


# --- vector 4: TestFindEligiblePreemptionVictims -----------------------------------------------

def _vector4(parent1: dict | None = None, parent2: dict | None = None,
             leaf2: dict | None = None, parent2_g: int = 100, fill_parent1: bool = False) -> int:
    """How many candidates an ask (prio 0) in parent1.leaf1 finds: leaf2 runs two allocations
    of priority -1000; both parents max 200, guaranteed 100."""
    p1 = q("parent1", 100, 200, q("leaf1"), **(parent1 or {}))
    p2 = q("parent2", parent2_g, 200, q("leaf2", **(leaf2 or {})), **(parent2 or {}))
    h = Harness(config(p1, p2))
    h.nodes("node1", cap={"first": 1000, "pods": 10})
    run(h, "app2", "root.parent2.leaf2", "alloc2", "alloc3", size=100, priority=-1000)
    if fill_parent1:
        run(h, "app3", "root.parent1.leaf1", "full", size=200)
    h.app("app1", queue="root.parent1.leaf1")
    h.asks("app1", "ask1", resource=first(100), preemption=MAY_PREEMPT)
    app = h.part.apps["app1"]
    return len(Search(h.part, app, app.asks["ask1"]).candidates)


@pytest.mark.parametrize("case, expected", [
    ({}, 2),
    ({"parent2": {"priority_offset": "1001"}}, 0),
    ({"leaf2": {"preemption_policy": "disabled"}}, 0),
    ({"parent2": {"preemption_policy": "disabled"}}, 0),   # inherited by leaf2
    ({"parent1": {"preemption_policy": "fence"}}, 0),
    ({"parent2": {"preemption_policy": "fence"}}, 2),
    ({"leaf2": {"preemption_policy": "fence"}}, 2),
    ({"parent2": {"priority_policy": "fence", "priority_offset": "1"}}, 0),
    ({"parent2": {"priority_policy": "fence", "priority_offset": "-1"}}, 2),
    ({"parent1": {"priority_policy": "fence", "priority_offset": "-1000"}}, 2),
    ({"parent1": {"priority_policy": "fence", "priority_offset": "-1001"}}, 0),
    ({"parent2_g": 200}, 0),
    ({"fill_parent1": True}, 0),                            # parent1 at max: fenced there
])
def test_vector4_eligible_victims(case, expected):
    assert _vector4(**case) == expected


# --- the rules ---------------------------------------------------------------------------------

def test_no_preemption_without_a_guarantee_on_the_asks_queue():
    h = Harness(config(q("a"), q("b")))
    h.nodes("node1", cap={"first": 10, "pods": 5})
    run(h, "app1", "root.a", "alloc1", "alloc2")
    run(h, "app2", "root.b")
    h.asks("app2", "ask", resource=first(5), preemption=MAY_PREEMPT)
    wait(h, 300)
    assert preempted(h) == []


def test_a_victims_queue_is_never_pushed_below_its_guarantee():
    h = Harness(config(q("a", 10), q("b", 5)))
    h.nodes("node1", cap={"first": 10, "pods": 5})
    run(h, "app1", "root.a", "alloc1", "alloc2")
    h.app("app2", queue="root.b")
    h.asks("app2", "ask", resource=first(5), preemption=MAY_PREEMPT)
    wait(h, 300)
    assert preempted(h) == []


def test_higher_priority_pods_are_not_victims():
    h = Harness(config(q("a", 0), q("b", 5)))
    h.nodes("node1", cap={"first": 10, "pods": 5})
    run(h, "app1", "root.a", "alloc1", "alloc2", priority=10)
    h.app("app2", queue="root.b")
    h.asks("app2", "ask", resource=first(5), priority=5, preemption=MAY_PREEMPT)
    wait(h)
    assert preempted(h) == []
    h.asks("app2", "urgent", resource=first(5), priority=10, preemption=MAY_PREEMPT)
    wait(h)
    assert preempted(h) == ["alloc2"]


def test_pods_that_refuse_preemption_go_last_and_lower_priority_first():
    h = Harness(config(q("a", 0), q("b", 5)))
    h.nodes("node1", cap={"first": 20, "pods": 5})
    run(h, "app1", "root.a", "keep", policy=NOT_A_VICTIM)        # newest-but-refusing
    run(h, "app1", "root.a", "low", priority=-5)
    run(h, "app1", "root.a", "newest-0", "newer-0")
    h.app("app2", queue="root.b")
    h.asks("app2", "ask", resource=first(5), preemption=MAY_PREEMPT)
    wait(h)
    assert preempted(h) == ["low"]


def test_ask_that_may_not_preempt_others_never_does():
    h = Harness(config(q("a"), q("b", 5)))
    h.nodes("node1", cap={"first": 10, "pods": 5})
    run(h, "app1", "root.a", "alloc1", "alloc2")
    h.app("app2", queue="root.b")
    never = messages.PreemptionPolicy(allow_preempt_self=True, allow_preempt_other=False)
    h.asks("app2", "ask", resource=first(5), preemption=never)
    h.asks("app2", "no-policy", resource=first(5))  # YuniKorn's nil policy: other = false
    wait(h, 300)
    assert preempted(h) == []


@pytest.mark.parametrize("where", ["queue", "partition"])
def test_disabled_preemption(where):
    if where == "queue":
        cfg = config(q("a"), q("b", 5, preemption_policy="disabled"))
    else:
        cfg = config(q("a"), q("b", 5), preemption={"enabled": False})
    h = Harness(cfg)
    h.nodes("node1", cap={"first": 10, "pods": 5})
    run(h, "app1", "root.a", "alloc1", "alloc2")
    h.app("app2", queue="root.b")
    h.asks("app2", "ask", resource=first(5), preemption=MAY_PREEMPT)
    wait(h, 300)
    assert preempted(h) == []


def test_fence_keeps_victims_inside_the_fenced_subtree():
    inside = q("team", None, None, q("mine", 5), q("theirs"), preemption_policy="fence")
    h = Harness(config(inside, q("other")))
    h.nodes("node1", cap={"first": 10, "pods": 5})
    run(h, "app-out", "root.other", "outside")
    run(h, "app-in", "root.team.theirs", "inside")
    h.app("app2", queue="root.team.mine")
    h.asks("app2", "ask", resource=first(5), preemption=MAY_PREEMPT)
    wait(h)
    assert preempted(h) == ["inside"]


def test_victims_must_free_enough_on_one_node():
    """5 + 5 free across two nodes is not 8 on one: nothing is preempted for nothing."""
    h = Harness(config(q("a"), q("b", 8)))
    h.nodes("node1", "node2", cap={"first": 10, "pods": 5})
    run(h, "app1", "root.a", "x1", "x2", "x3", "x4")
    assert sorted(h.allocated().values()) == ["node1", "node1", "node2", "node2"]
    h.app("app2", queue="root.b")
    h.asks("app2", "ask", resource=first(8), preemption=MAY_PREEMPT)
    wait(h)
    victims = preempted(h)
    assert len(victims) == 2
    nodes = {h.allocated()[v] for v in victims}
    assert len(nodes) == 1 and reserved(h, "ask") in nodes


def test_a_node_the_asks_anti_affinity_refuses_is_not_preempted_on():
    """node1 runs a `db` pod the ask must not share a host with: the victim is taken on node2,
    although node1's victim comes first in node order."""
    from si.tags import LABEL_TAG_PREFIX, NAMESPACE_TAG, PLACEMENT_TAG

    host = "kubernetes.io/hostname"
    h = Harness(config(q("low", 0), q("high", 10)))
    for name in ("node1", "node2"):
        h.nodes(name, cap={"first": 15, "pods": 5}, attributes={host: name})
    h.app("db", queue="root.low")
    h.asks("db", "db1", resource=first(5), priority=1000, preemption=MAY_PREEMPT,
           tags={NAMESPACE_TAG: "default", LABEL_TAG_PREFIX + "app": "db",
                 PLACEMENT_TAG: json.dumps({"nodeSelector": {host: "node1"}})})
    h.cycle()
    run(h, "low1", "root.low", "v1", "v2", size=10)
    placed = h.allocated()
    assert placed["db1"] == "node1" and {placed["v1"], placed["v2"]} == {"node1", "node2"}
    on_node2 = "v1" if placed["v1"] == "node2" else "v2"
    anti = json.dumps({"podAntiAffinity": [{"topologyKey": host,
                                            "labelSelector": {"matchLabels": {"app": "db"}}}]})
    h.app("web", queue="root.high")
    h.asks("web", "w1", resource=first(10), preemption=MAY_PREEMPT,
           tags={NAMESPACE_TAG: "default", PLACEMENT_TAG: anti})
    wait(h)
    assert preempted(h) == [on_node2]
    assert reserved(h, "w1") == "node2"


def test_a_released_victim_of_another_kind_also_clears_preempting():
    h = vector1()
    wait(h)
    h.release("app1", "alloc1", "STOPPED_BY_RM")  # the pod ended on its own meanwhile
    assert h.part.queues["root.parent.child1"].preempting.get("first", 0) == 0
    h.cycle()
    assert h.allocated()["ask3"] == "node1"


# --- the property ------------------------------------------------------------------------------

from hypothesis import event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from fuzzbudget import examples  # noqa: E402

LEAVES = ("root.p0.l0", "root.p0.l1", "root.p1.l2", "root.p1.l3")
GUARANTEE = st.one_of(st.none(), st.none(), st.integers(0, 20))


def _tree(g: list) -> dict:
    def leaf(i):
        return q(f"l{i}", g[2 + i])
    return config(q("p0", g[0], None, leaf(0), leaf(1)), q("p1", g[1], None, leaf(2), leaf(3)))


@settings(max_examples=examples(400, 150), deadline=None)
@given(guarantees=st.lists(GUARANTEE, min_size=6, max_size=6),
       node_caps=st.lists(st.integers(6, 12), min_size=1, max_size=2),
       running=st.lists(st.tuples(st.integers(0, 3), st.integers(2, 6), st.integers(-5, 5),
                                  st.booleans()), min_size=6, max_size=14),
       ask=st.tuples(st.integers(0, 3), st.integers(3, 8), st.integers(0, 10)),
       ask_guarantee=st.integers(1, 20))
def test_no_queue_on_a_victims_path_ends_below_its_guarantee_because_of_it(
        guarantees, node_caps, running, ask, ask_guarantee):
    """Random trees, guarantees, pods and an ask whose leaf has a guarantee: whatever is
    preempted, a queue on a victim's path that ends below its guarantee lost nothing (the ask
    counted on its own path), and no victim outranks the ask."""
    if guarantees[2 + ask[0]] is None:
        guarantees[2 + ask[0]] = ask_guarantee
    h = Harness(_tree(guarantees))
    for i, cap in enumerate(node_caps):
        h.nodes(f"n{i}", cap={"first": cap, "pods": 20})
    for i, (leaf, size, priority, self_ok) in enumerate(running):
        app = f"run-{leaf}"
        if app not in h.part.apps:
            h.app(app, queue=LEAVES[leaf])
        h.asks(app, f"r{i}", resource=first(size), priority=priority,
               preemption=MAY_PREEMPT if self_ok else NOT_A_VICTIM)
        h.cycle()
        if f"r{i}" in h.part.apps[app].asks:
            h.release_ask(app, f"r{i}")   # did not fit: only running pods stay
    leaf, size, priority = ask
    h.app("asker", queue=LEAVES[leaf])
    h.asks("asker", "ask", resource=first(size), priority=priority, preemption=MAY_PREEMPT)
    h.cycle()
    before = {path: dict(queue.allocated) for path, queue in h.part.queues.items()}
    wait(h)
    victims = [a for app in h.part.apps.values() for a in app.allocations.values()
               if a.preempted]
    if not victims:
        return
    ask_paths = {".".join(LEAVES[leaf].split(".")[:n]) for n in (1, 2, 3)}
    event("victims")
    for victim in victims:
        assert victim.priority <= priority
        vq = h.part.apps[victim.app_id].queue
        for queue in vq.ancestors():
            taken = sum(v.resource["first"] for v in victims
                        if (h.part.apps[v.app_id].queue.path + ".").startswith(queue.path + "."))
            after = before[queue.path].get("first", 0) - taken + (
                size if queue.path in ask_paths else 0)
            g = queue.guaranteed.get("first")
            if g is not None and after < g:
                # below its guarantee after: only if preemption took nothing from it
                assert after >= before[queue.path].get("first", 0), (queue.path, after, g)


def test_a_second_ask_never_takes_the_node_an_ask_preempted_for():
    h = Harness(config(q("a"), q("b", 10)))
    h.nodes("node1", "node2", cap={"first": 10, "pods": 5})
    run(h, "app1", "root.a", "x1", "x2", "x3", "x4")
    h.app("app2", queue="root.b")
    h.asks("app2", "ask1", resource=first(5), priority=2, preemption=MAY_PREEMPT)
    wait(h)
    first_victims = preempted(h)
    node1 = reserved(h, "ask1")
    assert len(first_victims) == 1 and node1 is not None
    h.asks("app2", "ask2", resource=first(5), priority=1, preemption=MAY_PREEMPT)
    wait(h)
    assert reserved(h, "ask1") == node1
    second = [v for v in preempted(h) if v not in first_victims]
    assert len(second) == 1 and reserved(h, "ask2") not in (None, node1)
    assert h.allocated()[second[0]] == reserved(h, "ask2")


# --- SI -----------------------------------------------------------------------------------------

def test_preemption_policy_round_trips_and_bad_values_name_the_field():
    from si.protocol import ProtocolError

    ask = messages.AllocationAsk("k", "app", resource_ask=first(1), priority=-3,
                                 preemption_policy=NOT_A_VICTIM)
    msg = messages.AllocationRequest("rm", asks=(ask,)).to_si()
    assert msg["asks"][0]["preemptionPolicy"] == {"allowPreemptSelf": False,
                                                  "allowPreemptOther": True}
    assert messages.parse(msg).asks[0] == ask
    bare = messages.AllocationRequest("rm", asks=(messages.AllocationAsk("k", "app"),)).to_si()
    assert "preemptionPolicy" not in bare["asks"][0]
    assert messages.parse(bare).asks[0].preemption_policy is None
    msg["asks"][0]["preemptionPolicy"] = {"allowPreemptSelf": "no"}
    with pytest.raises(ProtocolError, match=r"asks\[0\]\.preemptionPolicy\.allowPreemptSelf"):
        messages.parse(msg)
    msg["asks"][0]["preemptionPolicy"] = []
    with pytest.raises(ProtocolError, match=r"asks\[0\]\.preemptionPolicy must be dict"):
        messages.parse(msg)


def test_recovered_allocations_keep_their_policy_as_victims():
    h = Harness(config(q("a"), q("b", 5)))
    h.nodes("node1", cap={"first": 10, "pods": 5})
    h.app("app1", queue="root.a")
    h.handle(messages.AllocationRequest("rm-1", allocations=tuple(
        messages.ExistingAllocation(key, "app1", "node1", resource_per_alloc=first(5),
                                    preemption_policy=policy)
        for key, policy in (("allows", MAY_PREEMPT), ("refuses", NOT_A_VICTIM)))))
    h.app("app2", queue="root.b")
    h.asks("app2", "ask", resource=first(5), preemption=MAY_PREEMPT)
    wait(h)
    assert preempted(h) == ["allows"]


def test_queue_current_priority_over_rest_applies_offsets_and_fences():
    from engine import snapshot

    h = Harness(config(q("p", None, None, q("l1", priority_offset="10"),
                         q("l2", priority_policy="fence", priority_offset="-7")),
                       q("idle")))
    h.app("a1", queue="root.p.l1")
    h.asks("a1", "x", resource=first(1), priority=5)
    h.asks("a1", "y", resource=first(1), priority=100)
    h.app("a2", queue="root.p.l2")
    h.asks("a2", "z", resource=first(1), priority=1000)

    def current(dao, out):
        out[dao["queuename"]] = dao["currentPriority"]
        for child in dao.get("children", []):
            current(child, out)
        return out

    got = current(snapshot.build(h.sched)["queues"]["default"], {})
    assert got == {"root": 110, "root.p": 110, "root.p.l1": 110, "root.p.l2": -7,
                   "root.idle": -2**31}
