"""Issue 11 on a live `ykshm sim-cluster`, driven by the real clients: kubectl and the official
Python client (`kubernetes`): server-side apply, Services, ServiceAccounts, node Leases, eviction with
PodDisruptionBudgets (`kubectl drain`), `kubectl explain` from the real schema, the per-namespace
`kube-root-ca.crt`, timestamps normalised to `Z` and the simulated kubelet's pod events.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient

from tests.simcluster.test_simcluster import kubectl, start_cluster, stop_cluster

APPLY = "application/apply-patch+yaml"


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    proc, url = start_cluster("--nodes", "3", "--kubelet-delay", "0.05", "--node-lease-interval", "0.3")
    try:
        yield url
    finally:
        stop_cluster(proc)


@pytest.fixture(scope="module")
def api(cluster: str) -> Iterator[k8s.ApiClient]:
    conf = k8s.Configuration(host=cluster)
    with k8s.ApiClient(conf) as api_client:
        yield api_client


def ok(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 0, out.stderr
    return out.stdout


def eventually(check: Callable[[], Any], timeout: float = 5.0) -> Any:
    """Poll `check` until it returns something truthy (a positive condition, never an absence)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s: {check}")
        time.sleep(0.05)


def make_namespace(api: k8s.ApiClient, name: str) -> None:
    k8s.CoreV1Api(api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))


def running_pod(api: k8s.ApiClient, ns: str, name: str, node: str, labels: dict[str, str]) -> None:
    core = k8s.CoreV1Api(api)
    core.create_namespaced_pod(ns, {"apiVersion": "v1", "kind": "Pod",
                                    "metadata": {"name": name, "labels": labels},
                                    "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx:1"}]}})
    eventually(lambda: core.read_namespaced_pod(name, ns).status.phase == "Running")


# -- server-side apply (item 3) --------------------------------------------------------------------

CONFIG = """apiVersion: v1
kind: ConfigMap
metadata:
  name: ssa
  namespace: {ns}
  labels: {{team: a}}
data:
  a: "1"
  b: "2"
"""


def test_kubectl_server_side_apply_creates_conflicts_forces_and_removes(cluster: str, tmp_path: Path) -> None:
    ok(kubectl(cluster, tmp_path, "create", "namespace", "ssa"))
    out = kubectl(cluster, tmp_path, "apply", "--server-side", "-f", "-", stdin=CONFIG.format(ns="ssa"))
    assert "configmap/ssa serverside-applied" in ok(out)  # a new object, created by apply
    got = json.loads(ok(kubectl(cluster, tmp_path, "get", "cm", "ssa", "-n", "ssa", "-o", "json",
                                "--show-managed-fields")))
    [entry] = got["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"], entry["apiVersion"]) == ("kubectl", "Apply", "v1")
    assert entry["fieldsV1"] == {"f:data": {"f:a": {}, "f:b": {}}, "f:metadata": {"f:labels": {"f:team": {}}}}
    assert entry["time"].endswith("Z")

    # another manager changing b conflicts, naming the manager and the field; nothing changes
    changed = CONFIG.format(ns="ssa").replace('"2"', '"3"')
    out = kubectl(cluster, tmp_path, "apply", "--server-side", "--field-manager=deployer", "-f", "-", stdin=changed)
    assert out.returncode != 0
    assert 'Apply failed with 1 conflict: conflict with "kubectl" using v1: .data.b' in out.stderr
    assert ok(kubectl(cluster, tmp_path, "get", "cm", "ssa", "-n", "ssa", "-o", "jsonpath={.data.b}")) == "2"

    # --force-conflicts takes b; kubectl keeps what it still shares (a, the label)
    ok(kubectl(cluster, tmp_path, "apply", "--server-side", "--field-manager=deployer", "--force-conflicts",
               "-f", "-", stdin=changed))
    got = json.loads(ok(kubectl(cluster, tmp_path, "get", "cm", "ssa", "-n", "ssa", "-o", "json",
                                "--show-managed-fields")))
    assert got["data"] == {"a": "1", "b": "3"}
    owners = {e["manager"]: e["fieldsV1"] for e in got["metadata"]["managedFields"]}
    assert owners["kubectl"] == {"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:team": {}}}}
    assert owners["deployer"]["f:data"] == {"f:a": {}, "f:b": {}}

    # the deployer drops a and the label from its config: a stays (kubectl still owns it), so does
    # the label; applying again as kubectl without a removes a (no one else owns it any more)
    only_b = changed.replace('  a: "1"\n', "").replace("  labels: {team: a}\n", "")
    ok(kubectl(cluster, tmp_path, "apply", "--server-side", "--field-manager=deployer", "-f", "-", stdin=only_b))
    assert json.loads(ok(kubectl(cluster, tmp_path, "get", "cm", "ssa", "-n", "ssa", "-o", "json")))["data"] == \
        {"a": "1", "b": "3"}
    no_a = CONFIG.format(ns="ssa").replace('  a: "1"\n', "").replace('"2"', '"3"')
    ok(kubectl(cluster, tmp_path, "apply", "--server-side", "-f", "-", stdin=no_a))
    got = json.loads(ok(kubectl(cluster, tmp_path, "get", "cm", "ssa", "-n", "ssa", "-o", "json")))
    assert got["data"] == {"b": "3"} and got["metadata"]["labels"] == {"team": "a"}


def test_server_side_apply_of_a_pod_tracks_containers_by_name(cluster: str, tmp_path: Path) -> None:
    """Associative lists come from the real schema: a container is `k:{"name":...}`; a later
    `kubectl set image` (an Update manager) takes the image, and an apply of another image conflicts."""
    manifest = ok(kubectl(cluster, tmp_path, "run", "ssapod", "--image=nginx:1", "--dry-run=client", "-o", "yaml"))
    ok(kubectl(cluster, tmp_path, "apply", "--server-side", "-f", "-", stdin=manifest))
    ok(kubectl(cluster, tmp_path, "set", "image", "pod/ssapod", "ssapod=nginx:2"))
    got = json.loads(ok(kubectl(cluster, tmp_path, "get", "pod", "ssapod", "-o", "json", "--show-managed-fields")))
    owners = {(e["manager"], e["operation"]): e["fieldsV1"] for e in got["metadata"]["managedFields"]}
    container = owners[("kubectl", "Apply")]["f:spec"]["f:containers"]['k:{"name":"ssapod"}']
    assert "." in container and "f:name" in container and "f:image" not in container
    assert owners[("kubectl-set", "Update")] == {"f:spec": {"f:containers": {'k:{"name":"ssapod"}': {"f:image": {}}}}}
    out = kubectl(cluster, tmp_path, "apply", "--server-side", "-f", "-", stdin=manifest)
    assert 'conflict with "kubectl-set" using v1: .spec.containers[name="ssapod"].image' in out.stderr
    ok(kubectl(cluster, tmp_path, "delete", "pod", "ssapod"))


def test_kubectl_moves_from_client_side_to_server_side_apply(cluster: str, tmp_path: Path) -> None:
    """A ConfigMap applied client-side, then with --server-side and a changed value: no conflict
    for kubectl (it set those fields), as the apiserver's upgrade path; another manager conflicts."""
    ok(kubectl(cluster, tmp_path, "create", "namespace", "csa"))
    ok(kubectl(cluster, tmp_path, "apply", "-f", "-", stdin=CONFIG.format(ns="csa")))
    changed = CONFIG.format(ns="csa").replace('"2"', '"5"')
    out = kubectl(cluster, tmp_path, "apply", "--server-side", "--field-manager=other", "-f", "-", stdin=changed)
    assert 'conflict with "kubectl-client-side-apply" using v1: .data.b' in out.stderr
    ok(kubectl(cluster, tmp_path, "apply", "--server-side", "-f", "-", stdin=changed))
    got = json.loads(ok(kubectl(cluster, tmp_path, "get", "cm", "ssa", "-n", "csa", "-o", "json",
                                "--show-managed-fields")))
    assert got["data"]["b"] == "5"
    # kubectl then moves the client-side entries over (a JSON patch of managedFields, which the
    # server takes as written) and owns the annotation as `kubectl-last-applied`
    owners = {e["manager"]: e for e in got["metadata"]["managedFields"]}
    assert sorted(owners) == ["kubectl", "kubectl-last-applied"]
    assert owners["kubectl"]["operation"] == "Apply"
    assert owners["kubectl"]["fieldsV1"]["f:data"] == {"f:a": {}, "f:b": {}}


def test_python_client_server_side_apply(api: k8s.ApiClient) -> None:
    make_namespace(api, "pyssa")
    dyn = DynamicClient(api)
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "pyssa"},
            "data": {"replicas": "1"}}
    created = cms.server_side_apply(body=body, name="cfg", namespace="pyssa", field_manager="controller")
    assert created.data.replicas == "1"
    assert [e.manager for e in created.metadata.managedFields] == ["controller"]
    body["data"]["replicas"] = "2"
    with pytest.raises(ApiException) as err:
        cms.server_side_apply(body=body, name="cfg", namespace="pyssa", field_manager="gitops")
    assert err.value.status == 409
    status = json.loads(err.value.body)
    assert status["reason"] == "Conflict"
    assert status["details"]["causes"] == [{"reason": "FieldManagerConflict", "field": ".data.replicas",
                                            "message": 'conflict with "controller" using v1'}]
    forced = cms.server_side_apply(body=body, name="cfg", namespace="pyssa", field_manager="gitops",
                                   force_conflicts=True)
    assert forced.data.replicas == "2"
    # the typed API: an apply without a field manager is refused, naming the parameter
    with pytest.raises(ApiException) as err:
        k8s.CoreV1Api(api).patch_namespaced_config_map("cfg", "pyssa", body, _content_type=APPLY)
    assert err.value.status == 422 and "fieldManager" in err.value.body


# -- Services, ServiceAccounts, kube-root-ca.crt (items 4, 7) ----------------------------------------

def test_services_and_cluster_info(cluster: str, api: k8s.ApiClient, tmp_path: Path) -> None:
    core = k8s.CoreV1Api(api)
    kube = core.read_namespaced_service("kubernetes", "default")
    assert kube.spec.cluster_ip == "10.96.0.1" and kube.spec.ports[0].port == 443
    assert "Kubernetes control plane is running at" in ok(kubectl(cluster, tmp_path, "cluster-info"))
    make_namespace(api, "svc")
    out = kubectl(cluster, tmp_path, "create", "service", "clusterip", "web", "--tcp=80:8080", "-n", "svc")
    assert "service/web created" in ok(out)  # kubectl's typed (protobuf) client
    web = core.read_namespaced_service("web", "svc")
    assert web.spec.type == "ClusterIP" and web.spec.cluster_ips == [web.spec.cluster_ip]
    assert web.spec.cluster_ip.startswith("10.9") and web.spec.cluster_ip != "10.96.0.1"
    assert (web.spec.ports[0].port, web.spec.ports[0].target_port, web.spec.ports[0].protocol) == (80, 8080, "TCP")
    table = ok(kubectl(cluster, tmp_path, "get", "svc", "-n", "svc"))
    assert "web" in table and web.spec.cluster_ip in table and "80/TCP" in table
    # a replace without clusterIP keeps it; changing it is refused
    labelled = core.patch_namespaced_service("web", "svc", {"metadata": {"labels": {"tier": "front"}}})
    assert labelled.spec.cluster_ip == web.spec.cluster_ip
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_service("web", "svc", {"spec": {"clusterIP": "10.96.9.9"}})
    assert err.value.status == 422 and "spec.clusterIPs[0]" in err.value.body
    second = core.create_namespaced_service("svc", {"metadata": {"name": "api"},
                                                    "spec": {"ports": [{"port": 8443}]}})
    assert second.spec.cluster_ip not in ("10.96.0.1", web.spec.cluster_ip)
    # kubectl apply twice: its strategic merge patch merges Service ports on `port` (the schema's
    # merge key; a container's ports merge on containerPort)
    manifest = ("apiVersion: v1\nkind: Service\nmetadata: {name: applied}\n"
                "spec:\n  selector: {app: web}\n  ports: [{name: http, port: 80, targetPort: 8080}]\n")
    ok(kubectl(cluster, tmp_path, "apply", "-n", "svc", "-f", "-", stdin=manifest))
    ok(kubectl(cluster, tmp_path, "apply", "-n", "svc", "-f", "-", stdin=manifest.replace("8080", "9090")))
    ports = core.read_namespaced_service("applied", "svc").spec.ports
    assert [(p.name, p.port, p.target_port) for p in ports] == [("http", 80, 9090)]
    # strict validation against the real Service schema, at every level; bad values name the field
    typo = ("apiVersion: v1\nkind: Service\nmetadata: {name: typo}\n"
            "spec:\n  ports: [{port: 80, protocl: UDP}]\n")
    out = kubectl(cluster, tmp_path, "create", "-n", "svc", "-f", "-", stdin=typo)
    assert out.returncode != 0 and 'unknown field "spec.ports[0].protocl"' in out.stderr
    out = kubectl(cluster, tmp_path, "create", "-n", "svc", "-f", "-", stdin=typo.replace("protocl: UDP", "name: x")
                  .replace("port: 80", "port: 70000"))
    assert out.returncode != 0 and "spec.ports[0].port: Invalid value: 70000" in out.stderr


def test_every_namespace_has_a_default_service_account_and_the_root_ca(cluster: str, api: k8s.ApiClient,
                                                                       tmp_path: Path) -> None:
    ok(kubectl(cluster, tmp_path, "create", "namespace", "fresh"))
    core = k8s.CoreV1Api(api)
    assert core.read_namespaced_service_account("default", "fresh").metadata.name == "default"
    ca = core.read_namespaced_config_map("kube-root-ca.crt", "fresh")
    assert ca.data["ca.crt"].startswith("-----BEGIN CERTIFICATE-----")
    assert "default" in ok(kubectl(cluster, tmp_path, "get", "sa", "-n", "fresh"))
    assert "serviceaccount/robot created" in ok(kubectl(cluster, tmp_path, "create", "sa", "robot", "-n", "fresh"))
    names = [sa.metadata.name for sa in core.list_namespaced_service_account("fresh").items]
    assert names == ["default", "robot"]


# -- Leases (item 4) -----------------------------------------------------------------------------

def names(leases: k8s.CoordinationV1Api) -> list[str]:
    return [lease.metadata.name for lease in leases.list_namespaced_lease("kube-node-lease").items]


def test_node_leases_are_renewed_and_described(cluster: str, api: k8s.ApiClient, tmp_path: Path) -> None:
    leases = k8s.CoordinationV1Api(api)
    first = leases.read_namespaced_lease("node-0001", "kube-node-lease")
    assert first.spec.holder_identity == "node-0001" and first.spec.lease_duration_seconds == 40
    assert first.metadata.owner_references[0].kind == "Node"
    eventually(lambda: leases.read_namespaced_lease("node-0001", "kube-node-lease").spec.renew_time
               > first.spec.renew_time)
    described = ok(kubectl(cluster, tmp_path, "describe", "node", "node-0001"))
    lease_part = described.split("Lease:", 1)[1]
    assert "HolderIdentity:  node-0001" in lease_part and "RenewTime:" in lease_part
    # a node that registers gets its lease at once; it goes with the node (its owner)
    core = k8s.CoreV1Api(api)
    core.create_node({"metadata": {"name": "late-node"}})
    eventually(lambda: "late-node" in names(leases))
    core.delete_node("late-node")
    eventually(lambda: "late-node" not in names(leases))
    # leader election: any client may hold a lease of its own
    mine = leases.create_namespaced_lease("default", {"metadata": {"name": "leader"},
                                                      "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15}})
    assert mine.spec.holder_identity == "me"


# -- eviction and PodDisruptionBudgets (item 4) ---------------------------------------------------------

def test_kubectl_drain_evicts_and_honours_a_budget(cluster: str, api: k8s.ApiClient, tmp_path: Path) -> None:
    make_namespace(api, "drain")
    for i in range(2):
        running_pod(api, "drain", f"web-{i}", "node-0002", {"app": "web"})
    ok(kubectl(cluster, tmp_path, "create", "pdb", "web", "-n", "drain", "--selector=app=web", "--min-available=2"))
    policy = k8s.PolicyV1Api(api)
    pdb = eventually(lambda: (p := policy.read_namespaced_pod_disruption_budget("web", "drain")).status
                     and p.status.current_healthy == 2 and p)
    assert (pdb.status.disruptions_allowed, pdb.status.desired_healthy, pdb.status.expected_pods) == (0, 2, 2)
    # the budget refuses: drain retries the 429 until its timeout, the pods stay
    out = kubectl(cluster, tmp_path, "drain", "node-0002", "--ignore-daemonsets", "--force", "--timeout=2s")
    assert out.returncode != 0
    assert "Cannot evict pod as it would violate the pod's disruption budget" in out.stderr
    core = k8s.CoreV1Api(api)
    assert sorted(p.metadata.name for p in core.list_namespaced_pod("drain").items) == ["web-0", "web-1"]
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_eviction("web-0", "drain", k8s.V1Eviction(
            metadata=k8s.V1ObjectMeta(name="web-0", namespace="drain")))
    assert err.value.status == 429
    status = json.loads(err.value.body)
    assert status["reason"] == "TooManyRequests"
    assert status["details"]["causes"][0]["reason"] == "DisruptionBudget"
    # one pod may go at a time
    policy.patch_namespaced_pod_disruption_budget("web", "drain", {"spec": {"minAvailable": 1}})
    core.create_namespaced_pod_eviction("web-0", "drain", {"metadata": {"name": "web-0"}})
    assert [p.metadata.name for p in core.list_namespaced_pod("drain").items] == ["web-1"]
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_eviction("web-1", "drain", {"metadata": {"name": "web-1"}})
    assert err.value.status == 429
    # without a budget, drain evicts (not deletes): the eviction sub-resource is what it found;
    # a pod with a controller needs no --force (its owner here is a ConfigMap: no workload controllers)
    ok(kubectl(cluster, tmp_path, "delete", "pdb", "web", "-n", "drain"))
    owner = core.create_namespaced_config_map("drain", {"metadata": {"name": "owner"}})
    core.patch_namespaced_pod("web-1", "drain", {"metadata": {"ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid, "controller": True}]}})
    out = ok(kubectl(cluster, tmp_path, "drain", "node-0002", "--ignore-daemonsets", "--timeout=10s"))
    assert "pod/web-1 evicted" in out and "node/node-0002 drained" in out
    assert core.list_namespaced_pod("drain").items == []
    assert core.read_node("node-0002").spec.unschedulable is True


def test_max_unavailable_budget_and_pending_pods(api: k8s.ApiClient) -> None:
    make_namespace(api, "budget")
    core, policy = k8s.CoreV1Api(api), k8s.PolicyV1Api(api)
    for i in range(3):
        running_pod(api, "budget", f"db-{i}", "node-0000", {"app": "db"})
    policy.create_namespaced_pod_disruption_budget("budget", {
        "metadata": {"name": "db"}, "spec": {"maxUnavailable": "34%", "selector": {"matchLabels": {"app": "db"}}}})
    core.create_namespaced_pod_eviction("db-0", "budget", {"metadata": {"name": "db-0"}})  # 34% of 3, rounded up: 2
    core.create_namespaced_pod_eviction("db-1", "budget", {"metadata": {"name": "db-1"}})
    with pytest.raises(ApiException) as err:  # 3 expected (2 evicted), 34% -> 2 may be unavailable
        core.create_namespaced_pod_eviction("db-2", "budget", {"metadata": {"name": "db-2"}})
    assert err.value.status == 429
    # a pending pod is evicted whatever the budget says
    core.create_namespaced_pod("budget", {"metadata": {"name": "db-wait", "labels": {"app": "db"}},
                                          "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}})
    core.create_namespaced_pod_eviction("db-wait", "budget", {"metadata": {"name": "db-wait"}})
    assert [p.metadata.name for p in core.list_namespaced_pod("budget").items] == ["db-2"]


# -- explain (item 4) ------------------------------------------------------------------------------

def test_kubectl_explain_answers_from_the_real_schema(cluster: str, tmp_path: Path) -> None:
    out = ok(kubectl(cluster, tmp_path, "explain", "pod.spec.containers"))
    assert "FIELD: containers <[]Container>" in out
    assert "List of containers belonging to the pod." in out
    assert "image\t<string>" in out and "Container image name." in out
    out = ok(kubectl(cluster, tmp_path, "explain", "lease.spec.renewTime"))
    assert "GROUP:      coordination.k8s.io" in out
    assert "renewTime is a time when the current holder of a lease has last updated the" in " ".join(out.split())


# -- timestamps and kubelet events (item 7) -----------------------------------------------------------

def test_timestamps_are_normalised_to_z(cluster: str, api: k8s.ApiClient) -> None:
    make_namespace(api, "times")
    offset = dt.timezone(dt.timedelta(hours=2))
    when = dt.datetime(2026, 3, 4, 12, 30, 15, 123456, tzinfo=offset)
    k8s.CoreV1Api(api).create_namespaced_event("times", k8s.CoreV1Event(
        metadata=k8s.V1ObjectMeta(name="ev"), involved_object=k8s.V1ObjectReference(kind="Pod", name="x"),
        reason="Test", message="m", first_timestamp=when, last_timestamp=when, event_time=when))
    k8s.CoordinationV1Api(api).create_namespaced_lease("times", k8s.V1Lease(
        metadata=k8s.V1ObjectMeta(name="l"), spec=k8s.V1LeaseSpec(holder_identity="me", renew_time=when)))
    ev = httpx.get(f"{cluster}/api/v1/namespaces/times/events/ev").json()
    assert ev["firstTimestamp"] == ev["lastTimestamp"] == "2026-03-04T10:30:15Z"  # Time: seconds, UTC
    assert ev["eventTime"] == "2026-03-04T10:30:15.123456Z"  # MicroTime
    lease = httpx.get(f"{cluster}/apis/coordination.k8s.io/v1/namespaces/times/leases/l").json()
    assert lease["spec"]["renewTime"] == "2026-03-04T10:30:15.123456Z"
    bad = httpx.post(f"{cluster}/api/v1/namespaces/times/configmaps", json={
        "metadata": {"name": "x", "creationTimestamp": "yesterday"}})
    assert bad.status_code == 201  # system metadata the server sets is not read at all
    bad = httpx.post(f"{cluster}/apis/coordination.k8s.io/v1/namespaces/times/leases", json={
        "metadata": {"name": "bad"}, "spec": {"renewTime": "yesterday"}})
    assert bad.status_code == 400 and "spec.renewTime" in bad.json()["message"]


def test_kubelet_posts_pod_events(cluster: str, api: k8s.ApiClient, tmp_path: Path) -> None:
    make_namespace(api, "kev")
    running_pod(api, "kev", "busy", "node-0001", {"app": "busy"})
    core = k8s.CoreV1Api(api)

    def reasons() -> list[str]:
        events = core.list_namespaced_event("kev", field_selector="involvedObject.name=busy").items
        return [e.reason for e in sorted(events, key=lambda e: e.metadata.resource_version and
                                          int(e.metadata.resource_version))]

    assert eventually(lambda: reasons()[:3] == ["Pulled", "Created", "Started"])
    started = core.list_namespaced_event("kev", field_selector="reason=Started").items[0]
    assert started.source.component == "kubelet" and started.source.host == "node-0001"
    assert started.involved_object.field_path == "spec.containers{c}"
    assert started.message == "Started container c"
    core.delete_namespaced_pod("busy", "kev")
    assert eventually(lambda: reasons()[-1:] == ["Killing"])
    shown = ok(kubectl(cluster, tmp_path, "get", "events", "-n", "kev"))
    assert "Killing" in shown and "Stopping container c" in shown
