"""The scheduler under the RBAC deploy/kubernetes ships, judged by the real RBAC authorizer (issue 31
item 4, third bullet, as far as it goes without a node agent to run the Deployments' pods): the
shim authenticates as the ServiceAccount `yunikorn/yunikorn-admin` with a token the real
apiserver issued, reads its configuration from the ConfigMaps of its namespace and hot-reloads
an edit, schedules, and preemption marks its victim (`DisruptionTarget`, then deleted), with no
403 in its log.
The whole kustomization applied, every role a pod run by the node agent: test_realk8s_apply_k.py.

The real Priority admission plugin refuses a pod's own `spec.priority`, so the urgent pod gets its
priority from a PriorityClass, as on any cluster.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from simcluster import pki
from tests.realk8s.realsched import RealScheduler
from tools import harness

DEPLOY = Path(harness.ROOT) / "deploy" / "kubernetes"
NAMESPACE = "yunikorn"
QUEUES = {"partitions": [{"name": "default", "queues": [{"name": "root", "queues": [
    {"name": "batch"},
    {"name": "prod", "resources": {"guaranteed": {"vcore": 1, "memory": "1Gi"}},
     "properties": {"preemption.delay": "1s"}}]}]}]}


def leaf_queues(cluster: harness.Cluster) -> set[str]:
    root = (cluster.engine_doc() or {}).get("queues", {}).get("default") or {}
    return {q["queuename"].removeprefix("root.") for q in root.get("children") or []}


def service_account_kubeconfig(plane, tmp: Path) -> Path:
    """The shipped RBAC applied; a kubeconfig with a token of the scheduler's ServiceAccount."""
    plane.kubectl("apply", *[a for f in ("namespace", "yunikorn-defaults", "scheduler-rbac")
                             for a in ("-f", str(DEPLOY / f"{f}.yaml"))])
    token = plane.kubectl("-n", NAMESPACE, "create", "token", "yunikorn-admin", "--duration=1h").stdout.strip()
    path = tmp / "yunikorn-admin.kubeconfig"
    path.write_text(pki.kubeconfig(plane.server, plane.pki.ca_crt, "yunikorn-admin", {"token": token}))
    return path


@pytest.fixture
def scheduler(plane, tmp_path, ring_name):
    plane.register_node("tiny", {"cpu": "2", "memory": "4Gi", "pods": "110"})
    real = RealScheduler(plane, ring_name, service_account_kubeconfig(plane, tmp_path),
                         shim_args=["--configmaps", "--namespace", NAMESPACE])
    try:
        real.cluster.start_engine()
        real.start_shim()
        yield real
    finally:
        real.close()


def test_shipped_rbac_configmap_reload_and_preemption_on_the_real_apiserver(plane, scheduler):
    c = scheduler.cluster
    harness.wait_for(lambda: (c.engine_doc() or {})["engine"]["configSource"] == "rm:mycluster", 30,
                     "the configuration from the ConfigMaps in force")
    plane.apply_json({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": "yunikorn-configs", "namespace": NAMESPACE},
                      "data": {"queues.yaml": yaml.safe_dump(QUEUES)}}, verb="apply")
    harness.wait_for(lambda: leaf_queues(c) == {"batch", "prod"}, 30, "the edited ConfigMap hot-reloaded")

    for name in ("batch-1", "batch-2"):
        scheduler.create_pod(name, "app-batch", queue="root.batch", cpu="1")
        scheduler.wait_bound([name])
    plane.apply_json({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                      "metadata": {"name": "urgent"}, "value": 1000})
    scheduler.create_pod("urgent", "app-prod", queue="root.prod", cpu="1",
                         spec_extra={"priorityClassName": "urgent"})

    def marked():
        victims = [p for p in plane.kubectl_json("get", "pods")["items"]
                   if any(cond["type"] == "DisruptionTarget" and cond["status"] == "True"
                          for cond in p["status"].get("conditions") or [])]
        return victims
    [victim] = plane.wait_for("the preemption victim marked", marked, timeout=60)
    assert victim["metadata"]["name"] == "batch-2"      # the newer batch pod
    condition = next(c for c in victim["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert condition["reason"] == "PreemptionByScheduler"
    plane.wait_for("the victim deleted", lambda: plane.kubectl_json("get", "pod", "batch-2")["metadata"].get(
        "deletionTimestamp"), timeout=30)   # Terminating: no kubelet confirms it (no node agent yet)
    log = scheduler.shim_log()
    assert " 403 " not in log and "forbidden" not in log.lower(), log
    assert json.loads(plane.kubectl("get", "pod", "batch-1", "-o", "json").stdout)["spec"]["nodeName"] == "tiny"


def test_the_streams_controller_grants_its_operators_only_what_it_holds(plane, tmp_path):
    """deploy/kubernetes gives the Streams controller roles/rolebindings get/create (each job's
    cr-operator gets a Role and RoleBinding of its own, `--operators pod`). Playing a controller
    gone bad with its ServiceAccount's token against kube-apiserver's escalation check: binding
    `admin` to itself, or a Role reading every Secret, is 403; the operator's own kind of Role
    (its job's PEs and regions, one Secret by name) and its binding are made."""
    plane.kubectl("apply", *[a for f in ("namespace", "streams-rbac")
                             for a in ("-f", str(DEPLOY / f"{f}.yaml"))])
    token = plane.kubectl("-n", NAMESPACE, "create", "token", "ykshm-streams", "--duration=1h").stdout.strip()
    config = tmp_path / "ykshm-streams.kubeconfig"
    config.write_text(pki.kubeconfig(plane.server, plane.pki.ca_crt, "ykshm-streams", {"token": token}))
    sa = {"kind": "ServiceAccount", "name": "ykshm-streams", "namespace": NAMESPACE}

    def create(obj: dict):
        path = tmp_path / f"{obj['kind']}-{obj['metadata']['name']}.json"
        path.write_text(json.dumps(obj))
        return plane.inside("kubectl", "create", "-f", str(path), kubeconfig=str(config), check=False)

    def role(name: str, rules: list[dict]) -> dict:
        return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": name, "namespace": "default"}, "rules": rules}

    def binding(name: str, kind: str, role_name: str) -> dict:
        return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": name, "namespace": "default"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role_name},
                "subjects": [sa]}

    # `admin` is aggregated by kube-controller-manager: an empty role would be no escalation
    plane.wait_for("ClusterRole admin aggregated",
                   lambda: plane.kubectl_json("get", "clusterrole", "admin").get("rules"), timeout=60)
    refused = create(binding("grab-admin", "ClusterRole", "admin"))
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stderr
    refused = create(role("read-all-secrets", [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]))
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stderr
    operator_rules = [{"apiGroups": ["streams.ibm.com"], "resources": ["streamspes", "streamscrs"],
                       "verbs": ["get", "list", "watch"]},
                      {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["j-token"]}]
    made = create(role("j-consistent-region-operator", operator_rules))
    assert made.returncode == 0, made.stderr
    made = create(binding("j-consistent-region-operator", "Role", "j-consistent-region-operator"))
    assert made.returncode == 0, made.stderr
