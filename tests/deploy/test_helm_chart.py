"""Issue 35 item 7: the Helm chart deploy/helm/ykshm, rendered by the real `helm` (v3.22.0, built by
`ykshm realk8s build`). By default it renders exactly the objects of the kustomization
deploy/kubernetes (the Namespace excepted: `helm install --create-namespace` makes it, as YuniKorn's
documentation installs); YuniKorn's chart values land where a YuniKorn user would look for them,
and YuniKorn's own values.yaml is accepted; a YuniKorn value ykshm cannot honour is one line and a
failed render, never a silently different deployment; a mistyped key or an out-of-range value is
refused by the chart's schema; `helm lint --strict` passes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy import helmcli

YUNIKORN_VALUES_FILE = Path(__file__).parent / "data" / "yunikorn-values.yaml"   # YuniKorn's own, unchanged
HELM_LABELS = ("chart", "release", "heritage")   # YuniKorn's chart labels, beside app/component

# A YuniKorn user's values file: the names are YuniKorn's chart values.
YUNIKORN_VALUES = {
    "image": {"repository": "registry.example.com/ykshm", "tag": "1.2.3", "pullPolicy": "Always"},
    "imagePullSecrets": ["regcred"],
    "serviceAccount": "sched-sa",
    "priorityClassName": "system-cluster-critical",
    "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "scheduler", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
    "resources": {"requests": {"cpu": "1", "memory": "3Gi"}, "limits": {"cpu": "8", "memory": "6Gi"}},
    "web": {"resources": {"requests": {"cpu": "300m", "memory": "200Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}}},
    "service": {"type": "NodePort", "port": 9180},
    "podLabels": {"team": "platform"},
    "podAnnotations": {"prometheus.io/scrape": "true"},
    "yunikornDefaults": {"service.placeholderImage": "registry.k8s.io/pause:3.10",
                         "admissionController.filtering.bypassNamespaces": "^kube-system$,^team-x$",
                         "log.level": "-1"},
    "admissionController": {
        "replicaCount": 2, "serviceAccount": "admission-sa", "priorityClassName": "system-node-critical",
        "image": {"tag": "admission-1.2.3"},
        "resources": {"requests": {"cpu": "200m", "memory": "600Mi"}, "limits": {"cpu": "1", "memory": "700Mi"}},
        "nodeSelector": {"pool": "infra"}, "service": {"type": "NodePort"},
        "podLabels": {"team": "platform-admission"}},
}


def strip_helm_labels(obj):
    """The object without YuniKorn's chart labels (the only thing the chart adds)."""
    if isinstance(obj, dict):
        return {k: strip_helm_labels({x: y for x, y in v.items() if x not in HELM_LABELS} if k == "labels" else v)
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [strip_helm_labels(v) for v in obj]
    return obj


def kustomization() -> dict[tuple[str, str], dict]:
    out = subprocess.run(["kubectl", "kustomize", str(helmcli.KUSTOMIZATION)], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    return helmcli.by_name([d for d in yaml.safe_load_all(out) if d])


def values_file(tmp_path, values: dict, name: str = "values.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(values))
    return str(path)


def pod_spec(objects, deployment: str) -> dict:
    return objects[("Deployment", deployment)]["spec"]["template"]["spec"]


def containers(objects, deployment: str) -> dict[str, dict]:
    return {c["name"]: c for c in pod_spec(objects, deployment)["containers"]}


def test_the_defaults_render_the_kustomizations_objects(tmp_path):
    chart = helmcli.by_name(helmcli.template(tmp_path))
    kustomized = kustomization()
    assert set(kustomized) - set(chart) == {("Namespace", "yunikorn")}   # made by `helm install --create-namespace`
    assert set(chart) - set(kustomized) == set()
    for key, obj in chart.items():
        assert strip_helm_labels(obj) == kustomized[key], key
        assert obj["metadata"]["labels"]["release"] == "ykshm" and obj["metadata"]["labels"]["heritage"] == "Helm"


def test_yunikorn_values_land_where_a_yunikorn_user_looks(tmp_path):
    objects = helmcli.by_name(helmcli.template(tmp_path, "-f", values_file(tmp_path, YUNIKORN_VALUES)))

    sched = pod_spec(objects, "yunikorn-scheduler")
    assert sched["serviceAccountName"] == "sched-sa"
    assert sched["imagePullSecrets"] == [{"name": "regcred"}]
    assert sched["priorityClassName"] == "system-cluster-critical"
    assert sched["nodeSelector"] == YUNIKORN_VALUES["nodeSelector"]
    assert sched["tolerations"] == YUNIKORN_VALUES["tolerations"]
    assert sched["affinity"] == YUNIKORN_VALUES["affinity"]
    template_meta = objects[("Deployment", "yunikorn-scheduler")]["spec"]["template"]["metadata"]
    assert template_meta["labels"]["team"] == "platform"
    assert template_meta["annotations"] == {"prometheus.io/scrape": "true"}
    roles = containers(objects, "yunikorn-scheduler")
    for c in roles.values():
        assert c["image"] == "registry.example.com/ykshm:1.2.3" and c["imagePullPolicy"] == "Always"
    assert roles["yunikorn-scheduler-engine"]["resources"] == YUNIKORN_VALUES["resources"]
    assert roles["yunikorn-scheduler-web"]["resources"] == YUNIKORN_VALUES["web"]["resources"]
    assert "$(POD_IP):9180" in roles["yunikorn-scheduler-web"]["args"]       # the web listens on service.port
    assert roles["yunikorn-scheduler-web"]["ports"] == [{"name": "http1", "containerPort": 9180}]
    service = objects[("Service", "yunikorn-service")]["spec"]
    assert service["type"] == "NodePort" and service["ports"][0]["port"] == 9180

    # the scheduler's ServiceAccount is the one its bindings name
    assert ("ServiceAccount", "sched-sa") in objects and ("ServiceAccount", "yunikorn-admin") not in objects
    for binding in (("ClusterRoleBinding", "yunikorn-rbac"), ("RoleBinding", "yunikorn-rbac")):
        assert objects[binding]["subjects"] == [{"kind": "ServiceAccount", "name": "sched-sa", "namespace": "yunikorn"}]

    admission = objects[("Deployment", "yunikorn-admission-controller")]["spec"]
    assert admission["replicas"] == 2
    spec = admission["template"]["spec"]
    assert spec["serviceAccountName"] == "admission-sa" and spec["nodeSelector"] == {"pool": "infra"}
    assert spec["priorityClassName"] == "system-node-critical"
    assert admission["template"]["metadata"]["labels"]["team"] == "platform-admission"
    [ac] = spec["containers"]
    assert ac["image"] == "registry.example.com/ykshm:admission-1.2.3"   # its own tag, the image's repository
    assert ac["resources"] == YUNIKORN_VALUES["admissionController"]["resources"]
    assert objects[("Service", "yunikorn-admission-controller-service")]["spec"]["type"] == "NodePort"
    assert objects[("ClusterRoleBinding", "yunikorn-admission-controller-cluster-rbac")]["subjects"][0]["name"] == \
        "admission-sa"

    assert objects[("ConfigMap", "yunikorn-defaults")]["data"] == YUNIKORN_VALUES["yunikornDefaults"]
    [streams] = containers(objects, "ykshm-streams").values()
    assert streams["image"] == "registry.example.com/ykshm:1.2.3"


def test_the_deprecated_values_yunikorn_still_maps_and_yunikorn_defaults_wins(tmp_path):
    queues = "partitions:\n  - name: default\n    queues: [{name: root, queues: [{name: batch}]}]\n"
    values = {"configuration": queues, "placeHolderImage": "old/pause:1", "operatorPlugins": "general",
              "admissionController": {"processNamespaces": "^spark-", "noLabelNamespaces": "^kube-"},
              "yunikornDefaults": {"service.placeholderImage": "new/pause:2"}}
    data = helmcli.by_name(helmcli.template(tmp_path, "-f", values_file(tmp_path, values)))[
        ("ConfigMap", "yunikorn-defaults")]["data"]
    assert data == {"queues.yaml": queues, "service.operatorPlugins": "general",
                    "service.placeholderImage": "new/pause:2",
                    "admissionController.filtering.processNamespaces": "^spark-",
                    "admissionController.filtering.noLabelNamespaces": "^kube-"}
    assert yaml.safe_load(data["queues.yaml"])["partitions"][0]["queues"][0]["queues"] == [{"name": "batch"}]


def test_without_the_admission_controller_or_streams_their_objects_are_not_rendered(tmp_path):
    everything = set(helmcli.by_name(helmcli.template(tmp_path)))
    left = set(helmcli.by_name(helmcli.template(tmp_path, "--set", "embedAdmissionController=false",
                                                "--set", "streams.enabled=false")))
    assert {name for _, name in everything - left} == {
        "admission-controller-secrets", "yunikorn-admission-controller", "yunikorn-admission-controller-service",
        "yunikorn-admission-controller-cluster-role", "yunikorn-admission-controller-cluster-rbac",
        "yunikorn-admission-controller-role", "yunikorn-admission-controller-rbac", "ykshm-streams",
        "ykshm-streams-api"}
    assert {kind for kind, name in everything - left if name == "ykshm-streams"} == {
        "Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
    assert ("Deployment", "yunikorn-scheduler") in left and ("ConfigMap", "yunikorn-defaults") in left


def test_yunikorns_own_values_file_is_accepted_and_means_the_same(tmp_path):
    """A YuniKorn user's values file carries over: YuniKorn's chart defaults render (its Go runtime
    settings and UI port ignored) with its images, pull policy and host-network admission pod."""
    objects = helmcli.by_name(helmcli.template(tmp_path, "-f", str(YUNIKORN_VALUES_FILE)))
    roles = containers(objects, "yunikorn-scheduler")
    assert {name: c["image"] for name, c in roles.items()} == {
        "yunikorn-scheduler-engine": "apache/yunikorn:scheduler-latest",
        "yunikorn-scheduler-k8s": "apache/yunikorn:scheduler-latest",
        "yunikorn-scheduler-web": "apache/yunikorn:web-latest"}
    assert {c["imagePullPolicy"] for c in roles.values()} == {"Always"}
    admission = objects[("Deployment", "yunikorn-admission-controller")]["spec"]
    assert admission["strategy"] == {"type": "Recreate"}
    assert (admission["template"]["spec"]["hostNetwork"], admission["template"]["spec"]["dnsPolicy"]) == (
        True, "ClusterFirstWithHostNet")
    assert admission["template"]["spec"]["containers"][0]["image"] == "apache/yunikorn:admission-latest"
    assert objects[("ConfigMap", "yunikorn-defaults")]["data"] == {}
    done = helmcli.run(tmp_path, "lint", "--strict", str(helmcli.CHART), "-f", str(YUNIKORN_VALUES_FILE))
    assert "0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("setting, message", [
    ("imagee.tag=1", "- at '': additional properties 'imagee' not allowed"),
    ("yunikornDefault.log\\.level=-1", "- at '': additional properties 'yunikornDefault' not allowed"),
    ("service.port=99999", "- at '/service/port': maximum: got 99,999, want 65,535"),
    ("admissionController.replicaCount=0", "- at '/admissionController/replicaCount': minimum: got 0, want 1"),
])
def test_a_mistyped_or_out_of_range_value_is_refused_by_the_schema(tmp_path, setting, message):
    done = helmcli.run(tmp_path, "template", "ykshm", str(helmcli.CHART), "--set", setting, check=False)
    assert done.returncode == 1 and done.stdout == ""
    assert [line for line in done.stderr.splitlines() if line] == [
        "Error: values don't meet the specifications of the schema(s) in the following chart(s):", "ykshm:", message]


@pytest.mark.parametrize("setting, message", [
    ("enableWebService=false", "enableWebService=false is not supported: ykshm's web container also serves "
                               "the REST API (/ws/v1) the admission controller and users reach"),
    ("ingress.enabled=true", "ingress.enabled=true is not supported by this chart: expose the Service "
                             "yunikorn-service (port service.port) with your own Ingress"),
])
def test_a_yunikorn_value_ykshm_cannot_honour_is_one_line_and_no_render(tmp_path, setting, message):
    done = helmcli.run(tmp_path, "template", "ykshm", str(helmcli.CHART), "--set", setting, check=False)
    assert done.returncode == 1 and done.stdout == ""
    line, *rest = [text for text in done.stderr.splitlines() if text]
    assert line.startswith("Error: execution error at (ykshm/templates/") and line.endswith(message), line
    assert rest == ["Use --debug flag to render out invalid YAML"]     # helm's own hint, nothing else


def test_helm_lint_strict_passes_with_defaults_and_yunikorn_values(tmp_path):
    for args in ((), ("-f", values_file(tmp_path, YUNIKORN_VALUES))):
        done = helmcli.run(tmp_path, "lint", "--strict", str(helmcli.CHART), *args)
        assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout, done.stdout


def test_helm_is_the_pinned_release(tmp_path):
    done = helmcli.run(tmp_path, "version", "--short")
    assert done.stdout.strip().startswith("v3.22.0")
