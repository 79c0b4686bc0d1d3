"""`ykshm run` runs YuniKorn's admission controller too: a pod the admin creates as alice
(`kubectl --kubeconfig F --as alice create -f pod.yaml`, F the banner's kubeconfig) carries
alice's `user.info` and is counted as alice's at once; alice cannot write someone else's."""

from __future__ import annotations

import json
import re
import os
import subprocess

from tools.harness import wait_for

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mine"},
       "spec": {"containers": [{"name": "c", "image": "busybox",
                                "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}}}]}}


def kubectl(inst, tmp_path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    return subprocess.run(["kubectl", "--kubeconfig", inst.kubeconfig, *args], input=stdin, env=env,
                          capture_output=True, text=True, timeout=30)


def test_a_pod_created_as_alice_is_alices_at_once(make_run, tmp_path):
    inst = make_run(nodes=2)
    assert "admission" in inst.roles()
    made = kubectl(inst, tmp_path, "--as", "alice", "create", "-f", "-", stdin=json.dumps(POD))
    assert made.returncode == 0, made.stderr
    pod = json.loads(kubectl(inst, tmp_path, "get", "pod", "mine", "-o", "json").stdout)
    assert json.loads(pod["metadata"]["annotations"]["yunikorn.apache.org/user.info"]) == {
        "user": "alice", "groups": ["system:authenticated"]}
    assert pod["spec"]["schedulerName"] == "yunikorn"       # routed by the webhook, not by the manifest
    usage = wait_for(lambda: (r := inst.web.get("/ws/v1/partition/default/usage/user/alice")).status_code == 200
                     and r.json(), 10, "alice's usage")
    assert usage["queues"]["resourceUsage"] == {"memory": 128 * 2**20, "pods": 1, "vcore": 250}

    forged = dict(POD, metadata={"name": "as-bob", "labels": {"applicationId": "bobs-app"}, "annotations": {
        "yunikorn.apache.org/user.info": '{"user":"bob","groups":[]}'}})
    denied = kubectl(inst, tmp_path, "--as", "alice", "create", "-f", "-", stdin=json.dumps(forged))
    assert denied.returncode == 1
    assert "user alice with groups [system:authenticated] is not allowed to set user annotation" in denied.stderr
    # the admin (system:masters) is trusted to act for a user through the annotation, as the demo does
    as_bob = kubectl(inst, tmp_path, "create", "-f", "-", stdin=json.dumps(forged))
    assert as_bob.returncode == 0, as_bob.stderr
    wait_for(lambda: inst.web.get("/ws/v1/partition/default/usage/user/bob").status_code == 200, 10, "bob's usage")


def test_kubectl_edit_of_yunikorn_configs_hot_reloads_the_queues_and_a_refused_edit_says_why(make_run, tmp_path):
    """Issue 34.2: under `ykshm run` the queues come from `yunikorn-configs` (namespace yunikorn),
    seeded from the run's configuration, as YuniKorn is configured: an edit is live within seconds;
    an edit the scheduler refuses is denied by the webhook with the reason, and changes nothing."""
    inst = make_run(nodes=1)

    def queue_names() -> set[str]:
        resp = inst.web.get("/ws/v1/partition/default/queues")
        if resp.status_code != 200:
            return set()
        todo, names = [resp.json()], set()
        while todo:
            q = todo.pop()
            names.add(q["queuename"])
            todo += q.get("children") or []
        return names

    seeded = kubectl(inst, tmp_path, "-n", "yunikorn", "get", "configmap", "yunikorn-configs", "-o", "json")
    assert seeded.returncode == 0, seeded.stderr
    assert "name: dev" in json.loads(seeded.stdout)["data"]["queues.yaml"]   # the embedded default's
    wait_for(lambda: "root.dev" in queue_names(), 15, "the seeded queues")
    queues = ("partitions:\n  - name: default\n    queues:\n      - name: root\n        submitacl: '*'\n"
              "        queues:\n          - name: default\n          - name: teamx\n")
    res = kubectl(inst, tmp_path, "-n", "yunikorn", "patch", "configmap", "yunikorn-configs", "--type", "merge",
                  "-p", json.dumps({"data": {"queues.yaml": queues}}))
    assert res.returncode == 0, res.stderr
    wait_for(lambda: "root.teamx" in queue_names(), 15, "root.teamx after the edit")
    bad = queues.replace("teamx", "teamx\n            resources: {max: {memory: lots}}")
    res = kubectl(inst, tmp_path, "-n", "yunikorn", "patch", "configmap", "yunikorn-configs", "--type", "merge",
                  "-p", json.dumps({"data": {"queues.yaml": bad}}))
    assert res.returncode == 1 and "lots" in res.stderr, res.stderr
    assert "root.teamx" in queue_names()
    # the demo users cannot touch it (N5): it is the scheduler's configuration
    alice = kubectl(inst, tmp_path, "--as", "alice", "-n", "yunikorn", "patch", "configmap", "yunikorn-configs",
                    "--type", "merge", "-p", json.dumps({"data": {"queues.yaml": queues}}))
    assert alice.returncode == 1 and "forbidden" in alice.stderr.lower(), alice.stderr
