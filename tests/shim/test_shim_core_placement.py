"""ShimCore and placement: the placement tag, label and taint updates of nodes, labels and
placement of existing allocations and placeholders (no I/O; `FakeEngine` as in test_shim_core).
"""

from __future__ import annotations

import orjson
from shim_core_helpers import FakeEngine, node, pod, start

from shim_k8s import mapping
from shim_k8s.state import ShimState


# ------------------------------------------------------------------ placement: tags, labels, taints
PLACEMENT = "ykshm.io/placement"
NO_SCHEDULE = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def placed_pod(name, **spec):
    p = pod(name)
    p["spec"].update(spec)
    return p


def asks_sent(eng):
    return {a["allocationKey"]: a for m in eng.log if m["type"] == "AllocationRequest"
            for a in m.get("asks", [])}


def node_msgs(eng, since=0):
    return [n for m in eng.log[since:] if m["type"] == "NodeRequest" for n in m["nodes"]]


def test_ask_carries_placement_tag_only_when_needed():
    core, eng = start([node("n1")])
    core.on_pod("ADDED", pod("plain"))
    core.on_pod("ADDED", placed_pod("ssd", nodeSelector={"disktype": "ssd"}))
    core.on_pod("ADDED", placed_pod("empty", nodeSelector={}, tolerations=[]))
    eng.pump()
    asks = asks_sent(eng)
    assert asks["uid-ssd"]["allocationTags"] == {
        "kubernetes.io/meta/namespace": "ns", "kubernetes.io/meta/podName": "ssd",
        "kubernetes.io/label/applicationId": "app-1",  # every label, as YuniKorn's shim
        PLACEMENT: '{"nodeSelector":{"disktype":"ssd"}}'}
    assert PLACEMENT not in asks["uid-plain"]["allocationTags"]
    assert PLACEMENT not in asks["uid-empty"]["allocationTags"]


def test_malformed_placement_is_an_invalid_pod_and_nothing_else():
    core, eng = start([node("n1")])
    core.on_pod("ADDED", placed_pod("bad", tolerations=[{"key": "k", "operator": "Near"}]))
    core.on_pod("ADDED", placed_pod("good", tolerations=[{"key": "k", "operator": "Exists"}]))
    eng.pump()
    assert list(eng.asks) == ["uid-good"]
    assert [(e.name, e.reason) for e in eng.events if e.reason != "Scheduling"] == [
        ("bad", "InvalidPod")]
    assert "spec.tolerations[0].operator: 'Near'" in eng.events[0].message


def test_label_change_is_a_node_update_with_the_full_set():
    core, eng = start([node("n1", labels={"zone": "a"})])
    assert eng.attrs["n1"]["zone"] == "a" and eng.attrs["n1"]["ykshm.io/taints"] == "[]"
    mark = len(eng.log)
    core.on_node("MODIFIED", node("n1", labels={"zone": "b", "disktype": "ssd"}, rv="2"))
    eng.pump()
    assert [n["action"] for n in node_msgs(eng, mark)] == ["UPDATE"]
    assert eng.attrs["n1"] == {"si.io/hostname": "n1", "si.io/rackname": "/rack-default",
                               "si/node-partition": "default",
                               "ready": "true", "zone": "b", "disktype": "ssd",
                               "ykshm.io/taints": "[]"}
    core.on_node("MODIFIED", node("n1", labels={"zone": "b"}, rv="3"))   # kubectl label k-
    eng.pump()
    assert "disktype" not in eng.attrs["n1"] and eng.attrs["n1"]["zone"] == "b"


def test_taint_change_is_a_node_update():
    core, eng = start([node("n1")])
    mark = len(eng.log)
    soft = {"key": "soft", "effect": "PreferNoSchedule"}
    core.on_node("MODIFIED", node("n1", taints=[NO_SCHEDULE, soft], rv="2"))
    eng.pump()
    assert [n["action"] for n in node_msgs(eng, mark)] == ["UPDATE"]
    assert orjson.loads(eng.attrs["n1"]["ykshm.io/taints"]) == [NO_SCHEDULE]
    assert eng.nodes["n1"] is True                  # a taint is not a cordon
    core.on_node("MODIFIED", node("n1", taints=[], rv="3"))
    eng.pump()
    assert eng.attrs["n1"]["ykshm.io/taints"] == "[]"


def test_no_update_when_nothing_relevant_changed():
    core, eng = start([node("n1", labels={"zone": "a"}, taints=[NO_SCHEDULE])])
    mark = len(eng.log)
    soft = {"key": "soft", "effect": "PreferNoSchedule"}
    changed = node("n1", labels={"zone": "a"}, taints=[NO_SCHEDULE, soft], rv="9")
    changed["metadata"]["annotations"] = {"note": "irrelevant"}
    core.on_node("MODIFIED", changed)
    eng.pump()
    assert eng.log[mark:] == []


def test_ready_flip_updates_the_ready_attribute():
    core, eng = start([node("n1")])
    down = node("n1", rv="2")
    down["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    core.on_node("MODIFIED", down)
    eng.pump()
    assert eng.attrs["n1"]["ready"] == "false" and eng.nodes["n1"] is False


def test_recovery_and_engine_restart_carry_current_labels_and_taints():
    core, eng = start([node("n1", labels={"zone": "a"}, taints=[NO_SCHEDULE])],
                      [pod("b1", "n1")])
    create = node_msgs(eng)[0]
    assert create["action"] == "CREATE_DRAIN" and create["attributes"]["zone"] == "a"
    assert orjson.loads(create["attributes"]["ykshm.io/taints"]) == [NO_SCHEDULE]
    core.on_disconnect("engine killed")
    core.on_node("MODIFIED", node("n1", labels={"zone": "b"}, rv="2"))   # while no engine
    eng2 = FakeEngine(core)
    core.on_connect()
    eng2.pump()
    assert core.state is ShimState.RUNNING
    assert [n["action"] for n in node_msgs(eng2)] == ["CREATE_DRAIN", "DRAIN_TO_SCHEDULABLE"]
    assert eng2.attrs["n1"]["zone"] == "b" and eng2.attrs["n1"]["ykshm.io/taints"] == "[]"


def test_tolerations_added_to_a_waiting_pod_resend_its_ask():
    core, eng = start([node("n1")])
    waiting = pod("w")
    core.on_pod("ADDED", waiting)
    (first,) = [a for m in core.take().si for a in m.get("asks", [])]
    assert "ykshm.io/placement" not in first["allocationTags"]
    core.on_pod("MODIFIED", waiting)                  # nothing relevant changed: no message
    assert not [a for m in core.take().si for a in m.get("asks", [])]
    tolerating = {**waiting, "spec": {**waiting["spec"], "tolerations": [
        {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]}}
    core.on_pod("MODIFIED", tolerating)
    (again,) = [a for m in core.take().si for a in m.get("asks", [])]
    assert again["allocationKey"] == first["allocationKey"]
    assert again["allocationTags"]["ykshm.io/placement"] == \
        mapping.placement_of(tolerating["spec"])
    relabelled = {**tolerating, "metadata": {**tolerating["metadata"],
                                             "labels": {"applicationId": "app-1", "tier": "x"}}}
    core.on_pod("MODIFIED", relabelled)               # labels changed: sent again
    (third,) = [a for m in core.take().si for a in m.get("asks", [])]
    assert third["allocationTags"]["kubernetes.io/label/tier"] == "x"


def test_existing_allocations_carry_labels_and_placement():
    """Recovery tells the engine each running pod's labels and anti-affinity terms: they keep
    new pods away as before the restart."""
    running = placed_pod("r", affinity={"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname",
             "labelSelector": {"matchLabels": {"applicationId": "app-1"}}}]}})
    running["spec"]["nodeName"] = "n1"
    running["status"]["phase"] = "Running"
    core, eng = start([node("n1")], [running])
    (existing,) = [a for m in eng.log if m["type"] == "AllocationRequest"
                   for a in m.get("allocations", [])]
    assert existing["allocationTags"]["kubernetes.io/label/applicationId"] == "app-1"
    assert existing["allocationTags"]["ykshm.io/placement"] == mapping.placement_of(running["spec"])


def test_every_bind_posts_the_scheduled_event_kube_scheduler_posts():
    """`kubectl describe pod` says where and when, whether or not request events are enabled."""
    core, eng = start([node("n1")])
    core.on_pod("ADDED", pod("p1"))
    eng.pump()
    eng.allocate("uid-p1", "n1")
    eng.pump()
    core.on_bind_result(eng.binds[-1], ok=True)
    eng.pump()
    scheduled = [(e.kind, e.namespace, e.name, e.type, e.message) for e in eng.events if e.reason == "Scheduled"]
    assert scheduled == [("Pod", "ns", "p1", "Normal", "Successfully assigned ns/p1 to node n1")]


def test_placeholders_carry_their_task_groups_labels_and_pod_anti_affinity():
    """A task group's `labels` and required pod anti-affinity go onto its placeholders, whose
    asks then carry both (labels as kubernetes.io/label/* tags): the engine spreads them."""
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname",
         "labelSelector": {"matchLabels": {"pe": "job-1"}}}]}}
    groups = orjson.dumps([{"name": "w", "minMember": 2, "minResource": {"cpu": "500m"},
                            "labels": {"pe": "job-1", "placeholder": "mine"},
                            "affinity": anti}]).decode()
    core, eng = start([node("n1")])
    gang = pod("driver", app="gang-3")
    gang["metadata"]["annotations"].update({"yunikorn.apache.org/task-groups": groups,
                                            "yunikorn.apache.org/task-group-name": "w"})
    core.on_pod("ADDED", gang)
    phs = core.take().creates
    assert [p["metadata"]["labels"] for p in phs] == [
        {"pe": "job-1", "placeholder": "true", "applicationId": "gang-3", "queue": "root.default"}
    ] * 2  # the group's labels, ours win on a clash
    assert phs[0]["spec"]["affinity"] == anti
    core.on_pod("ADDED", {**phs[0], "metadata": {**phs[0]["metadata"], "uid": "uid-ph"},
                          "status": {"phase": "Pending"}})
    (ask,) = [a for m in core.take().si for a in m.get("asks", [])]
    tags = ask["allocationTags"]
    assert tags["kubernetes.io/label/pe"] == "job-1"
    assert orjson.loads(tags["ykshm.io/placement"])["podAntiAffinity"][0]["topologyKey"] == \
        "kubernetes.io/hostname"
