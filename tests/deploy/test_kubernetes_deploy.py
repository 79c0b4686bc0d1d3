"""Issue 23 items 4 and 5: `kubectl apply -k deploy/kubernetes` into an HTTPS sim-cluster with RBAC
on, exactly as a YuniKorn user would deploy it. Every role runs as a process pod of `ykshm:VERSION`
under its own ServiceAccount; the admission controller registers itself; alice's pods are bound
and counted as alice (and her group dev) in the web reached through `yunikorn-service`; a
`maxapplications: 1` limit holds against a forged `user.info`; a Job's pods are alice's; a bad
`yunikorn-configs` is refused by the webhook and a good one is in force within seconds; the
scheduler runs two replicas, one of them labelled leader and selected by the Service; a deleted
leader pod is replaced, the standby takes over without binding anything twice; a preemption is done under
the scheduler's own role (each victim marked DisruptionTarget through pods/status, then deleted).

One sim-cluster for the module (the tests run in order and build on each other's state); it and
every process pod are stopped by pid, and the pods' directory (in /dev/shm: the scheduler pod's
emptyDir is in memory, as `medium: Memory` asks) is removed.
"""

from __future__ import annotations

import base64
import collections
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from cryptography import x509

from tests.simcluster.test_simcluster import ROOT, start_cluster, stop_cluster

NS = "yunikorn"
ROLE_LABEL = "ykshm.io/scheduler-role"
SCHEDULER_REPLICAS = 2
FORBIDDEN = re.compile(r"403 Forbidden|[Ff]orbidden: ")
ROLES = {  # Deployment -> (ServiceAccount, containers)
    "yunikorn-scheduler": ("yunikorn-admin", 3),
    "yunikorn-admission-controller": ("yunikorn-admission-controller", 1),
    "ykshm-streams": ("ykshm-streams", 1),
}
BAD_QUEUES = "partitions:\n  - name: default\n    bogus: 1\n    queues: [{name: root}]\n"
GOOD_QUEUES = """\
partitions:
  - name: default
    placementrules: [{name: tag, value: namespace, create: true}]
    queues:
      - name: root
        submitacl: "*"
        limits:
          - {limit: one application for alice, users: [alice], maxapplications: 1}
          - {limit: developers, groups: [dev], maxresources: {vcore: 8000}}
"""


def wait(cond, timeout: float = 60.0, what: str = ""):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or cond}")
        time.sleep(0.25)


def ready_pods(items: list[dict]) -> dict[str, dict] | None:
    """Deployment -> its pod (the scheduler's: the leader's, labelled so) among the pods of the
    namespace, once every container of every role is ready and both scheduler replicas are, one of
    them labelled leader (here and on the real control plane, test_realk8s_apply_k.py)."""
    found, schedulers = {}, []
    for item in items:
        statuses = item["status"].get("containerStatuses") or []
        if item["metadata"].get("deletionTimestamp") or not statuses or not all(s["ready"] for s in statuses):
            continue
        deployment = item["metadata"]["name"].rsplit("-", 2)[0]
        if deployment == "yunikorn-scheduler":
            schedulers.append(item)
            if (item["metadata"].get("labels") or {}).get(ROLE_LABEL) != "leader":
                continue
        found[deployment] = item
    return found if set(found) == set(ROLES) and len(schedulers) == SCHEDULER_REPLICAS else None


def pod(name: str, labels: dict | None = None, annotations: dict | None = None, cpu: str = "100m",
        priority_class: str | None = None) -> str:
    meta: dict = {"name": name, "labels": labels or {}, "annotations": annotations or {}}
    spec: dict = {"containers": [{"name": "c", "image": "busybox",
                                  "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})


class Watch:
    """A running `kubectl get --watch -o json`: its output read by a thread, parsed on demand;
    `close` stops it by pid."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc, self.out = proc, []
        self.thread = threading.Thread(target=lambda: self.out.extend(proc.stdout), daemon=True)
        self.thread.start()

    def events(self) -> list[tuple[str, dict]]:
        text, decoder, found = "".join(self.out), json.JSONDecoder(), []
        at = 0
        while True:
            at = len(text) - len(text[at:].lstrip())
            try:
                event, at = decoder.raw_decode(text, at)
            except json.JSONDecodeError:   # the end, or an event still being printed
                return found
            found.append((event["type"], event["object"]))
            text, at = text[at:], 0

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.thread.join(10)


@dataclass
class Deployed:
    """The cluster with the manifests applied: kubectl as the admin, and the web's Service address."""

    admin: Path
    pods_dir: Path

    def kubectl(self, *args: str, stdin: str = "", user: str | None = None) -> subprocess.CompletedProcess[str]:
        who = ["--as", user, "--as-group", "dev"] if user else []
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.pods_dir.parent)}
        return subprocess.run(["kubectl", "--kubeconfig", str(self.admin), *who, *args], input=stdin,
                              capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)

    def ok(self, *args: str, **kw) -> str:
        out = self.kubectl(*args, **kw)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def json(self, *args: str) -> dict:
        return json.loads(self.ok(*args, "-o", "json"))

    def service(self, name: str) -> str:
        """The loopback address sim-cluster serves a Service's ClusterIP at (its hosts file)."""
        for line in (self.pods_dir / "hosts").read_text().splitlines():
            if f" {name}.{NS}.svc.cluster.local " in f" {line} ":
                return line.split()[0]
        raise AssertionError(f"no address for {name}")

    def rest(self, path: str) -> httpx.Response:
        return httpx.get(f"http://{self.service('yunikorn-service')}:9080{path}", timeout=10)

    def ready_pods(self) -> dict[str, dict] | None:
        return ready_pods(self.json("-n", NS, "get", "pods")["items"])

    def logs(self) -> str:
        return "".join(self.ok("-n", NS, "logs", item["metadata"]["name"], "--all-containers")
                       for item in self.json("-n", NS, "get", "pods")["items"])

    def watch(self, *args: str) -> Watch:
        """`kubectl get ARGS --watch` as JSON events (the current objects first, as ADDED)."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.pods_dir.parent)}
        proc = subprocess.Popen(["kubectl", "--kubeconfig", str(self.admin), "get", *args, "--watch",
                                 "--output-watch-events", "-o", "json"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, cwd=ROOT, env=env)
        return Watch(proc)

    def scheduled_events(self) -> collections.Counter:
        return collections.Counter(e["involvedObject"]["name"] for e in self.json("get", "events")["items"]
                                   if e["reason"] == "Scheduled")


@pytest.fixture(scope="module")
def deployed() -> Iterator[Deployed]:
    work = Path(tempfile.mkdtemp(prefix="ykd-", dir="/dev/shm"))  # short: the SI socket path is < 108 bytes
    os.chmod(work, 0o711)  # the pods' own uids reach work/pods (pki/ is 0700 of its own)
    proc, _ = start_cluster("--pki-dir", str(work / "pki"), "--authorization-mode", "RBAC", "--nodes", "2",
                            "--default-scheduler", "--kubelet-delay", "0.05", "--pods-dir", str(work / "pods"),
                            "--backoff-initial", "1", "--backoff-max", "4")
    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith("admin kubeconfig: ")
        cluster = Deployed(work / "pki" / "admin.kubeconfig", work / "pods")
        cluster.ok("apply", "-k", "deploy/kubernetes")
        cluster.ok("create", "rolebinding", "dev-edit", "--clusterrole", "edit", "--group", "dev", "-n", "default")
        yield cluster
    finally:
        stop_cluster(proc)
        shutil.rmtree(work, ignore_errors=True)


def test_every_role_runs_under_its_own_service_account_without_a_403(deployed):
    pods = wait(deployed.ready_pods, 90, "every role's pod ready")
    for deployment, (account, containers) in ROLES.items():
        spec = pods[deployment]["spec"]
        assert spec["serviceAccountName"] == account
        assert len(spec["containers"]) == containers
        assert {c["image"] for c in spec["containers"]} == {"ykshm:0.1.0"}
        assert all(s["restartCount"] == 0 for s in pods[deployment]["status"]["containerStatuses"]), \
            pods[deployment]["status"]["containerStatuses"]
    # the ring, the SI socket and the shim's state are in the scheduler pod's own emptyDir
    meta = pods["yunikorn-scheduler"]["metadata"]
    shared = deployed.pods_dir / f"{NS}_{meta['name']}_{meta['uid'][:8]}" / "volumes" / "shm"
    assert {"yunikorn.events", "yunikorn.state", "yunikorn.web", "yunikorn.shim.json", "si.sock"} <= {
        p.name for p in shared.iterdir()}
    logs = deployed.logs()
    assert "registered with engine" in logs and "created mutatingwebhookconfigurations" in logs
    # a 403 reads "403 Forbidden: ... is forbidden: User ..." (a bare "403" may be a log's milliseconds)
    assert not FORBIDDEN.search(logs) and "Traceback" not in logs, FORBIDDEN.search(logs)
    # least privilege, as RBAC answers it: the scheduler may bind but not read Secrets
    can = lambda verb, what, sa: deployed.kubectl(  # noqa: E731
        "auth", "can-i", verb, what, "-n", NS, "--as", f"system:serviceaccount:{NS}:{sa}").stdout.strip()
    assert can("create", "pods/binding", "yunikorn-admin") == "yes"
    assert can("get", "secrets", "yunikorn-admin") == "no"
    assert can("update", "secrets/admission-controller-secrets", "yunikorn-admission-controller") == "yes"
    assert can("get", "secrets/other", "yunikorn-admission-controller") == "no"


def test_the_admission_controller_registers_itself_with_its_ca_bundle(deployed):
    secret = deployed.json("-n", NS, "get", "secret", "admission-controller-secrets")
    ca1 = base64.b64decode(secret["data"]["cacert1.pem"])
    for kind, name, path in (("mutatingwebhookconfigurations", "yunikorn-admission-controller-mutations", "/mutate"),
                             ("validatingwebhookconfigurations", "yunikorn-admission-controller-validations",
                              "/validate-conf")):
        hook = deployed.json("get", kind, name)["webhooks"][0]
        assert hook["clientConfig"]["service"] == {"name": "yunikorn-admission-controller-service",
                                                   "namespace": NS, "path": path, "port": 443}
        bundle = base64.b64decode(hook["clientConfig"]["caBundle"])
        assert ca1 in bundle and len(x509.load_pem_x509_certificates(bundle)) == 2


def test_alice_pod_is_bound_and_counted_as_alice_of_dev(deployed):
    deployed.ok("create", "-f", "-", stdin=pod("alice-1"), user="alice")
    bound = wait(lambda: deployed.json("get", "pod", "alice-1")["spec"].get("nodeName"), 30, "alice-1 bound")
    assert bound.startswith("node-")
    usage = wait(lambda: (r := deployed.rest("/ws/v1/partition/default/usage/user/alice")).status_code == 200
                 and r.json()["queues"]["resourceUsage"].get("pods") == 1 and r.json(), 15, "alice's usage")
    assert usage["queues"]["runningApplications"] == ["yunikorn-default-autogen"]
    app = deployed.rest("/ws/v1/partition/default/application/yunikorn-default-autogen").json()
    assert app["user"] == "alice" and "dev" in app["groups"]


def test_a_bad_config_edit_is_refused_and_a_good_one_is_in_force_within_seconds(deployed):
    bad = deployed.kubectl("-n", NS, "create", "configmap", "yunikorn-configs", f"--from-literal=queues.yaml={BAD_QUEUES}")
    assert bad.returncode == 1
    assert ('admission webhook "admission-webhook.yunikorn.validate-conf" denied the request: '
            'config: partitions[0].bogus: invalid value 1: unknown key') in bad.stderr
    deployed.ok("-n", NS, "create", "configmap", "yunikorn-configs", f"--from-literal=queues.yaml={GOOD_QUEUES}")
    t0 = time.monotonic()
    wait(lambda: "one application for alice" in deployed.rest("/ws/v1/config").text, 10, "the new config")
    assert time.monotonic() - t0 < 10
    # a bad edit of the ConfigMap in force is refused too, and the good one stays
    edit = deployed.kubectl("-n", NS, "patch", "configmap", "yunikorn-configs", "--type", "merge",
                            "-p", json.dumps({"data": {"queues.yaml": BAD_QUEUES}}))
    assert edit.returncode == 1 and "partitions[0].bogus: invalid value 1: unknown key" in edit.stderr
    assert "one application for alice" in deployed.json("-n", NS, "get", "configmap", "yunikorn-configs")[
        "data"]["queues.yaml"]


def test_the_limit_holds_against_a_forged_user_info_and_a_job_is_alices(deployed):
    deployed.ok("create", "-f", "-", stdin=pod("alice-2", labels={"applicationId": "alice-second"}), user="alice")
    forged = deployed.kubectl("create", "-f", "-", user="alice", stdin=pod(
        "alice-as-bob", labels={"applicationId": "bobs-app"},
        annotations={"yunikorn.apache.org/user.info": '{"user":"bob","groups":["dev"]}'}))
    assert forged.returncode == 1
    assert ("user alice with groups [dev,system:authenticated] is not allowed to set user annotation"
            in forged.stderr)
    deployed.ok("create", "job", "pi", "--image", "busybox", "--", "echo", "hi", user="alice")
    job_pod = wait(lambda: [p for p in deployed.json("get", "pods", "-l", "job-name=pi")["items"]
                            if p["spec"].get("nodeName")], 30, "the Job's pod bound")[0]
    info = json.loads(job_pod["metadata"]["annotations"]["yunikorn.apache.org/user.info"])
    assert info["user"] == "alice" and "dev" in info["groups"]
    wait(lambda: deployed.rest("/ws/v1/partition/default/usage/user/alice").json()["queues"]["resourceUsage"]
         .get("pods") == 2, 15, "the Job's pod counted as alice's")
    time.sleep(2)   # alice's second application waits: maxapplications 1
    assert not deployed.json("get", "pod", "alice-2")["spec"].get("nodeName")
    assert "NotFound" in deployed.kubectl("get", "pod", "alice-as-bob").stderr


def test_a_deleted_leader_pod_is_replaced_and_the_standby_takes_over_binding_nothing_twice(deployed):
    before = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in deployed.json("get", "pods")["items"]}
    old = deployed.ready_pods()["yunikorn-scheduler"]["metadata"]["name"]
    deployed.ok("-n", NS, "delete", "pod", old)
    deployed.ok("create", "-f", "-", stdin=pod("alice-3"), user="alice")
    pods = wait(lambda: (r := deployed.ready_pods()) and r["yunikorn-scheduler"]["metadata"]["name"] != old and r,
                60, "a new scheduler pod")
    assert pods["yunikorn-scheduler"]["metadata"]["name"] != old
    wait(lambda: deployed.json("get", "pod", "alice-3")["spec"].get("nodeName"), 30, "alice-3 bound")
    after = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in deployed.json("get", "pods")["items"]}
    assert {k: after[k] for k in before} == before                       # nothing moved, nothing lost
    assert not after["alice-2"]                                           # the limit survives the restart
    assert all(n == 1 for n in deployed.scheduled_events().values())      # nothing bound twice
    usage = wait(lambda: (r := deployed.rest("/ws/v1/partition/default/usage/user/alice")).status_code == 200
                 and r.json()["queues"]["resourceUsage"].get("pods") == 3 and r.json(), 20, "recovered usage")
    assert usage["groups"] == {"yunikorn-default-autogen": "dev"}
    assert not FORBIDDEN.search(deployed.logs())


PREEMPTION_QUEUES = """\
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
              guaranteed: {vcore: 12}
            properties:
              preemption.delay: 1s
"""


def test_the_scheduler_preempts_under_the_manifests_rbac(deployed):
    """A preemption is done with the scheduler's own ServiceAccount: each victim marked
    DisruptionTarget (a PATCH of pods/status) and deleted, without one 403."""
    deployed.ok("-n", NS, "patch", "configmap", "yunikorn-configs", "--type", "merge",
                "-p", json.dumps({"data": {"queues.yaml": PREEMPTION_QUEUES}}))
    wait(lambda: "guaranteed" in deployed.rest("/ws/v1/config").text, 10, "the preemption config")
    for ns in ("batch", "prod"):
        deployed.ok("create", "namespace", ns)
    deployed.ok("create", "priorityclass", "urgent", "--value", "1000")
    victims = [f"batch-{i}" for i in range(4)]   # 2 x 7 cpu on each 16-cpu node: no room for 10
    for name in victims:
        deployed.ok("-n", "batch", "create", "-f", "-", stdin=pod(name, cpu="7"))
    wait(lambda: all(p["spec"].get("nodeName") for p in deployed.json("-n", "batch", "get", "pods")["items"])
         and len(deployed.json("-n", "batch", "get", "pods")["items"]) == 4, 30, "the batch pods bound")
    watch = deployed.watch("-n", "batch", "pods")
    try:
        wait(lambda: len(watch.events()) >= len(victims), 30, "the watch open (the batch pods listed)")
        deployed.ok("-n", "prod", "create", "-f", "-", stdin=pod("urgent", cpu="10", priority_class="urgent"))
        node = wait(lambda: deployed.json("-n", "prod", "get", "pod", "urgent")["spec"].get("nodeName"), 60,
                    "the urgent pod bound after preemption")
        seen = wait(lambda: (e := watch.events()) and sum(t == "DELETED" for t, _ in e) >= 2 and e, 15,
                    "the victims' deletions watched")
    finally:
        watch.close()
    marked = {obj["metadata"]["name"] for _, obj in seen
              if any(c["type"] == "DisruptionTarget" and c["status"] == "True"
                     and c.get("reason") == "PreemptionByScheduler" for c in obj["status"].get("conditions") or ())}
    left = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in deployed.json("-n", "batch", "get", "pods")["items"]}
    assert len(left) == 2 and node not in left.values()   # the two on urgent's node went
    preempted = wait(lambda: {e["involvedObject"]["name"] for e in deployed.json("-n", "batch", "get", "events")["items"]
                              if e["reason"] == "Preempted"}, 15, "the victims' Preempted events")
    assert preempted == set(victims) - set(left) == marked   # each victim marked before it went
    assert not FORBIDDEN.search(deployed.logs())
