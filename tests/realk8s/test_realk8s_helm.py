"""Issue 35 item 7: `helm install` of deploy/helm/ykshm into the real control plane (realplane.py), as
a YuniKorn user installs YuniKorn's chart: `helm install ... --namespace yunikorn --create-namespace`
with a values file in YuniKorn's names. The release is deployed and every object of its manifest
exists; the controller manager makes each Deployment's pod under the chart's ServiceAccount; the
shim, authenticated as that ServiceAccount with a token the real apiserver issued, runs the queues
the chart put in yunikorn-defaults (`yunikornDefaults`) and binds a pod with no 403 (what
test_realk8s_deploy_rbac.py checks for the kustomization, the preemption left to it: the RBAC
rules are the same, tests/deploy/test_helm_chart.py compares them); `helm upgrade` changes the
image; `helm uninstall` removes the cluster-wide objects too (no hooks left behind).

No node agent runs the Deployments' pods (they stay Pending); the shim and engine run as local
processes, as in the RBAC test.
"""

from __future__ import annotations

import json

import pytest
import yaml

from simcluster import pki
from tests.deploy import helmcli
from tests.realk8s.realsched import RealScheduler
from tools import harness

NS = helmcli.NAMESPACE
SCHEDULER_SA = "ykshm-scheduler"      # not the default yunikorn-admin: the value must reach the bindings
QUEUES = {"partitions": [{"name": "default", "queues": [{"name": "root", "queues": [
    {"name": "helm"}, {"name": "other"}]}]}]}
VALUES = {"image": {"repository": "registry.example.com/ykshm", "tag": "0.1.0"},
          "serviceAccount": SCHEDULER_SA,
          "yunikornDefaults": {"queues.yaml": yaml.safe_dump(QUEUES)}}
DEPLOYMENTS = {"yunikorn-scheduler": SCHEDULER_SA, "yunikorn-admission-controller": "yunikorn-admission-controller",
               "ykshm-streams": "ykshm-streams"}
CLUSTER_KINDS = {"ClusterRole", "ClusterRoleBinding"}


def helm(plane, home, *args: str) -> str:
    """The real helm inside the plane's network namespace, KUBECONFIG the admin's."""
    env = [f"{k}={v}" for k, v in helmcli.env(home).items()]
    return plane.inside("env", *env, str(helmcli.binary()), *args, timeout=120).stdout


def exists(plane, kind: str, name: str) -> bool:
    scope = [] if kind in CLUSTER_KINDS else ["-n", NS]
    return plane.kubectl("get", kind, name, *scope, "-o", "name", check=False).returncode == 0


def leaf_queues(cluster: harness.Cluster) -> set[str]:
    root = (cluster.engine_doc() or {}).get("queues", {}).get("default") or {}
    return {q["queuename"].removeprefix("root.") for q in root.get("children") or []}


@pytest.fixture
def installed(plane, tmp_path):
    """The chart installed as release `ykshm`; its manifest's objects as (kind, name)."""
    helmcli.binary()
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(VALUES))
    home = tmp_path / "helm"
    helm(plane, home, "install", "ykshm", str(helmcli.CHART), "--namespace", NS, "--create-namespace",
         "-f", str(values))
    manifest = [d for d in yaml.safe_load_all(helm(plane, home, "get", "manifest", "ykshm", "--namespace", NS)) if d]
    assert [(o["kind"], o["metadata"]["name"]) for o in manifest] == [
        (o["kind"], o["metadata"]["name"]) for o in helmcli.template(home, "-f", str(values))]   # what it renders
    yield home, {(o["kind"], o["metadata"]["name"]) for o in manifest}


def test_helm_install_deploys_the_chart_and_the_shim_schedules_under_its_rbac(plane, installed, tmp_path,
                                                                              ring_name):
    home, objects = installed
    [release] = json.loads(helm(plane, home, "list", "--namespace", NS, "-o", "json"))
    assert (release["name"], release["status"], release["chart"]) == ("ykshm", "deployed", "ykshm-0.1.0")
    assert ("ServiceAccount", SCHEDULER_SA) in objects and ("Deployment", "yunikorn-scheduler") in objects
    missing = [obj for obj in sorted(objects) if not exists(plane, *obj)]
    assert missing == []
    config = plane.kubectl_json("-n", NS, "get", "configmap", "yunikorn-defaults")
    assert config["metadata"]["annotations"]["meta.helm.sh/release-name"] == "ykshm"
    assert yaml.safe_load(config["data"]["queues.yaml"]) == QUEUES

    def pods():   # the controller manager's ReplicaSets make one pod per Deployment
        found = {p["metadata"]["labels"].get("component"): p
                 for p in plane.kubectl_json("-n", NS, "get", "pods")["items"]}
        return set(found) >= {"yunikorn-scheduler", "yunikorn-admission-controller", "ykshm-streams"} and found
    found = plane.wait_for("a pod of each Deployment", pods, timeout=60)
    for deployment, account in DEPLOYMENTS.items():
        spec = found[deployment]["spec"]       # component label = Deployment name
        assert spec["serviceAccountName"] == account
        assert {c["image"] for c in spec["containers"]} == {"registry.example.com/ykshm:0.1.0"}

    # the shim as the chart's ServiceAccount: its queues from the chart's yunikorn-defaults, a pod bound
    plane.register_node("tiny", {"cpu": "2", "memory": "4Gi", "pods": "110"})
    token = plane.kubectl("-n", NS, "create", "token", SCHEDULER_SA, "--duration=1h").stdout.strip()
    kubeconfig = tmp_path / "sa.kubeconfig"
    kubeconfig.write_text(pki.kubeconfig(plane.server, plane.pki.ca_crt, SCHEDULER_SA, {"token": token}))
    real = RealScheduler(plane, ring_name, kubeconfig, shim_args=["--configmaps", "--namespace", NS])
    try:
        real.cluster.start_engine()
        real.start_shim()
        harness.wait_for(lambda: leaf_queues(real.cluster) == {"helm", "other"}, 30,
                         "the queues of the chart's yunikorn-defaults in force")
        real.create_pod("p1", "app-helm", queue="root.helm", cpu="1")
        assert real.wait_bound(["p1"]) == {"p1": "tiny"}
        log = real.shim_log()
        assert " 403 " not in log and "forbidden" not in log.lower(), log
    finally:
        real.close()

    helm(plane, home, "upgrade", "ykshm", str(helmcli.CHART), "--namespace", NS, "--reuse-values",
         "--set", "image.tag=0.2.0")
    deployment = plane.kubectl_json("-n", NS, "get", "deployment", "yunikorn-scheduler")
    assert {c["image"] for c in deployment["spec"]["template"]["spec"]["containers"]} == {
        "registry.example.com/ykshm:0.2.0"}
    assert json.loads(helm(plane, home, "list", "--namespace", NS, "-o", "json"))[0]["revision"] == "2"

    helm(plane, home, "uninstall", "ykshm", "--namespace", NS)
    left = [obj for obj in sorted(objects) if exists(plane, *obj)]
    assert left == []
    assert json.loads(helm(plane, home, "list", "--namespace", NS, "-o", "json")) == []
