"""Issue 31 item 4, third bullet: `kubectl apply -k deploy/kubernetes` on the real control plane,
every role a process pod under its own ServiceAccount with the shipped RBAC, judged by the real
apiserver's authenticator, RBAC authorizer and admission chain.

The run's kube-scheduler binds ykshm's own Deployments' pods (schedulerName default-scheduler, as
YuniKorn's); the node agent (`ykshm node-agent`, two nodes) runs them as process pods on their own
10.244.1.x addresses; kube-apiserver calls the admission controller's webhooks at that address
(`--enable-aggregator-routing`: the run has no kube-proxy). Then, as a YuniKorn user sees it:

- alice's pod, created without a schedulerName, comes back with schedulerName yunikorn and her
  `yunikorn.apache.org/user.info` (the mutating webhook, from the request's user), and ykshm's
  scheduler pod binds it to an agent node;
- a bad `yunikorn-configs` is refused by the validating webhook; a good one is hot-reloaded: its
  queues are in the REST API, reached at the leader pod's own address (never a ClusterIP);
- preemption under the shipped RBAC: the urgent pod is bound, each victim is marked
  DisruptionTarget/PreemptionByScheduler (seen on a watch) before it goes;
- no 403 / forbidden in any pod's log (`kubectl logs`: kube-apiserver to the agent's kubelet
  endpoint), nor in kube-scheduler's.

One plane and one deployment for the module (the tests build on each other's state); the node
agent is stopped by pid (it stops every process pod by pid), and its pods' directory (in /dev/shm:
the scheduler pod's emptyDir is `medium: Memory`, and the SI socket's path must stay short) removed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.test_kubernetes_deploy import FORBIDDEN, NS, ROLES, Watch, pod
from tests.deploy.test_kubernetes_deploy import ready_pods as deploy_ready_pods
from tests.realk8s.realplane import RealPlane
from tests.simcluster.test_simcluster_procpods import survivors
from tools import harness

DEPLOY = Path(harness.ROOT) / "deploy" / "kubernetes"
NODES = ("agent-node-0", "agent-node-1")
BAD_QUEUES = "partitions:\n  - name: default\n    bogus: 1\n    queues: [{name: root}]\n"
# 8 cpu per node; ykshm's own pods take 0.4 (a scheduler pod, one per node) + 0.2 (admission,
# streams); two 3-cpu batch pods per node leave no room for a 3-cpu urgent pod without a victim
QUEUES = """\
partitions:
  - name: default
    placementrules: [{name: tag, value: namespace, create: true}]
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: batch
          - name: prod
            resources:
              guaranteed: {vcore: 4}
            properties:
              preemption.delay: 1s
"""
GET = ("import sys, urllib.request\ntry:\n    print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())\n"
       "except OSError as e:\n    print('ERROR', e)")


def ready_pods(plane: RealPlane) -> dict[str, dict] | None:
    return deploy_ready_pods(plane.kubectl_json("-n", NS, "get", "pods")["items"])


def rest(plane: RealPlane, path: str) -> str:
    """A GET of ykshm's REST API at the leader scheduler pod's own address, from inside the run's
    namespace (where pod addresses live)."""
    leader = ready_pods(plane)
    assert leader, "no ready leader"
    ip = leader["yunikorn-scheduler"]["status"]["podIP"]
    return plane.inside(sys.executable, "-c", GET, f"http://{ip}:9080{path}").stdout


def logs(plane: RealPlane) -> str:
    return "".join(plane.kubectl("-n", NS, "logs", item["metadata"]["name"], "--all-containers").stdout
                   for item in plane.kubectl_json("-n", NS, "get", "pods")["items"])


def create(plane: RealPlane, body: str, *args: str, user: str | None = None,
           check: bool = True) -> subprocess.CompletedProcess:
    """`kubectl create -f` of a JSON body, as the admin or as `user` of group dev (impersonated)."""
    path = Path(plane.dir) / f"obj-{time.monotonic_ns()}.json"
    path.write_text(body)
    who = ["--as", user, "--as-group", "dev"] if user else []
    return plane.kubectl(*who, *args, "create", "-f", str(path), check=check)


@pytest.fixture(scope="module")
def deployed(plane: RealPlane, tmp_path_factory) -> Iterator[RealPlane]:
    logs_dir = tmp_path_factory.mktemp("agent-logs")
    work = Path(tempfile.mkdtemp(prefix="ykr-", dir="/dev/shm"))   # short: the SI socket path is < 108 bytes
    os.chmod(work, 0o711)                                           # the pods' own uids reach work/pods
    agent = harness.Proc("node-agent", ["node-agent", "--kubeconfig", plane.kubeconfig,
                                        "--client-ca-file", str(plane.pki.ca_crt), "--nodes", str(len(NODES)),
                                        "--node-cpu", "8", "--node-memory", "16Gi", "--node-lease-interval", "2",
                                        "--kubelet-delay", "0.05", "--backoff-initial", "1", "--backoff-max", "4",
                                        "--pods-dir", str(work / "pods")],
                         str(logs_dir), prefix=plane.enter())
    try:
        harness.wait_for(lambda: "node agent: " in Path(agent.log_path).read_text() or not agent.alive(),
                         60, "the node agent's ready line")
        assert agent.alive(), agent.tail()
        t0 = time.monotonic()
        plane.kubectl("apply", "-k", str(DEPLOY))
        plane.kubectl("create", "rolebinding", "dev-edit", "--clusterrole", "edit", "--group", "dev", "-n", "default")
        plane.wait_for("every role's pod ready", lambda: ready_pods(plane), timeout=120)
        print(f"apply -k -> every role ready in {time.monotonic() - t0:.1f}s")
        yield plane
    finally:
        code = agent.stop(signal.SIGTERM, timeout=30)
        left = survivors(work / "pods")
        log = Path(agent.log_path).read_text()
        print(log[-3000:])
        shutil.rmtree(work, ignore_errors=True)
    assert code == 0 and not left, f"agent exited {code}, process pods left: {left}"
    assert "Traceback" not in log


def test_every_role_runs_as_a_process_pod_under_its_service_account(deployed: RealPlane) -> None:
    pods = ready_pods(deployed)
    assert pods
    for deployment, (account, containers) in ROLES.items():
        item = pods[deployment]
        spec, status = item["spec"], item["status"]
        assert spec["serviceAccountName"] == account
        assert spec["schedulerName"] == "default-scheduler" and spec["nodeName"] in NODES  # kube-scheduler's
        assert len(spec["containers"]) == containers and {c["image"] for c in spec["containers"]} == {"ykshm:0.1.0"}
        assert status["phase"] == "Running" and status["podIP"].startswith("10.244.1.")
        assert all(s["containerID"].startswith("process://") and s["restartCount"] == 0
                   for s in status["containerStatuses"]), json.dumps(status["containerStatuses"], indent=1)
    scheduled = {e["involvedObject"]["name"]: e for e in deployed.kubectl_json("-n", NS, "get", "events")["items"]
                 if e["reason"] == "Scheduled"}
    assert all(scheduled[p["metadata"]["name"]].get("reportingComponent") == "default-scheduler" for p in pods.values())
    # the webhooks registered by the admission controller, called at its pod's address
    hook = deployed.kubectl_json("get", "mutatingwebhookconfigurations", "yunikorn-admission-controller-mutations")
    assert hook["webhooks"][0]["clientConfig"]["service"]["name"] == "yunikorn-admission-controller-service"


def test_alice_pod_is_admitted_with_her_user_info_and_bound_by_ykshm(deployed: RealPlane) -> None:
    create(deployed, pod("alice-1"), user="alice")
    made = deployed.kubectl_json("get", "pod", "alice-1")
    assert made["spec"]["schedulerName"] == "yunikorn"                     # routed by the mutating webhook
    info = json.loads(made["metadata"]["annotations"]["yunikorn.apache.org/user.info"])
    assert info["user"] == "alice" and "dev" in info["groups"]            # the requester, not the admin
    node = deployed.wait_for("alice-1 bound", lambda: deployed.kubectl_json("get", "pod", "alice-1")[
        "spec"].get("nodeName"), timeout=30)
    assert node in NODES
    scheduled = [e for e in deployed.kubectl_json("get", "events")["items"]
                 if e["reason"] == "Scheduled" and e["involvedObject"]["name"] == "alice-1"]
    assert scheduled and all(e.get("reportingComponent") != "default-scheduler" for e in scheduled), scheduled
    deployed.wait_for("alice-1 Running on the agent", lambda: deployed.kubectl_json("get", "pod", "alice-1")[
        "status"].get("phase") == "Running", timeout=30)
    forged = create(deployed, pod("alice-as-bob", annotations={
        "yunikorn.apache.org/user.info": '{"user":"bob","groups":["dev"]}'}), user="alice", check=False)
    assert forged.returncode == 1 and "is not allowed to set user annotation" in forged.stderr, forged.stderr


def test_a_bad_config_is_refused_and_a_good_one_hot_reloads(deployed: RealPlane) -> None:
    bad = deployed.kubectl("-n", NS, "create", "configmap", "yunikorn-configs",
                           f"--from-literal=queues.yaml={BAD_QUEUES}", check=False)
    assert bad.returncode == 1 and "partitions[0].bogus: invalid value 1: unknown key" in bad.stderr, bad.stderr
    deployed.kubectl("-n", NS, "create", "configmap", "yunikorn-configs", f"--from-literal=queues.yaml={QUEUES}")
    t0 = time.monotonic()

    def queues() -> set[str]:
        text = rest(deployed, "/ws/v1/partition/default/queues")
        root = json.loads(text) if text.startswith("{") else {}
        return {q["queuename"] for q in root.get("children") or []}
    found = deployed.wait_for("the new queues in the REST API", lambda: {"root.batch", "root.prod"} <= queues(),
                              timeout=20)
    assert found
    print(f"ConfigMap edit -> queues in the REST API in {time.monotonic() - t0:.1f}s")


def test_preemption_marks_its_victims_under_the_shipped_rbac(deployed: RealPlane) -> None:
    for ns in ("batch", "prod"):
        deployed.kubectl("create", "namespace", ns)
    deployed.kubectl("create", "priorityclass", "urgent", "--value", "1000")
    victims = [f"batch-{i}" for i in range(4)]
    for name in victims:
        create(deployed, pod(name, cpu="3"), "-n", "batch")

    def batch_pods() -> list[dict]:
        return deployed.kubectl_json("-n", "batch", "get", "pods")["items"]
    deployed.wait_for("the batch pods bound", lambda: len(items := batch_pods()) == 4 and all(
        p["spec"].get("nodeName") for p in items), timeout=30)
    env = dict(os.environ, KUBECONFIG=deployed.kubeconfig)
    watch = Watch(subprocess.Popen([*deployed.enter(), "kubectl", "get", "-n", "batch", "pods", "--watch",
                                    "--output-watch-events", "-o", "json"], stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True, env=env))
    try:
        deployed.wait_for("the watch open (the batch pods listed)", lambda: len(watch.events()) >= 4, timeout=30)
        create(deployed, pod("urgent", cpu="3", priority_class="urgent"), "-n", "prod")
        node = deployed.wait_for("the urgent pod bound after preemption", lambda: deployed.kubectl_json(
            "-n", "prod", "get", "pod", "urgent")["spec"].get("nodeName"), timeout=60)
        seen = deployed.wait_for("a victim's deletion watched", lambda: (e := watch.events()) and any(
            t == "DELETED" for t, _ in e) and e, timeout=30)
    finally:
        watch.close()   # by pid
    marked = {obj["metadata"]["name"]: obj["spec"]["nodeName"] for _, obj in seen
              if any(c["type"] == "DisruptionTarget" and c["status"] == "True"
                     and c.get("reason") == "PreemptionByScheduler" for c in obj["status"].get("conditions") or ())}
    left = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in batch_pods()}
    gone = set(victims) - set(left)
    assert gone and gone <= set(marked), (gone, marked)                    # each victim marked before it went
    assert {marked[name] for name in gone} == {node}                      # from the node urgent took
    preempted = deployed.wait_for("the victims' Preempted events", lambda: {
        e["involvedObject"]["name"] for e in deployed.kubectl_json("-n", "batch", "get", "events")["items"]
        if e["reason"] == "Preempted"}, timeout=15)
    assert preempted == gone


def test_no_403_in_any_pod_log_nor_kube_schedulers(deployed: RealPlane) -> None:
    text = logs(deployed)
    assert "registered with engine" in text and "created mutatingwebhookconfigurations" in text
    # a 403 reads "403 Forbidden: ... is forbidden: User ..." (a bare "403" may be a log's milliseconds)
    assert not FORBIDDEN.search(text) and "Traceback" not in text, FORBIDDEN.search(text)
    scheduler_log = (Path(deployed.dir) / "kube-scheduler.log").read_text()
    assert "forbidden" not in scheduler_log.lower(), scheduler_log[-2000:]
