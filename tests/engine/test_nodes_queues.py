"""Node and queue events, dynamic queues, placement, and configuration reload."""

from __future__ import annotations

from engine_helpers import GI, Harness, res

from engine.config import parse_config
from shm.events import EventChangeDetail as D
from shm.events import EventChangeType as C
from shm.events import EventRecordType as T
from si.resources import to_si

NODE, QUEUE = int(T.NODE), int(T.QUEUE)
ADD, REMOVE, SET = int(C.ADD), int(C.REMOVE), int(C.SET)


def node_events(h, node_id):
    return [(e.change_type, e.detail, e.reference_id, e.resource)
            for e in h.sink.events if e.type == NODE and e.object_id == node_id]


def test_node_lifecycle_events():
    h = Harness()
    h.nodes("n1", cap=res(4, 4000))
    h.handle({"type": "NodeRequest", "nodes": [
        {"nodeID": "n1", "action": "UPDATE", "schedulableResource": to_si(res(8, 4000)),
         "occupiedResource": to_si(res(1, 0))}]})
    h.handle({"type": "NodeRequest", "nodes": [
        {"nodeID": "n1", "action": "UPDATE", "attributes": {"ready": "false"}}]})
    assert not h.part.nodes["n1"].usable
    h.handle({"type": "NodeRequest", "nodes": [
        {"nodeID": "n1", "action": "UPDATE", "attributes": {"ready": "true"}}]})
    h.handle({"type": "NodeRequest", "nodes": [{"nodeID": "n1", "action": "DRAIN_NODE"}]})
    h.handle({"type": "NodeRequest", "nodes": [{"nodeID": "n1",
                                                "action": "DRAIN_TO_SCHEDULABLE"}]})
    h.app("a")
    h.asks("a", "p1")
    h.cycle()
    h.handle({"type": "NodeRequest", "nodes": [{"nodeID": "n1", "action": "DECOMISSION"}]})
    ev = node_events(h, "n1")
    assert [(c, d) for c, d, _, _ in ev] == [
        (ADD, int(D.DETAILS_NONE)), (SET, int(D.NODE_CAPACITY)), (SET, int(D.NODE_OCCUPIED)),
        (SET, int(D.NODE_READY)), (SET, int(D.NODE_READY)),
        (SET, int(D.NODE_SCHEDULABLE)), (SET, int(D.NODE_SCHEDULABLE)),
        (ADD, int(D.NODE_ALLOC)), (REMOVE, int(D.NODE_DECOMISSION))]
    assert ev[1][3] == res(8, 4000) and ev[7][2] == "p1"
    # the allocation went with the node: app event and a release to the shim
    assert (2, REMOVE, int(D.ALLOC_NODEREMOVED), "p1") in h.app_events("a")
    assert h.released()[0]["allocationKey"] == "p1"
    assert "n1" not in h.part.nodes and h.part.capacity.get("memory", 0) == 0


def test_node_errors_are_reported():
    h = Harness()
    h.nodes("n1")
    handled = h.nodes("n1")
    assert handled.problems and "already exists" in handled.problems[0]
    handled = h.handle({"type": "NodeRequest", "nodes": [{"nodeID": "zz", "action": "UPDATE"}]})
    assert "unknown node" in handled.problems[0]


CFG = {"partitions": [{"name": "default", "queues": [{"name": "root", "queues": [
    {"name": "dyn", "parent": True, "childtemplate": {"maxapplications": 7}},
    {"name": "fixed", "queues": [{"name": "leaf"}]},
    {"name": "prod", "resources": {"guaranteed": {"memory": "1Gi"}, "max": {"memory": "8Gi"}}},
]}]}]}


def test_configured_queues_emit_add_events():
    h = Harness(CFG)
    added = [e.object_id for e in h.sink.events
             if e.type == QUEUE and e.change_type == ADD and e.detail == 0]
    assert added == ["root", "root.dyn", "root.fixed", "root.fixed.leaf", "root.prod"]


def test_a_configured_partition_without_rules_places_by_the_provided_queue_only():
    """YuniKorn's implicit `provided create:false`: an existing leaf, or rejected (no root.default)."""
    h = Harness(CFG)
    h.app("a1", queue="root.prod")
    h.app("a2", queue="prod")  # short name under root
    h.app("a3", queue="root.dyn.team")  # does not exist and nothing may create it
    h.app("a5", queue="")
    h.app("a6", queue="root.fixed")  # a parent
    queue_of = {a.app_id: a.queue.path for a in h.part.apps.values()}
    assert queue_of == {"a1": "root.prod", "a2": "root.prod"}
    assert [h.state(a) for a in ("a3", "a5", "a6")] == ["Rejected"] * 3


def test_a_created_leaf_takes_its_parents_child_template():
    config = {"partitions": [{**CFG["partitions"][0], "placementrules": [{"name": "provided", "create": True}]}]}
    h = Harness(config)
    h.app("a3", queue="root.dyn.team")
    assert h.part.apps["a3"].queue.path == "root.dyn.team"
    assert h.part.queues["root.dyn.team"].max_apps == 7  # child template
    dyn = [(e.change_type, e.object_id) for e in h.sink.events
           if e.type == QUEUE and e.detail == int(D.QUEUE_DYNAMIC)]
    assert dyn == [(ADD, "root.dyn.team")]


def test_without_a_config_the_namespace_tag_places_and_the_queue_goes_when_empty():
    h = Harness()  # YuniKorn's default configuration: tag namespace create:true
    h.app("a", queue="root.ignored", tags={"namespace": "team-x"})
    assert h.part.apps["a"].queue.path == "root.team-x"
    h.remove_app("a")
    assert "root.team-x" not in h.part.queues
    ev = [(e.change_type, e.detail, e.reference_id) for e in h.sink.events
          if e.type == QUEUE and e.object_id == "root.team-x"]
    assert ev == [(ADD, int(D.QUEUE_DYNAMIC), ""), (ADD, int(D.QUEUE_APP), "a"),
                  (REMOVE, int(D.QUEUE_APP), "a"), (REMOVE, int(D.QUEUE_DYNAMIC), "")]


def test_reload_emits_queue_set_and_remove_events():
    h = Harness(CFG)
    h.app("busy", queue="root.fixed.leaf")
    new = {"partitions": [{"name": "default", "queues": [{"name": "root", "queues": [
        {"name": "dyn", "parent": True},
        {"name": "prod", "resources": {"guaranteed": {"memory": "2Gi"},
                                       "max": {"memory": "16Gi"}},
         "queues": [{"name": "child"}]},
        {"name": "extra"},
    ]}]}]}
    h.sched.reload(parse_config(new))
    q = [(e.change_type, e.detail, e.object_id) for e in h.sink.events if e.type == QUEUE]
    assert (SET, int(D.QUEUE_MAX), "root.prod") in q
    assert (SET, int(D.QUEUE_GUARANTEED), "root.prod") in q
    assert (SET, int(D.QUEUE_TYPE), "root.prod") in q
    assert (ADD, 0, "root.prod.child") in q and (ADD, 0, "root.extra") in q
    # root.fixed.leaf still has an app: draining, removed when it leaves
    assert h.part.queues["root.fixed.leaf"].draining
    h.remove_app("busy")
    q = [(e.change_type, e.detail, e.object_id) for e in h.sink.events if e.type == QUEUE]
    assert (REMOVE, 0, "root.fixed.leaf") in q and (REMOVE, 0, "root.fixed") in q
    assert h.part.queues["root.prod"].max == {"memory": 16 * GI}
