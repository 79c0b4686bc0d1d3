"""A process pod plays the attacker against the cluster's own files (review 2026-11-28, N2).

The review's pod named a kubeconfig whose `exec` credential plugin ran /bin/sh as sim-cluster's user
(root) and read the CA and ServiceAccount signing keys: cluster-admin for anyone with `pods/create`.
Here, on both ways a run starts (the fork server and `--no-fork-server`):

- the same pod gets its exec plugin refused (one line, exit 2) and nothing runs;
- a path option naming the cluster's files is refused the same way;
- whatever code the pod might still run, it runs as the pod's own uid (read from /proc), and that uid
  reads nothing of RUN/pki, another pod's token, the pods directory's listing or the SI socket,
  while its own token stays readable;
- its root/ is its own to write, so it may plant a link there: sim-cluster, as root, does not follow
  it when it sets the container up again for the next run.
- a process it leaves behind in a session of its own dies with the pod, before its uid is reused.

sim-cluster runs as root here (as in CI), so the sandbox is on: `simcluster/sandbox.py`.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from simcluster import pki
from simcluster.sandbox import PodIdentity
from tests.podsdir import reachable_pods_dir
from tests.simcluster.test_simcluster import start_cluster, stop_cluster
from tests.simcluster.test_simcluster_authn import TOKENS, Secure
from tests.simcluster.test_simcluster_clients import eventually


IMAGE = "ykshm:0.1.0"
ATTACK = """
import json, os, socket, sys
out = {}
for path in sys.argv[1:]:
    try:
        if path.endswith(".sock"):
            s = socket.socket(socket.AF_UNIX); s.connect(path); s.close(); out[path] = "connected"
        elif os.path.isdir(path):
            out[path] = "listed " + ",".join(os.listdir(path))
        else:
            out[path] = "read " + open(path, "rb").read(40).decode("latin-1")
    except OSError as exc:
        out[path] = f"denied {exc.errno}"
print(json.dumps(out))
"""


class Cluster:
    def __init__(self, secure: Secure, run: Path, pods: Path) -> None:
        self.secure, self.run, self.pods = secure, run, pods

    def create(self, ns: str, doc: dict[str, Any]) -> None:
        self.secure.ok("-n", ns, "create", "-f", "-", stdin=json.dumps(doc))

    def pod(self, ns: str, name: str) -> dict[str, Any]:
        return json.loads(self.secure.ok("-n", ns, "get", "pod", name, "-o", "json"))

    def namespace(self) -> str:
        ns = f"sb-{uuid.uuid4().hex[:6]}"
        self.secure.ok("create", "namespace", ns)
        return ns


@pytest.fixture(scope="module", params=["--fork-server", "--no-fork-server"])
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    run = Path(tempfile.mkdtemp(prefix="ykrun-"))  # RUN of `ykshm run`: 0700, the PKI and SI socket in it
    si = socket.socket(socket.AF_UNIX)
    si.bind(str(run / "si.sock"))
    si.listen(8)
    (run / "tokens.csv").write_text(TOKENS)
    (run / "home").mkdir()
    try:
        with reachable_pods_dir() as pods:
            proc, url = start_cluster("--pki-dir", str(run / "pki"), "--token-auth-file", str(run / "tokens.csv"),
                                      "--authorization-mode", "RBAC", "--kubelet-delay", "0.05", "--nodes", "1",
                                      "--pods-dir", str(pods), "--backoff-initial", "0.5", "--backoff-max", "1",
                                      request.param)
            try:
                assert proc.stdout is not None
                proc.stdout.readline()  # admin kubeconfig: ...
                yield Cluster(Secure(url, pki.Pki(run / "pki"), run / "home"), run, pods)
            finally:
                stop_cluster(proc)
    finally:
        si.close()
        shutil.rmtree(run, ignore_errors=True)


def spec(name: str, container: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": "node-0000", "restartPolicy": "Never",
                     "containers": [{"name": "c", "image": IMAGE, **container}], **extra}}


def server(name: str) -> dict[str, Any]:
    """A pod that keeps running (a sim-cluster on its own address): the attacker's foothold."""
    return spec(name, {"args": ["sim-cluster", "--port", "0", "--bind", "$(IP)", "--no-process-pods"],
                       "env": [{"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]})


def terminated(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    def state() -> dict[str, Any] | None:
        statuses = cluster.pod(ns, name).get("status", {}).get("containerStatuses") or [{}]
        return (statuses[0].get("state") or {}).get("terminated")

    return eventually(state, timeout=20)


def running_pid(cluster: Cluster, ns: str, name: str) -> int:
    def pid() -> int | None:
        statuses = cluster.pod(ns, name).get("status", {}).get("containerStatuses") or [{}]
        cid = statuses[0].get("containerID") or ""
        return int(cid.removeprefix("process://")) if cid and "running" in statuses[0].get("state", {}) else None

    return eventually(pid, timeout=20)


def ids_of(pid: int) -> tuple[int, int, str]:
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(status["Uid"].split()[0]), int(status["Gid"].split()[0]), status["Groups"].strip()


def test_the_reviews_exec_plugin_pod_runs_nothing(cluster: Cluster) -> None:
    drop = Path(tempfile.mkdtemp(prefix="ykdrop-"))
    os.chmod(drop, 0o777)  # the plugin, whoever it runs as, could write its loot here
    loot = drop / "pwned.txt"
    credential = json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                             "status": {"token": "x"}})
    evil = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": cluster.secure.url, "insecure-skip-tls-verify": True}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "users": [{"name": "u", "user": {"exec": {
                "apiVersion": "client.authentication.k8s.io/v1", "interactiveMode": "Never", "command": "/bin/sh",
                "args": ["-c", f"id -u > {loot}; head -c64 {cluster.run}/pki/ca.key >> {loot}; echo '{credential}'"],
                "env": [{"name": "LD_PRELOAD", "value": "demonstrates-env-filter-bypass"}]}}}]}
    ns = cluster.namespace()
    try:
        cluster.create(ns, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kc"},
                            "data": {"config": json.dumps(evil)}})
        cluster.create(ns, spec("escape", {"args": ["pe-sim", "--kubeconfig", "/etc/kc/config", "--job", f"{ns}/none"],
                                           "volumeMounts": [{"name": "kc", "mountPath": "/etc/kc"}]},
                                volumes=[{"name": "kc", "configMap": {"name": "kc"}}]))
        term = terminated(cluster, ns, "escape")
        assert not loot.exists(), loot.read_text()
        assert term["exitCode"] == 2
        assert "exec credential plugins are refused inside a process pod" in term["message"]
    finally:
        shutil.rmtree(drop, ignore_errors=True)


def test_a_path_option_naming_the_clusters_keys_is_refused(cluster: Cluster) -> None:
    ns = cluster.namespace()
    admin = cluster.secure.pki.admin_kubeconfig  # cluster-admin, if the pod could read it
    cluster.create(ns, spec("admin", {"args": ["pe-sim", "--kubeconfig", str(admin), "--job", f"{ns}/none"]}))
    term = terminated(cluster, ns, "admin")
    assert term["exitCode"] == 2
    assert f"--kubeconfig {admin}: a process pod may read only files of its own directory" in term["message"]


def test_the_pods_uid_reads_nothing_of_the_cluster(cluster: Cluster) -> None:
    ns = cluster.namespace()
    cluster.create(ns, server("foothold"))
    cluster.create(ns, server("victim"))
    uid, gid, groups = ids_of(running_pid(cluster, ns, "foothold"))
    victim_uid, _, _ = ids_of(running_pid(cluster, ns, "victim"))
    assert uid >= 200000 and gid == uid and groups == "" and victim_uid not in (0, uid)

    def token(name: str) -> Path:
        return eventually(lambda: next(cluster.pods.glob(f"{ns}_{name}_*/volumes/kube-api-access/token"), None))

    keys = cluster.run / "pki"
    targets = [keys / "ca.key", keys / "sa.key", keys / "admin.key", keys / "admin.kubeconfig", keys,
               cluster.run / "si.sock", cluster.pods, token("victim"), token("foothold")]
    # any code the pod might run: the same uid, gid, no groups, the same view of the file system
    out = subprocess.run([sys.executable, "-I", "-c", ATTACK, *map(str, targets)], capture_output=True, text=True,
                         preexec_fn=PodIdentity(uid, gid).plan(), timeout=30, cwd="/")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    own = got.pop(str(token("foothold")))
    assert own.startswith("read ey")  # its own token: the pod is a working pod
    assert got == {str(t): "denied 13" for t in targets[:-1]}


def test_a_link_planted_in_the_pods_root_does_not_lead_sim_cluster_out(cluster: Cluster) -> None:
    victim = Path(tempfile.mkdtemp(prefix="ykvictim-"))  # root's, say /etc/cron.d
    ns = cluster.namespace()
    try:
        cluster.create(ns, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kc"},
                            "data": {"job": "* * * * * root sh -c pwned"}})
        doc = spec("planter", {"args": ["--help"], "volumeMounts": [{"name": "kc", "mountPath": "/etc/kc"}]},
                   volumes=[{"name": "kc", "configMap": {"name": "kc"}}])
        doc["spec"]["restartPolicy"] = "Always"
        cluster.create(ns, doc)
        uid = eventually(lambda: next(cluster.pods.glob(f"{ns}_planter_*/root/etc"), None)).stat().st_uid
        etc = next(cluster.pods.glob(f"{ns}_planter_*/root/etc"))
        plant = (f"import os, shutil; shutil.rmtree({str(etc)!r}); os.symlink({str(victim)!r}, {str(etc)!r})")
        out = subprocess.run([sys.executable, "-I", "-c", plant], capture_output=True, text=True, timeout=30,
                             preexec_fn=PodIdentity(uid, uid).plan(), cwd="/")
        assert out.returncode == 0, out.stderr

        def failed_mount() -> str | None:
            events = json.loads(cluster.secure.ok("-n", ns, "get", "events", "-o", "json"))["items"]
            return next((e["message"] for e in events if e["reason"] == "FailedMount"), None)

        assert "Not a directory: 'etc'" in eventually(failed_mount, timeout=20)  # not entered
        assert list(victim.iterdir()) == []
    finally:
        shutil.rmtree(victim, ignore_errors=True)


def test_a_process_the_pod_left_behind_dies_with_the_pod(cluster: Cluster) -> None:
    ns = cluster.namespace()
    cluster.create(ns, server("leaver"))
    uid, gid, _ = ids_of(running_pid(cluster, ns, "leaver"))
    # what a pod could do with any code: a child in a session of its own, out of the group killpg reaches
    left = subprocess.Popen([sys.executable, "-I", "-c", "import time; time.sleep(600)"], cwd="/",
                            preexec_fn=PodIdentity(uid, gid).plan(), start_new_session=True)
    try:
        cluster.secure.ok("-n", ns, "delete", "pod", "leaver")
        assert left.wait(timeout=20) == -9  # SIGKILLed: the next pod with this uid finds nothing of it
    finally:
        left.kill()
        left.wait()


def test_every_form_of_a_path_option_out_of_the_pod_is_refused(tmp_path: Path) -> None:
    pod_dir = tmp_path / "pod"
    (pod_dir / "root").mkdir(parents=True)
    (pod_dir / "root" / "ok").write_text("x")
    (pod_dir / "root" / "out").symlink_to("/etc/passwd")  # a link inside that leads out
    env = {"PATH": os.environ["PATH"], "YKSHM_PROCESS_POD": str(pod_dir)}
    refused = [["export", "--redis-password-file", "/etc/passwd"], ["export", "--redis-password-file=/etc/passwd"],
               ["streams", "--bundle-dir", "/"], ["pe-sim", "--kubeconfig", str(pod_dir / "root" / "out")],
               ["pe-sim", "--kubeconfig", "../../../etc/passwd"]]
    for args in refused:
        out = subprocess.run([sys.executable, "-m", "tools.cli", *args], env=env, capture_output=True, text=True,
                             cwd=pod_dir / "root", timeout=30)
        assert out.returncode == 2 and out.stderr.count("\n") == 1, (args, out.stderr)
        assert "a process pod may read only files of its own directory" in out.stderr, (args, out.stderr)
    # the same file by $KUBECONFIG
    out = subprocess.run([sys.executable, "-m", "tools.cli", "pe-sim", "--job", "ns/none"], timeout=30,
                         env={**env, "KUBECONFIG": "/etc/passwd"}, capture_output=True, text=True, cwd=pod_dir / "root")
    assert out.returncode == 2 and "kubeconfig /etc/passwd: a process pod may read only" in out.stderr, out.stderr
