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


def test_queues_yaml_in_yunikorn_configs_is_refused_naming_the_file_that_is_used(make_run, tmp_path):
    """newcomer-2: under `ykshm run` a queues.yaml put into yunikorn-configs was validated, accepted
    and then ignored (the run's --config file stays the configuration). It is refused with the
    file's name; the controller's own keys can still be changed."""
    inst = make_run(nodes=1)
    queues = "partitions:\n  - name: default\n    queues:\n      - name: root\n        queues:\n          - name: teamx\n"
    patch = json.dumps({"data": {"queues.yaml": queues}})
    res = kubectl(inst, tmp_path, "-n", "yunikorn", "patch", "configmap", "yunikorn-configs", "--type", "merge",
                  "-p", patch)
    assert res.returncode == 1
    config = re.search(r"--config (\S+)", " ".join(open(f"/proc/{inst.roles()['engine']}/cmdline").read()
                                                 .split("\0"))).group(1)
    assert f"queues.yaml in ConfigMap yunikorn-configs would not be applied: this scheduler (ykshm run) " \
           f"takes its queues from {config}" in res.stderr, res.stderr
    ok = kubectl(inst, tmp_path, "-n", "yunikorn", "patch", "configmap", "yunikorn-configs", "--type", "merge",
                 "-p", json.dumps({"data": {"admissionController.filtering.bypassNamespaces": "^kube-system$"}}))
    assert ok.returncode == 0, ok.stderr
