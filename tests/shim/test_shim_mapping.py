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



@pytest.mark.parametrize("info, expected", [
    # what Go's json.Unmarshal refuses: YuniKorn's shim falls back to nobody, no groups
    ("{not json", ("nobody", ())), ('{"groups": "x"}', ("nobody", ())),
    ('{"user": 5}', ("nobody", ())), ('["alice"]', ("nobody", ())), ('"alice"', ("nobody", ())),
    # what it accepts: keys of any case, unknown keys ignored, null leaves the default
    ('{"User": "alice", "Groups": ["dev"], "extra": 1}', ("alice", ("dev",))),
    ('{"user": "", "groups": ["dev"]}', ("nobody", ("dev",))),
    ("null", ("nobody", ())), ('{"user": null, "groups": null}', ("nobody", ())),
])
def test_user_info_is_read_as_yunikorns_shim_reads_it(info, expected):
    annotated = pod(annotations={"yunikorn.apache.org/user.info": info})
    assert mapping.user_of(annotated) == expected
    assert (mapping.pod_info(annotated).user, mapping.pod_info(annotated).groups) == expected


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


def test_task_group_placement_is_kept_for_its_placeholders():
    groups = orjson.dumps([
        {"name": "ssd", "minMember": 1, "minResource": {"cpu": "1"},
         "nodeSelector": {"disktype": "ssd"},
         "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
         "topologySpreadConstraints": [{"maxSkew": 1}]},
        {"name": "plain", "minMember": 1, "minResource": {"cpu": "1"}},
    ]).decode()
    info = mapping.pod_info(pod(annotations={"yunikorn.apache.org/task-groups": groups}))
    ssd, plain = info.task_groups
    assert orjson.loads(ssd.placement_spec) == {
        "nodeSelector": {"disktype": "ssd"},
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]}
    assert plain.placement_spec == ""
    # the fragment is a pod spec's: mapped like one, it gives the ask's placement tag
    assert orjson.loads(mapping.placement_of(orjson.loads(ssd.placement_spec))) == {
        "nodeSelector": {"disktype": "ssd"},
        "tolerations": [{"key": "dedicated", "operator": "Exists", "value": "",
                         "effect": "NoSchedule"}]}


def test_bad_task_group_placement_names_the_group_field():
    groups = orjson.dumps([{"name": "a", "minMember": 1, "minResource": {"cpu": "1"}},
                           {"name": "b", "minMember": 1, "minResource": {"cpu": "1"},
                            "tolerations": [{"key": "k", "operator": "Maybe"}]}]).decode()
    with pytest.raises(mapping.PodError) as err:
        mapping.pod_info(pod(annotations={"yunikorn.apache.org/task-groups": groups}))
    assert str(err.value).startswith("annotation yunikorn.apache.org/task-groups[1].tolerations[0]")
    assert "Maybe" in str(err.value)


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


# ------------------------------------------------------------------ placement (ykshm.io/placement)
REQUIRED = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
TERM0 = f"{REQUIRED}.nodeSelectorTerms[0]"


def required(*terms):
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}


def expr(key="k", operator="In", values=("v",)):
    return {"key": key, "operator": operator, "values": list(values)}


def placement(**spec):
    raw = mapping.pod_info(pod(**spec)).placement
    return orjson.loads(raw) if raw else None


@pytest.mark.parametrize("spec", [
    {}, {"nodeSelector": {}}, {"tolerations": []}, {"nodeSelector": None, "tolerations": None},
    {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}},
    {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [expr()]}}]}}},
])
def test_no_placement_is_an_empty_tag(spec):
    assert mapping.pod_info(pod(**spec)).placement == ""


def test_placement_maps_each_source_field():
    affinity = required(
        {"matchExpressions": [expr("zone", "In", ["a", "b"]), expr("gpu", "Exists", []),
                              {"key": "cores", "operator": "Gt", "values": ["8"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}]},
        {})
    affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = [
        {"weight": 5, "preference": {"matchExpressions": [expr("x")]}}]
    tolerations = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
                   {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                    "effect": "NoExecute", "tolerationSeconds": 300},
                   {"operator": "Exists"}]
    assert placement(nodeSelector={"disktype": "ssd", "arch": "amd64"}, affinity=affinity,
                     tolerations=tolerations) == {
        "nodeSelector": {"arch": "amd64", "disktype": "ssd"},
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]},
                                  {"key": "gpu", "operator": "Exists", "values": []},
                                  {"key": "cores", "operator": "Gt", "values": ["8"]}],
             "matchFields": []},
            {"matchExpressions": [],
             "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}]},
            {"matchExpressions": [], "matchFields": []}],
        "tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "value": "",
             "effect": "NoExecute"},
            {"key": "", "operator": "Exists", "value": "", "effect": ""}]}


def test_placement_is_canonical_json_whatever_the_source_key_order():
    one = mapping.pod_info(pod(
        nodeSelector={"b": "2", "a": "1"},
        tolerations=[{"effect": "NoSchedule", "value": "v", "key": "k"}])).placement
    two = mapping.pod_info(pod(
        tolerations=[{"key": "k", "value": "v", "effect": "NoSchedule", "operator": "Equal"}],
        nodeSelector={"a": "1", "b": "2"})).placement
    assert one == two == ('{"nodeSelector":{"a":"1","b":"2"},"tolerations":[{"effect":'
                          '"NoSchedule","key":"k","operator":"Equal","value":"v"}]}')


def test_placement_recomputed_with_prev():
    first = mapping.pod_info(pod())
    later = mapping.pod_info(pod(tolerations=[{"key": "k", "operator": "Exists"}]), first)
    assert later.placement and first.placement == ""


@pytest.mark.parametrize("spec,field,words", [
    ({"nodeSelector": ["disktype=ssd"]}, "spec.nodeSelector", "object"),
    ({"nodeSelector": {"gpu": True}}, "spec.nodeSelector.gpu", "string"),
    ({"nodeSelector": {"": "x"}}, "spec.nodeSelector", "non-empty"),
    ({"affinity": "near"}, "spec.affinity", "object"),
    ({"affinity": {"nodeAffinity": []}}, "spec.affinity.nodeAffinity", "object"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}},
     REQUIRED, "object"),
    ({"affinity": required()}, f"{REQUIRED}.nodeSelectorTerms", "at least one term"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}},
     f"{REQUIRED}.nodeSelectorTerms", "at least one term"),
    ({"affinity": required({"matchExpressions": {"key": "k"}})},
     f"{TERM0}.matchExpressions", "list"),
    ({"affinity": required({"matchExpressions": [expr(), expr(operator="Foo")]})},
     f"{TERM0}.matchExpressions[1].operator",
     "'Foo' is not one of In, NotIn, Exists, DoesNotExist, Gt, Lt"),
    ({"affinity": required({"matchExpressions": [expr(key="")]})},
     f"{TERM0}.matchExpressions[0].key", "empty"),
    ({"affinity": required({"matchExpressions": [expr(key=7)]})},
     f"{TERM0}.matchExpressions[0].key", "string"),
    ({"affinity": required({"matchExpressions": [expr(values=[1])]})},
     f"{TERM0}.matchExpressions[0].values[0]", "string"),
    ({"affinity": required({"matchExpressions": [expr(operator="In", values=[])]})},
     f"{TERM0}.matchExpressions[0].values", "non-empty when operator is In"),
    ({"affinity": required({"matchExpressions": [expr(operator="NotIn", values=[])]})},
     f"{TERM0}.matchExpressions[0].values", "non-empty when operator is NotIn"),
    ({"affinity": required({"matchExpressions": [expr(operator="Exists", values=["v"])]})},
     f"{TERM0}.matchExpressions[0].values", "empty when operator is Exists"),
    ({"affinity": required({"matchExpressions": [expr(operator="DoesNotExist")]})},
     f"{TERM0}.matchExpressions[0].values", "empty when operator is DoesNotExist"),
    ({"affinity": required({"matchExpressions": [expr(operator="Gt", values=["1", "2"])]})},
     f"{TERM0}.matchExpressions[0].values", "exactly one value"),
    ({"affinity": required({"matchExpressions": [expr(operator="Lt", values=[])]})},
     f"{TERM0}.matchExpressions[0].values", "exactly one value"),
    ({"affinity": required({"matchExpressions": [expr(operator="Gt", values=["1.5"])]})},
     f"{TERM0}.matchExpressions[0].values[0]", "not an integer"),
    ({"affinity": required({"matchExpressions": [expr(operator="Lt", values=[str(1 << 63)])]})},
     f"{TERM0}.matchExpressions[0].values[0]", "not an integer"),
    ({"affinity": required({"matchFields": [expr(key="metadata.labels")]})},
     f"{TERM0}.matchFields[0].key", "'metadata.labels' is not one of metadata.name"),
    ({"affinity": required({"matchFields": [expr(key="metadata.name", operator="Exists")]})},
     f"{TERM0}.matchFields[0].operator", "not one of In, NotIn"),
    ({"affinity": required({"matchFields": [expr(key="metadata.name", values=["a", "b"])]})},
     f"{TERM0}.matchFields[0].values", "exactly one value"),
    ({"affinity": required({}, {"matchExpressions": ["zone"]})},
     f"{REQUIRED}.nodeSelectorTerms[1].matchExpressions[0]", "object"),
    ({"tolerations": {"key": "k"}}, "spec.tolerations", "list"),
    ({"tolerations": ["k"]}, "spec.tolerations[0]", "object"),
    ({"tolerations": [{"key": "k", "operator": "Near"}]}, "spec.tolerations[0].operator",
     "'Near' is not one of Equal, Exists"),
    ({"tolerations": [{"operator": "Exists"}, {"key": "k", "operator": "Exists", "value": "v"}]},
     "spec.tolerations[1].value", "empty when operator is Exists"),
    ({"tolerations": [{"key": "k", "effect": "NoRun"}]}, "spec.tolerations[0].effect",
     "'NoRun' is not one of NoSchedule, PreferNoSchedule, NoExecute"),
    ({"tolerations": [{"value": "v"}]}, "spec.tolerations[0].operator", "Exists when key is empty"),
    ({"tolerations": [{"key": "k", "value": 5}]}, "spec.tolerations[0].value", "string"),
    ({"tolerations": [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}]},
     "spec.tolerations[0].effect", "NoExecute when tolerationSeconds"),
])
def test_malformed_placement_names_the_field(spec, field, words):
    with pytest.raises(PodError) as exc:
        mapping.pod_info(pod(**spec))
    message = str(exc.value)
    assert message.startswith(f"{field}: "), message
    assert words in message, message


def test_operator_error_message_exactly():
    with pytest.raises(PodError) as exc:
        mapping.pod_info(pod(affinity=required(
            {"matchExpressions": [expr(), expr(operator="Foo")]})))
    assert str(exc.value) == (
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
        "nodeSelectorTerms[0].matchExpressions[1].operator: 'Foo' is not one of In, NotIn, "
        "Exists, DoesNotExist, Gt, Lt")


@pytest.mark.parametrize("value", ["0", "-3", "+7", str((1 << 63) - 1), str(-(1 << 63))])
def test_gt_lt_accept_int64(value):
    assert placement(affinity=required({"matchExpressions": [expr(operator="Lt", values=[value])]}))


# ------------------------------------------------------------------ node taints
def test_node_taints_keep_no_schedule_and_no_execute_only():
    node = {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "1"}},
            "spec": {"taints": [
                {"key": "a", "value": "1", "effect": "NoSchedule"},
                {"key": "b", "effect": "PreferNoSchedule"},
                {"key": "c", "effect": "NoExecute", "timeAdded": "2024-01-01T00:00:00Z"},
                "garbage", {"key": "", "effect": "NoSchedule"}, {"key": 3, "effect": "NoSchedule"},
                {"key": "d", "value": 4, "effect": "NoSchedule"}, {"key": "e", "effect": "Nope"},
                {"key": "f", "value": None, "effect": "NoExecute"}]}}
    info = mapping.node_info(node)
    assert info.taints == (("a", "1", "NoSchedule"), ("c", "", "NoExecute"),
                           ("f", "", "NoExecute"))
    assert orjson.loads(mapping.taints_json(info.taints)) == [
        {"key": "a", "value": "1", "effect": "NoSchedule"},
        {"key": "c", "value": "", "effect": "NoExecute"},
        {"key": "f", "value": "", "effect": "NoExecute"}]


@pytest.mark.parametrize("taints", [None, [], "x", {"key": "a"}])
def test_node_without_usable_taints(taints):
    node = {"metadata": {"name": "n1"}, "spec": {"taints": taints}, "status": {}}
    assert mapping.node_info(node).taints == ()
    assert mapping.taints_json(()) == "[]"


# --- inter-pod affinity ------------------------------------------------------------------------

POD_ANTI = "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def test_pod_affinity_terms_and_labels_reach_the_tag():
    """Required pod (anti-)affinity terms go into the placement tag in canonical form (the
    labelSelector both lists, absent parts left out); preferred ones are not sent."""
    affinity = {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "topology.kubernetes.io/zone",
             "labelSelector": {"matchExpressions": [
                 {"key": "app", "operator": "In", "values": ["db"]}]},
             "namespaces": ["data"]}]},
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname",
                 "labelSelector": {"matchLabels": {"app": "web"}},
                 "namespaceSelector": {}}],
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}]},
    }
    info = mapping.pod_info(pod(labels={"app": "web", "tier": "front"}, affinity=affinity))
    assert orjson.loads(info.placement) == {
        "podAffinity": [{"topologyKey": "topology.kubernetes.io/zone",
                         "labelSelector": {"matchLabels": {}, "matchExpressions": [
                             {"key": "app", "operator": "In", "values": ["db"]}]},
                         "namespaces": ["data"]}],
        "podAntiAffinity": [{"topologyKey": "kubernetes.io/hostname",
                             "labelSelector": {"matchLabels": {"app": "web"},
                                               "matchExpressions": []},
                             "namespaceSelector": {"matchLabels": {}, "matchExpressions": []}}]}
    assert info.labels == (("app", "web"), ("tier", "front"))


def test_only_preferred_pod_affinity_is_no_placement():
    preferred = {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}]}
    assert mapping.pod_info(pod(affinity={"podAffinity": preferred,
                                          "podAntiAffinity": preferred})).placement == ""


@pytest.mark.parametrize("terms,field,words", [
    ({"x": 1}, POD_ANTI, "must be a list"),
    ([{"labelSelector": {}}], f"{POD_ANTI}[0].topologyKey", "must not be empty"),
    ([{"topologyKey": "zone", "labelSelector": {"matchExpressions": [
        {"key": "app", "operator": "NotIn", "values": []}]}}],
     f"{POD_ANTI}[0].labelSelector.matchExpressions[0].values", "non-empty when operator is NotIn"),
    ([{"topologyKey": "zone", "labelSelector": {"matchLabels": {"bad key": "v"}}}],
     f"{POD_ANTI}[0].labelSelector.matchLabels", "'bad key' is not a valid label key"),
    ([{"topologyKey": "zone", "namespaceSelector": {"matchLabels": {"team": "a"}}}],
     f"{POD_ANTI}[0].namespaceSelector", "only the label kubernetes.io/metadata.name"),
])
def test_malformed_pod_affinity_names_the_pod_field(terms, field, words):
    with pytest.raises(PodError) as exc:
        mapping.pod_info(pod(affinity={"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": terms}}))
    message = str(exc.value)
    assert message.startswith(f"{field}: ") and words in message, message


def test_task_group_labels_and_pod_affinity_are_kept_for_its_placeholders():
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"pe": "j"}}}]}}
    groups = orjson.dumps([{"name": "pes", "minMember": 2, "minResource": {"cpu": "1"},
                            "labels": {"pe": "j"}, "affinity": anti}]).decode()
    (group,) = mapping.pod_info(pod(annotations={"yunikorn.apache.org/task-groups": groups}))\
        .task_groups
    assert group.labels == (("pe", "j"),)
    assert "podAntiAffinity" in mapping.placement_of(orjson.loads(group.placement_spec))
    bad = orjson.dumps([{"name": "pes", "minMember": 1, "labels": {"pe": "not ok"}}]).decode()
    with pytest.raises(PodError) as exc:
        mapping.pod_info(pod(annotations={"yunikorn.apache.org/task-groups": bad}))
    assert str(exc.value).startswith(
        "annotation yunikorn.apache.org/task-groups[0].labels.pe: 'not ok' is not a valid label")


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2) | st.sampled_from(
        ["", "app", "web", "In", "NotIn", "Exists", "Gt", "kubernetes.io/hostname", "a b"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
        ["requiredDuringSchedulingIgnoredDuringExecution", "topologyKey", "labelSelector",
         "namespaces", "namespaceSelector", "matchLabels", "matchExpressions", "key",
         "operator", "values", "app"]), inner, max_size=4), max_leaves=14)


@given(affinity=st.dictionaries(st.sampled_from(["podAffinity", "podAntiAffinity"]), _JSON,
                                max_size=2))
def test_any_pod_affinity_is_a_pod_error_or_a_tag_the_engine_accepts(affinity):
    """Only the documented error ever comes out, and the engine never has to refuse a tag
    the shim built (one validator on both sides)."""
    from engine.predicates import parse_placement
    try:
        info = mapping.pod_info(pod(affinity=affinity))
    except PodError as exc:
        assert str(exc).startswith("spec.affinity."), str(exc)
        return
    if info.placement:
        parse_placement(info.placement)
