"""Node placement through SI messages: nodeSelector, required affinity, taints, node UPDATEs,
reservations and placeholder replacement (docs/CONTRACTS.md, "Node placement")."""

from __future__ import annotations

import json

from engine_helpers import Harness, res
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.predicates import parse_placement
from shm.events import EventChangeDetail as D
from shm.events import EventChangeType as C
from shm.events import EventRecordType as T
from si.resources import to_si
from si.tags import PLACEMENT_TAG, TAINTS_ATTRIBUTE

GPU_TAINT = json.dumps([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
TOLERATE_GPU = {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu",
                                 "effect": "NoSchedule"}]}


def tag(**doc) -> dict[str, str]:
    return {PLACEMENT_TAG: json.dumps(doc)}


def node(h: Harness, node_id: str, labels: dict[str, str] | None = None,
         cap: dict[str, int] | None = None, occupied: dict[str, int] | None = None):
    attrs = {"si/node-partition": "default", "ready": "true", **(labels or {})}
    return h.nodes(node_id, cap=cap, occupied=occupied, attributes=attrs)


def update(h: Harness, node_id: str, labels: dict[str, str] | None = None, **extra):
    attrs = {"si/node-partition": "default", "ready": "true", **(labels or {})}
    return h.handle({"type": "NodeRequest", "nodes": [
        {"nodeID": node_id, "action": "UPDATE", "attributes": attrs, **extra}]})


def rejected(h: Harness) -> list[dict]:
    return [r for m in h.responses if m["type"] == "AllocationResponse" for r in m["rejected"]]


def test_node_selector_sends_asks_only_to_the_matching_node():
    h = Harness()
    for i, zone in enumerate("abcd"):
        node(h, f"n{i}", {"zone": zone})
    h.app("a")
    h.asks("a", *[f"b{i}" for i in range(4)], tags=tag(nodeSelector={"zone": "b"}))
    h.asks("a", *[f"any{i}" for i in range(4)])
    h.cycle()
    got = h.allocated()
    assert {got[f"b{i}"] for i in range(4)} == {"n1"}
    assert len({got[f"any{i}"] for i in range(4)}) > 1  # the others still spread


def test_required_affinity_terms_choose_the_node():
    h = Harness()
    node(h, "small", {"cpus": "4"})
    node(h, "big", {"cpus": "64"})
    node(h, "gpu", {"cpus": "8", "gpu": "a100"})
    h.app("a")
    terms = [{"matchExpressions": [{"key": "cpus", "operator": "Gt", "values": ["16"]}]},
             {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]
    h.asks("a", *[f"p{i}" for i in range(6)], tags=tag(nodeSelectorTerms=terms))
    h.asks("a", "named", tags=tag(nodeSelectorTerms=[
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["small"]}]}]))
    h.cycle()
    got = h.allocated()
    assert {got[f"p{i}"] for i in range(6)} == {"big", "gpu"}
    assert got["named"] == "small"


def test_unsatisfiable_ask_stays_pending_while_others_are_allocated():
    h = Harness()
    node(h, "n1", {"zone": "a"})
    node(h, "n2", {"zone": "b"})
    h.app("a")
    # first in line (priority) and of the same size as the others: its failure must not
    # make the unconstrained asks of that size fail (the shape includes the placement)
    h.asks("a", "nowhere", priority=10, tags=tag(nodeSelector={"zone": "z"}))
    h.asks("a", "p1", "p2", "p3")
    h.cycle(3)
    assert set(h.allocated()) == {"p1", "p2", "p3"}
    assert "nowhere" in h.part.apps["a"].asks
    assert any(e["objectID"] == "nowhere" and "does not fit" in e["message"]
               for e in h.request_events())
    assert not h.part.reservations  # no node admits it: nothing to reserve either


def test_a_failing_unconstrained_ask_does_not_stop_a_tolerating_one():
    h = Harness()
    node(h, "plain", cap=res(1, 1000))
    node(h, "gpu", {TAINTS_ATTRIBUTE: GPU_TAINT})
    h.app("a")
    h.asks("a", "fill", priority=20)
    h.asks("a", "plain-2", priority=10)  # fits nowhere it may go
    h.asks("a", "tolerant", tags=tag(**TOLERATE_GPU))
    h.cycle()
    got = h.allocated()
    assert got == {"fill": "plain", "tolerant": "gpu"}


def test_tainted_node_avoided_by_untolerating_asks_and_used_by_tolerating_ones():
    h = Harness()
    node(h, "plain", cap=res(2, 2000))
    node(h, "gpu", {TAINTS_ATTRIBUTE: GPU_TAINT})
    node(h, "maint", {TAINTS_ATTRIBUTE: json.dumps([{"key": "m", "effect": "NoExecute"}])})
    h.app("a")
    h.asks("a", "p1", "p2", "p3")
    h.asks("a", "t1", "t2", "t3", tags=tag(nodeSelector={}, **TOLERATE_GPU))
    h.cycle(2)
    got = h.allocated()
    assert got["p1"] == got["p2"] == "plain" and "p3" not in got
    assert {got[k] for k in ("t1", "t2", "t3")} <= {"plain", "gpu"}
    assert "gpu" in {got[k] for k in ("t1", "t2", "t3")}
    assert "maint" not in got.values()
    assert h.part.nodes["plain"].reserved_for == ("a", "p3")  # not the roomier tainted nodes
    # a taint ignored by the filter: PreferNoSchedule only
    node(h, "soft", {TAINTS_ATTRIBUTE: json.dumps([{"key": "x", "effect": "PreferNoSchedule"}])})
    h.asks("a", "p4")
    h.cycle()
    assert h.allocated()["p4"] == "soft"


def test_pending_ask_is_allocated_after_an_update_adds_the_label():
    h = Harness()
    node(h, "n1")
    h.app("a")
    h.asks("a", "ssd", tags=tag(nodeSelector={"disk": "ssd"}))
    h.cycle(2)
    assert "ssd" not in h.allocated()
    update(h, "n1", {"disk": "ssd"})
    assert h.part.nodes["n1"].attributes["disk"] == "ssd"
    h.cycle()
    assert h.allocated()["ssd"] == "n1"


def test_update_adding_the_label_lets_a_waiting_ask_reserve_the_node():
    """The "tried for a reservation" mark is forgotten on a label change, like the failed
    shapes: the ask, too big for the node's free space, now reserves it."""
    h = Harness()
    node(h, "n1", cap=res(4, 4000))
    h.app("busy")
    h.asks("busy", "b1", resource=res(3, 1000))
    h.app("a")
    h.asks("a", "big", resource=res(2, 1000), tags=tag(nodeSelector={"disk": "ssd"}))
    h.cycle(2)
    assert not h.part.reservations
    update(h, "n1", {"disk": "ssd"})
    h.cycle()
    assert h.part.nodes["n1"].reserved_for == ("a", "big")
    h.release("busy", "b1")
    h.cycle()
    assert h.allocated()["big"] == "n1"


def test_update_removing_the_label_makes_the_node_stop_admitting():
    h = Harness()
    node(h, "n1", {"gpu": "yes", "zone": "a"})
    h.app("a")
    h.asks("a", "g1", tags=tag(nodeSelector={"gpu": "yes"}))
    h.cycle()
    assert h.allocated() == {"g1": "n1"}
    update(h, "n1", {"zone": "a"})  # the full set: gpu is gone
    assert "gpu" not in h.part.nodes["n1"].attributes
    h.asks("a", "g2", tags=tag(nodeSelector={"gpu": "yes"}))
    h.asks("a", "plain")
    h.cycle(2)
    assert h.allocated() == {"g1": "n1", "plain": "n1"}  # g1 stays (IgnoredDuringExecution)
    assert "g2" in h.part.apps["a"].asks


def test_update_adding_and_removing_a_taint():
    h = Harness()
    node(h, "n1")
    update(h, "n1", {TAINTS_ATTRIBUTE: GPU_TAINT})
    h.app("a")
    h.asks("a", "p1")
    h.cycle()
    assert h.allocated() == {}
    update(h, "n1")
    assert h.part.nodes["n1"].taints == ()
    h.cycle()
    assert h.allocated() == {"p1": "n1"}


def test_update_attributes_replace_and_absent_attributes_keep():
    h = Harness()
    node(h, "n1", {"zone": "a", "disk": "ssd"})
    h.handle({"type": "NodeRequest", "nodes": [
        {"nodeID": "n1", "action": "UPDATE", "occupiedResource": to_si(res(1, 0))}]})
    assert h.part.nodes["n1"].attributes["zone"] == "a"  # no attributes: labels kept
    h.handle({"type": "NodeRequest", "nodes": [
        {"nodeID": "n1", "action": "UPDATE", "attributes": {"ready": "false"}}]})
    node_ = h.part.nodes["n1"]
    assert node_.attributes == {"ready": "false"} and not node_.ready
    h.handle({"type": "NodeRequest", "nodes": [
        {"nodeID": "n1", "action": "UPDATE", "attributes": {}}]})
    assert node_.attributes == {} and node_.ready  # "ready" absent = ready


def test_bad_placement_tag_is_rejected_and_nothing_else_is_affected():
    h = Harness()
    node(h, "n1", {"zone": "a"})
    h.app("a")
    bad = {PLACEMENT_TAG: json.dumps({"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "zone", "operator": "Near", "values": ["a"]}]}]})}
    handled = h.handle({"type": "AllocationRequest", "asks": [
        {"allocationKey": k, "applicationID": "a", "resourceAsk": to_si(res()),
         "allocationTags": tags} for k, tags in
        (("good1", tag(nodeSelector={"zone": "a"})), ("bad", bad), ("good2", {}))]})
    assert [r["allocationKey"] for r in rejected(h)] == ["bad"]
    reason = rejected(h)[0]["reason"]
    assert "allocationTags.ykshm.io/placement" in reason and "'Near'" in reason
    assert handled.problems == [f"ask bad: {reason}"]
    app = h.part.apps["a"]
    assert set(app.asks) == {"good1", "good2"}
    assert h.part.root.pending_count == 2
    assert [e[3] for e in h.app_events("a") if e[2] == int(D.APP_REQUEST)] == ["good1", "good2"]
    h.cycle()
    assert set(h.allocated()) == {"good1", "good2"}
    assert h.state("a") == "Running"


def test_bad_taints_attribute_rejects_the_node_and_the_update():
    h = Harness()
    handled = node(h, "n1", {TAINTS_ATTRIBUTE: "[{\"key\": \"k\"}]"})
    reason = h.responses[-1]["rejected"][0]["reason"]
    assert "attributes.ykshm.io/taints" in reason and "effect" in reason
    assert handled.problems and "n1" not in h.part.nodes
    node(h, "n2", {"zone": "a"}, cap=res(4, 4000))
    handled = update(h, "n2", {TAINTS_ATTRIBUTE: "not json"},
                     schedulableResource=to_si(res(8, 8000)))
    assert "attributes.ykshm.io/taints" in handled.problems[0]
    n2 = h.part.nodes["n2"]  # nothing of the rejected UPDATE applied
    assert n2.attributes["zone"] == "a" and n2.capacity == res(4, 4000) and n2.taints == ()


def test_reservation_only_on_a_node_that_admits():
    h = Harness()
    node(h, "ssd", {"disk": "ssd"}, cap=res(4, 4000))
    node(h, "roomy", cap=res(8, 8000), occupied=res(6, 0))
    h.app("busy")
    h.asks("busy", "b1", resource=res(3, 1000), tags=tag(nodeSelector={"disk": "ssd"}))
    h.cycle()
    h.app("a")
    h.asks("a", "big", resource=res(3, 1000), tags=tag(nodeSelector={"disk": "ssd"}))
    h.cycle()
    assert h.part.nodes["ssd"].reserved_for == ("a", "big")
    assert h.part.nodes["roomy"].reserved_for is None
    # the label goes: the reservation is dropped in the next cycle
    update(h, "ssd")
    h.cycle()
    assert h.part.nodes["ssd"].reserved_for is None and not h.part.reservations
    node_ev = [(e.object_id, e.change_type) for e in h.sink.events
               if e.type == int(T.NODE) and e.detail == int(D.NODE_RESERVATION)]
    assert node_ev == [("ssd", int(C.ADD)), ("ssd", int(C.REMOVE))]


def gang_on_two_zones(h: Harness) -> dict[str, str]:
    """ph-b on zone b (n2), then ph-a on zone a (n1): the first placeholder is on n2."""
    node(h, "n1", {"zone": "a"})
    node(h, "n2", {"zone": "b"})
    node(h, "n3", {"zone": "c"})
    h.app("g", gangSchedulingStyle="Soft", executionTimeoutMilliSeconds=5000)
    h.asks("g", "ph-b", placeholder=True, task_group="tg", priority=1,
           tags=tag(nodeSelector={"zone": "b"}))
    h.asks("g", "ph-a", placeholder=True, task_group="tg", tags=tag(nodeSelector={"zone": "a"}))
    h.cycle()
    got = h.allocated()
    assert got == {"ph-b": "n2", "ph-a": "n1"}
    return got


def test_placeholder_replaced_only_on_a_node_that_admits_the_real_ask():
    h = Harness()
    gang_on_two_zones(h)
    h.asks("g", "real-a", task_group="tg", tags=tag(nodeSelector={"zone": "a"}))
    h.cycle()
    assert h.allocated()["real-a"] == "n1"
    assert [(r["allocationKey"], r["terminationType"]) for r in h.released()] == \
        [("ph-a", "PLACEHOLDER_REPLACED")]


def test_no_admitting_placeholder_schedules_the_real_ask_like_any_other():
    h = Harness()
    gang_on_two_zones(h)
    h.asks("g", "real-c", task_group="tg", tags=tag(nodeSelector={"zone": "c"}))
    h.cycle()
    assert h.allocated()["real-c"] == "n3"
    assert h.released() == []  # both placeholders stay until they time out
    assert h.part.apps["g"].placeholder_data["tg"]["replaced"] == 0
    assert any(e["objectID"] == "real-c" and "no placeholder is on a node that admits"
               in e["message"] for e in h.request_events())


# --- property: the engine never breaks a node's admission, never leaves an admitted fit ------

LABELS = st.fixed_dictionaries({}, optional={"zone": st.sampled_from("ab"),
                                             "cpus": st.sampled_from(["2", "8", "x"])})
TAINTS = st.lists(st.sampled_from([{"key": "d", "value": "gpu", "effect": "NoSchedule"},
                                   {"key": "m", "effect": "NoExecute"}]), max_size=2,
                  unique_by=lambda t: t["key"])
REQS = st.sampled_from([
    {"key": "zone", "operator": "In", "values": ["a"]},
    {"key": "zone", "operator": "NotIn", "values": ["a"]},
    {"key": "zone", "operator": "DoesNotExist"},
    {"key": "cpus", "operator": "Gt", "values": ["4"]},
    {"key": "cpus", "operator": "Lt", "values": ["4"]},
    {"key": "metadata.name", "operator": "In", "values": ["n0"]}])
PLACEMENTS = st.none() | st.fixed_dictionaries({}, optional={
    "nodeSelector": st.fixed_dictionaries({"zone": st.sampled_from("ab")}),
    "nodeSelectorTerms": st.lists(st.lists(REQS, max_size=2), min_size=1, max_size=2),
    "tolerations": st.lists(st.sampled_from([{"operator": "Exists"}, {"key": "d", "value": "gpu"},
                                             {"key": "m", "operator": "Exists"}]), max_size=2)})


def _to_term(reqs: list[dict]) -> dict:
    return {"matchFields" if r["key"] == "metadata.name" else "matchExpressions": [r]
            for r in reqs}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(st.tuples(LABELS, TAINTS, st.integers(1, 3)), min_size=1, max_size=4),
       asks=st.lists(PLACEMENTS, min_size=1, max_size=8))
def test_allocations_admit_and_pending_asks_have_no_admitting_room(nodes, asks):
    h = Harness(requests=False)
    for i, (labels, taints, mem) in enumerate(nodes):
        node(h, f"n{i}", {**labels, TAINTS_ATTRIBUTE: json.dumps(taints)}, cap=res(mem, 8000))
    h.app("a")
    placements = {}
    for i, doc in enumerate(asks):
        if doc is not None and "nodeSelectorTerms" in doc:
            doc = {**doc, "nodeSelectorTerms": [_to_term(t) for t in doc["nodeSelectorTerms"]]}
        placements[f"p{i}"] = None if doc is None else parse_placement(json.dumps(doc))
        h.asks("a", f"p{i}", tags=None if doc is None else tag(**doc))
    h.cycle(3)
    part = h.part
    for key, node_id in h.allocated().items():
        assert part.nodes[node_id].admits(placements[key]), (key, node_id)
    for ask in part.apps["a"].asks.values():
        for n in part.nodes.values():
            if n.admits(ask.placement) and n.reserved_for is None:
                assert n.available["memory"] < ask.resource["memory"], (ask.key, n.node_id)


def test_pending_ask_is_told_why_each_node_refused_it():
    """The request event of an ask no node takes counts the reasons per node, worded like
    kube-scheduler's FailedScheduling, so `kubectl describe pod` says what to change."""
    h = Harness()
    node(h, "ssd-full", {"disktype": "ssd"}, cap=res(1, 1000))
    node(h, "ssd-tainted", {"disktype": "ssd", TAINTS_ATTRIBUTE: GPU_TAINT})
    node(h, "hdd-1", {"disktype": "hdd"})
    node(h, "hdd-2", {"disktype": "hdd"})
    node(h, "ssd-drained", {"disktype": "ssd"})
    h.handle({"type": "NodeRequest", "nodes": [{"nodeID": "ssd-drained",
                                                "action": "DRAIN_NODE"}]})
    h.app("a")
    h.asks("a", "want-ssd", resource=res(2, 2000), tags=tag(nodeSelector={"disktype": "ssd"}))
    h.cycle(2)
    (msg,) = [e["message"] for e in h.request_events()
              if e["objectID"] == "want-ssd" and "does not fit" in e["message"]]
    assert msg == ("Request 'want-ssd' does not fit on any of 5 nodes: 0/5 nodes are available: "
                   "2 node(s) didn't match Pod's node affinity/selector, "
                   "1 node(s) had insufficient memory, "
                   "1 node(s) had untolerated taint {dedicated: gpu}, "
                   "1 node(s) were unschedulable")


def test_a_pending_ask_sent_again_takes_its_new_placement():
    """Tolerations added to a waiting pod reach the engine as the same ask with a new tag: it
    replaces the old placement (anything else in a replay is ignored); a bad tag rejects and
    removes the ask."""
    h = Harness()
    node(h, "tainted", {TAINTS_ATTRIBUTE: GPU_TAINT})
    h.app("a")
    h.asks("a", "waits", "bad", resource=res(1, 1000))
    h.cycle(2)
    assert h.allocated() == {}
    h.asks("a", "waits", resource=res(1, 1000), tags=tag(**TOLERATE_GPU))
    assert rejected(h) == []
    h.cycle()
    assert h.allocated() == {"waits": "tainted"}
    assert h.part.apps["a"].asks["bad"].placement is None
    h.asks("a", "bad", resource=res(1, 1000), tags={PLACEMENT_TAG: "{not json"})
    (rej,) = rejected(h)
    assert rej["allocationKey"] == "bad" and PLACEMENT_TAG in rej["reason"]
    assert "bad" not in h.part.apps["a"].asks
    # a replay of the allocated ask changes nothing
    h.asks("a", "waits", resource=res(1, 1000))
    h.cycle()
    assert h.allocated() == {"waits": "tainted"}
