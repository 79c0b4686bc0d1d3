"""Pod -> application/resource mapping and node mapping (YuniKorn's conventions)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shim_k8s import mapping
from shim_k8s.mapping import NodeError, PodError


def pod(labels=None, annotations=None, containers=None, init=None, ns="ns1", sched="yunikorn",
        node="", phase="Pending", **spec):
    return {
        "metadata": {"name": "p", "namespace": ns, "uid": "u-1", "labels": labels or {},
                     "annotations": annotations or {}},
        "spec": {"schedulerName": sched, "nodeName": node,
                 "containers": containers if containers is not None else [
                     {"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}],
                 **({"initContainers": init} if init else {}), **spec},
        "status": {"phase": phase},
    }


def req(**requests):
    return {"name": "c", "resources": {"requests": requests}}


@pytest.mark.parametrize("sched,ours", [("yunikorn", True), ("ykshm", True),
                                        ("default-scheduler", False), (None, False)])
def test_scheduler_name(sched, ours):
    assert mapping.is_ours(pod(sched=sched)) is ours


def test_app_id_precedence_and_default():
    assert mapping.app_id_of(pod()) == "yunikorn-ns1-autogen"
    assert mapping.app_id_of(pod(labels={"spark-app-selector": "spark-1"})) == "spark-1"
    assert mapping.app_id_of(pod(labels={"spark-app-selector": "s", "applicationId": "a"})) == "a"
    assert mapping.app_id_of(pod(labels={"applicationId": "a"},
                                 annotations={"yunikorn.apache.org/app-id": "ann"})) == "ann"
    assert mapping.app_id_of(pod(labels={"yunikorn.apache.org/app-id": "canon"},
                                 annotations={"yunikorn.apache.org/app-id": "ann"})) == "canon"


def test_queue_and_user():
    assert mapping.queue_of(pod()) == "root.default"
    assert mapping.queue_of(pod(labels={"queue": "root.a"})) == "root.a"
    assert mapping.queue_of(pod(annotations={"yunikorn.apache.org/queue": "root.b"},
                                labels={"queue": "root.a"})) == "root.b"
    assert mapping.user_of(pod()) == ("nobody", ())
    info = orjson.dumps({"user": "alice", "groups": ["dev", "ops"]}).decode()
    assert mapping.user_of(pod(annotations={"yunikorn.apache.org/user.info": info})) == (
        "alice", ("dev", "ops"))
    with pytest.raises(PodError, match="user.info"):
        mapping.pod_info(pod(annotations={"yunikorn.apache.org/user.info": "{not json"}))
    with pytest.raises(PodError, match="groups"):
        mapping.user_of(pod(annotations={"yunikorn.apache.org/user.info": '{"groups": "x"}'}))


def test_resources_sum_and_pods():
    p = pod(containers=[req(cpu="500m", memory="1Gi"), req(cpu="1", memory="512Mi",
                                                           **{"nvidia.com/gpu": "1"})])
    assert mapping.pod_resource(p) == {"vcore": 1500, "memory": 1536 << 20, "nvidia.com/gpu": 1,
                                       "pods": 1}


def test_init_containers_max_rule_and_overhead():
    p = pod(containers=[req(cpu="500m", memory="1Gi"), req(cpu="500m")],
            init=[req(cpu="2", memory="100Mi"), req(cpu="100m", memory="3Gi")],
            overhead={"cpu": "100m"})
    assert mapping.pod_resource(p) == {"vcore": 2100, "memory": 3 << 30, "pods": 1}


def test_sidecar_init_container_counts_with_containers():
    sidecar = {**req(cpu="200m"), "restartPolicy": "Always"}
    p = pod(containers=[req(cpu="1")], init=[sidecar, req(cpu="1900m")])
    # the sidecar runs beside the app (1000 + 200) and beside later init containers (1900 + 200)
    assert mapping.pod_resource(p)["vcore"] == 2100


def test_limits_default_requests():
    p = pod(containers=[{"name": "c", "resources": {"limits": {"cpu": "2", "memory": "1Gi"},
                                                    "requests": {"cpu": "1"}}}])
    assert mapping.pod_resource(p) == {"vcore": 1000, "memory": 1 << 30, "pods": 1}


def test_no_requests_is_just_a_pod():
    assert mapping.pod_resource(pod(containers=[{"name": "c"}])) == {"pods": 1}


@pytest.mark.parametrize("bad", ["-1", "1.2.3", "abc", "1Xi", ""])
def test_bad_quantity_names_the_field(bad):
    with pytest.raises(PodError, match=r"spec.containers\[0\].resources.requests: cpu"):
        mapping.pod_info(pod(containers=[req(cpu=bad)]))


def test_pod_info_full():
    groups = orjson.dumps([{"name": "tg1", "minMember": 2,
                            "minResource": {"cpu": "1", "memory": "1Gi"}}]).decode()
    p = pod(labels={"applicationId": "app-1", "queue": "root.q"},
            annotations={"yunikorn.apache.org/task-group-name": "tg1",
                         "yunikorn.apache.org/task-groups": groups,
                         "yunikorn.apache.org/schedulingPolicyParameters":
                             "placeholderTimeoutInSeconds=30 gangSchedulingStyle=Hard"},
            node="n1", phase="Running", priority=7)
    info = mapping.pod_info(p)
    assert (info.uid, info.app_id, info.queue, info.node_name, info.priority) == (
        "u-1", "app-1", "root.q", "n1", 7)
    assert info.task_group == "tg1" and not info.placeholder
    assert info.task_groups == (mapping.TaskGroup("tg1", 2, {"vcore": 1000, "memory": 1 << 30,
                                                             "pods": 1}),)
    assert (info.gang_style, info.placeholder_timeout_s) == ("Hard", 30)
    assert not info.finished
    assert mapping.pod_info({**p, "status": {"phase": "Succeeded"}}).finished


@pytest.mark.parametrize("ann,match", [
    ({"yunikorn.apache.org/task-groups": "[{"}, "task-groups"),
    ({"yunikorn.apache.org/task-groups": '[{"name": "a", "minMember": -1}]'}, "minMember"),
    ({"yunikorn.apache.org/schedulingPolicyParameters": "gangSchedulingStyle=Medium"}, "Soft or Hard"),
    ({"yunikorn.apache.org/schedulingPolicyParameters": "placeholderTimeoutInSeconds=x"}, "integer"),
])
def test_bad_gang_annotations(ann, match):
    with pytest.raises(PodError, match=match):
        mapping.pod_info(pod(annotations=ann))


def test_node_info():
    node = {"metadata": {"name": "n1", "labels": {"zone": "a"}},
            "spec": {"unschedulable": True},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110",
                                       "ephemeral-storage": "10Gi"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}
    info = mapping.node_info(node)
    assert info.allocatable == {"vcore": 4000, "memory": 8 << 30, "pods": 110,
                                "ephemeral-storage": 10 << 30}
    assert info.unschedulable and info.ready and not info.schedulable
    node["status"]["conditions"][0]["status"] = "False"
    node["spec"] = {}
    assert not mapping.node_info(node).ready
    del node["status"]["conditions"]
    assert mapping.node_info(node).schedulable      # no kubelet, no conditions: ready
    node["status"]["allocatable"]["cpu"] = "lots"
    with pytest.raises(NodeError, match="cpu"):
        mapping.node_info(node)


@given(st.lists(st.tuples(st.integers(0, 64_000), st.integers(0, 1 << 36)), min_size=1,
                max_size=5))
def test_resource_sum_property(values):
    p = pod(containers=[req(cpu=f"{c}m", memory=str(m)) for c, m in values])
    res = mapping.pod_resource(p)
    assert res.get("vcore", 0) == sum(c for c, _ in values)
    assert res.get("memory", 0) == sum(m for _, m in values)
    assert res["pods"] == 1
