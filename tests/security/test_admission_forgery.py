"""`user.info` cannot be forged through a workload or a label (security review 2, N3).

The review's reproductions: alice created a Deployment (its template stamped with alice), then
patched the template's `user.info` to bob in group admins: the workload UPDATE was not checked,
and the replicaset-controller, a trusted system user, created bob's pods. And on a pod: the
annotation change alone was denied, but the same patch adding `app=yunikorn` passed. Here every
workload kind the webhook stamps is tried on CREATE and UPDATE through the real HTTPS webhook, and
the reproductions are replayed with kubectl against `ykshm run` (sim-cluster, the webhook, the
scheduler): alice's work is never bob's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

for folder in ("shim", "run"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / folder))

from admission_harness import AdmissionWorld, patched, pod, review  # noqa: E402
from runharness import RunInstance  # noqa: E402

from tools.harness import wait_for  # noqa: E402

USER_INFO = "yunikorn.apache.org/user.info"
ALICE = '{"user":"alice","groups":["dev","system:authenticated"]}'
BOB = '{"user":"bob","groups":["admins"]}'
KINDS = {"Deployment": ("apps", ("spec", "template")), "ReplicaSet": ("apps", ("spec", "template")),
         "StatefulSet": ("apps", ("spec", "template")), "DaemonSet": ("apps", ("spec", "template")),
         "Job": ("batch", ("spec", "template")),
         "CronJob": ("batch", ("spec", "jobTemplate", "spec", "template"))}


def workload(kind: str, labels: dict | None = None, annotations: dict | None = None) -> dict:
    meta: dict = {"labels": labels or {}}
    if annotations is not None:
        meta["annotations"] = annotations
    obj: dict = {"metadata": meta, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    for key in reversed(KINDS[kind][1]):
        obj = {key: obj}
    return {"apiVersion": "v1", "kind": kind, "metadata": {"name": "w"}, **obj}


def template_info(obj: dict, kind: str) -> str | None:
    for key in KINDS[kind][1]:
        obj = obj[key]
    return obj["metadata"].get("annotations", {}).get(USER_INFO)


@pytest.fixture(scope="module")
def world():
    w = AdmissionWorld(f"t-forge-{uuid.uuid4().hex[:8]}")
    try:
        yield w.start()
    finally:
        w.close()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_workload_update_cannot_swap_the_templates_user(world, kind):
    group = KINDS[kind][0]
    old = workload(kind, annotations={USER_INFO: ALICE})
    for labels in ({}, {"app": "yunikorn"}, {"applicationId": "t3-forged"}):
        new = workload(kind, labels=labels, annotations={USER_INFO: BOB})
        answer = world.admit(review(new, kind=kind, group=group, op="UPDATE", old=old, user="alice"))
        assert answer["allowed"] is False, (kind, labels)
        assert "is not allowed to set user annotation" in answer["status"]["message"]
    # an update that leaves it alone passes untouched (a rollout, a scale, a label)
    same = workload(kind, labels={"tier": "x"}, annotations={USER_INFO: ALICE})
    answer = world.admit(review(same, kind=kind, group=group, op="UPDATE", old=old, user="alice"))
    assert answer["allowed"] is True and "patch" not in answer
    # removing it gets the updater's own identity back, never nothing
    bare = workload(kind, labels={"applicationId": "a"}, annotations={})
    answer = world.admit(review(bare, kind=kind, group=group, op="UPDATE", old=old, user="alice"))
    assert template_info(patched(bare, answer), kind) == ALICE
    # a controller updating a workload made before the webhook existed is not stamped (a rollout)
    legacy = workload(kind, labels={"applicationId": "a"})
    answer = world.admit(review(legacy, kind=kind, group=group, op="UPDATE", old=legacy,
                                user="system:serviceaccount:kube-system:deployment-controller"))
    assert answer["allowed"] is True and "patch" not in answer


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_template_no_label_routes_is_still_checked_on_create(world, kind):
    """A template with no app-id label in a namespace the controller does not label is not
    processed, but its pods would still carry the forgery past the trusted controller."""
    forged = workload(kind, annotations={USER_INFO: BOB})
    answer = world.admit(review(forged, kind=kind, group=KINDS[kind][0], namespace="kube-system",
                                user="alice"))
    assert answer["allowed"] is False


def test_a_pod_label_cannot_switch_the_user_check_off(world):
    old = pod(annotations={USER_INFO: ALICE})
    for labels in ({"app": "yunikorn"}, {}):
        new = pod(labels=labels, annotations={USER_INFO: BOB})
        for namespace in ("default", "kube-system"):
            answer = world.admit(review(new, op="UPDATE", old=old, user="alice", namespace=namespace))
            assert answer["allowed"] is False, (labels, namespace)
            assert answer["status"]["message"] == "user info annotation change is not allowed"


# ---------------------------------------------------------------- the reproductions, end to end

@pytest.fixture(scope="module")
def run(tmp_path_factory):
    inst = RunInstance(f"t-{uuid.uuid4().hex[:10]}", nodes=2)
    try:
        inst.read_banner()
        yield inst
    finally:
        inst.close()


def kubectl(inst, home, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
    return subprocess.run(["kubectl", "--kubeconfig", inst.kubeconfig, *args], input=stdin, env=env,
                          capture_output=True, text=True, timeout=30)


def test_alices_deployment_never_runs_as_bob(run, tmp_path):
    made = kubectl(run, tmp_path, "--as", "alice", "create", "deployment", "t3", "--image", "busybox",
                   "--replicas", "1")
    assert made.returncode == 0, made.stderr
    forged = {"spec": {"template": {"metadata": {"labels": {"applicationId": "t3-forged"},
                                                 "annotations": {USER_INFO: BOB}}}}}
    patch = kubectl(run, tmp_path, "--as", "alice", "patch", "deploy", "t3", "--type", "merge", "-p",
                    json.dumps(forged))
    assert patch.returncode != 0 and "not allowed to set user annotation" in patch.stderr, patch.stdout
    template = json.loads(kubectl(run, tmp_path, "get", "deploy", "t3", "-o", "json").stdout)
    assert json.loads(template["spec"]["template"]["metadata"]["annotations"][USER_INFO])["user"] == "alice"
    wait_for(lambda: run.web.get("/ws/v1/partition/default/usage/user/alice").status_code == 200,
             30, "alice's deployment pod counted as alice's")
    assert run.web.get("/ws/v1/partition/default/application/t3-forged").status_code == 404
    assert run.web.get("/ws/v1/partition/default/usage/user/bob").status_code == 404


def test_alices_pod_cannot_take_bobs_name_with_a_label(run, tmp_path):
    pod_doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t2"},
               "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    assert kubectl(run, tmp_path, "--as", "alice", "create", "-f", "-", stdin=json.dumps(pod_doc)).returncode == 0
    forged = {"metadata": {"labels": {"app": "yunikorn"}, "annotations": {USER_INFO: BOB}}}
    patch = kubectl(run, tmp_path, "--as", "alice", "patch", "pod", "t2", "--type", "merge", "-p",
                    json.dumps(forged))
    assert patch.returncode != 0 and "user info annotation change is not allowed" in patch.stderr
    stored = json.loads(kubectl(run, tmp_path, "get", "pod", "t2", "-o", "json").stdout)
    assert json.loads(stored["metadata"]["annotations"][USER_INFO])["user"] == "alice"
    assert stored["metadata"].get("labels", {}).get("app") != "yunikorn"
    assert run.web.get("/ws/v1/partition/default/usage/user/bob").status_code == 404


def test_while_the_webhook_is_stopped_no_pod_is_admitted(run, tmp_path):
    """N4's second half: the review SIGSTOPped the webhook and a pod with a forged user.info was
    created (failurePolicy Ignore). Now kube-apiserver's stand-in waits timeoutSeconds and refuses."""
    hooks = json.loads(kubectl(run, tmp_path, "get", "mutatingwebhookconfiguration",
                               "yunikorn-admission-controller-mutations", "-o", "json").stdout)
    (hook,) = hooks["webhooks"]
    assert (hook["failurePolicy"], hook["timeoutSeconds"]) == ("Fail", 10)
    forged = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "t5", "labels": {"applicationId": "t5-forged-app"},
                           "annotations": {USER_INFO: BOB}},
              "spec": {"schedulerName": "yunikorn", "containers": [{"name": "c", "image": "busybox"}]}}
    admission = run.roles()["admission"]
    os.kill(admission, signal.SIGSTOP)
    try:
        made = kubectl(run, tmp_path, "--as", "alice", "create", "-f", "-", stdin=json.dumps(forged))
    finally:
        os.kill(admission, signal.SIGCONT)
    assert made.returncode != 0 and "failed calling webhook" in made.stderr, made.stdout
    assert kubectl(run, tmp_path, "get", "pod", "t5").returncode != 0
    assert run.web.get("/ws/v1/partition/default/application/t5-forged-app").status_code == 404
    # answering again, it judges the same pod itself: alice may not write bob's name
    again = kubectl(run, tmp_path, "--as", "alice", "create", "-f", "-", stdin=json.dumps(forged))
    assert again.returncode != 0 and "not allowed to set user annotation" in again.stderr
