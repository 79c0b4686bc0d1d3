"""`ykshm run --manifests deploy/kubernetes`: the one command that deploys ykshm *into* the embedded
cluster instead of running its roles beside it. Only sim-cluster is a child; every role is a process
pod of the applied manifests; alice's pod is counted through `yunikorn-service`'s address, which the
banner names; Ctrl-C leaves no process and removes the pods' directory."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess

import httpx

from runharness import ROOT, children
from tools.harness import wait_for

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mine"},
       "spec": {"containers": [{"name": "c", "image": "busybox",
                                "resources": {"requests": {"cpu": "200m", "memory": "64Mi"}}}]}}


def test_manifests_deploy_every_role_into_the_embedded_cluster(make_run, tmp_path):
    inst = make_run(nodes=2, extra=("--manifests", str(ROOT / "deploy" / "kubernetes")))
    url = re.search(r"ykshm is running: (\S+)", inst.banner).group(1)
    assert re.fullmatch(r"http://127\.\d+\.128\.\d+:9080", url), inst.banner   # the Service's address
    assert set(inst.roles()) == {"sim-cluster"} and len(children(inst.pid)) == 1
    pods_dir = re.search(r"--pods-dir (\S+)", " ".join(open(f"/proc/{inst.roles()['sim-cluster']}/cmdline")
                                                        .read().split("\0"))).group(1)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    kubectl = ["kubectl", "--kubeconfig", inst.kubeconfig]
    pods = json.loads(subprocess.run([*kubectl, "-n", "yunikorn", "get", "pods", "-o", "json"], env=env,
                                     capture_output=True, text=True, timeout=30).stdout)["items"]
    assert sorted(p["spec"]["serviceAccountName"] for p in pods) == [   # two scheduler replicas
        "ykshm-streams", "yunikorn-admin", "yunikorn-admin", "yunikorn-admission-controller"]
    made = subprocess.run([*kubectl, "--as", "alice", "create", "-f", "-"], input=json.dumps(POD), env=env,
                          capture_output=True, text=True, timeout=30)
    assert made.returncode == 0, made.stderr
    usage = wait_for(lambda: (r := httpx.get(f"{url}/ws/v1/partition/default/usage/user/alice", timeout=5))
                     .status_code == 200 and r.json(), 15, "alice's usage")
    assert usage["queues"]["resourceUsage"] == {"memory": 64 * 2**20, "pods": 1, "vcore": 200}
    # `ykshm status` sees the deployed roles (process pods) and the engine's ring in its pod's
    # emptyDir, not `ring: none` with exit 0 (newcomer-2 row 22c)
    from runharness import ykshm

    res = subprocess.run([*ykshm(), "status", "--name", inst.name, "--json"], cwd=ROOT, capture_output=True,
                         timeout=60)
    doc = json.loads(res.stdout)
    assert res.returncode == 0, (res.stderr, doc["problems"])
    assert {"run", "sim-cluster", "engine", "shim", "admission", "web"} <= {p["role"] for p in doc["processes"]}
    assert doc["ring"]["writerAlive"] and doc["engine"]["published"] and doc["shim"]["state"] == "Running"
    assert inst.stop(signal.SIGINT) == 0, inst.stderr()
    assert inst.leftovers()["pids"] == []
    assert not os.path.exists(pods_dir)


def test_a_directory_that_is_no_kustomization_is_one_line_exit_2(tmp_path):
    from runharness import ykshm

    res = subprocess.run([*ykshm(), "run", "--manifests", str(tmp_path), "--no-demo"], cwd=ROOT,
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip() == (f"ykshm run: error: --manifests {tmp_path}: not a kustomization "
                                  "directory (no kustomization.yaml)")
