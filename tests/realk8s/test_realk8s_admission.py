"""YuniKorn's admission controller (`ykshm admission`) registered as a webhook and called by the real
kube-apiserver (issue 31 item 4, second bullet): a pod gets `user.info` from the user the real
apiserver authenticated, a forged one is denied, and after the controller rotates its CA (SIGUSR1)
the real apiserver still calls it, with the new caBundle.

The controller runs in the run's network namespace under its own identity and RBAC (as `ykshm run`
makes them, tools/run_identities.py), registered by URL on an address of the pod range. Its
webhooks are `failurePolicy: Ignore` (YuniKorn's): a call the apiserver could not make would admit
the pod without `user.info`, so the annotation is the proof that the call was made.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from shim_k8s.admission import certs
from simcluster import pki
from tools import harness, run_identities

USER_INFO = "yunikorn.apache.org/user.info"
BIND = "10.244.1.20:9089"


def pod(name: str, annotations: dict | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "image": "registry.invalid/c:1",
                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}


def create_as(plane, tmp: Path, user: str, obj: dict, *extra: str):
    path = tmp / f"{obj['metadata']['name']}.json"
    path.write_text(json.dumps(obj))
    return plane.kubectl("--as", user, "create", "-f", str(path), "-o", "json", *extra, check=False)


@pytest.fixture
def admission(plane, tmp_path):
    plane.kubectl("apply", "-f", str(run_identities.write_policy(tmp_path / "policy.yaml")))
    objects = tmp_path / "objects.json"
    objects.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
         "metadata": {"namespace": "default", "name": "admission-controller-secrets"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "default", "name": "yunikorn-configs"},
         "data": {"admissionController.accessControl.externalGroups": "^system:masters$"}}]}))
    plane.kubectl("apply", "-f", str(objects))
    config = pki.client_kubeconfig(plane.pki, "ykshm-admission", f"{run_identities.USER_PREFIX}admission",
                                   (run_identities.GROUP,), plane.server)
    log = tmp_path / "admission.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*plane.enter(), sys.executable, "-m", "tools.cli", "admission", "--kubeconfig",
                                 str(config), "--namespace", "default", "--bind", BIND, "--webhook-url",
                                 f"https://{BIND}", "--key-bits", "2048", "--rotation-grace", "3"],
                                stdout=out, stderr=out, stdin=subprocess.DEVNULL, cwd=harness.ROOT,
                                env=dict(os.environ, PYTHONPATH=harness.ROOT))
    try:
        yield proc, log
    finally:
        proc.terminate()
        proc.wait(20)


def test_the_real_apiserver_calls_the_admission_webhook_before_and_after_a_ca_rotation(plane, admission, tmp_path):
    proc, log = admission

    def stamped(name: str):
        assert proc.poll() is None, log.read_text()
        done = create_as(plane, tmp_path, "alice", pod(name), "--dry-run=server")
        return done.returncode == 0 and USER_INFO in json.loads(done.stdout)["metadata"].get("annotations", {})
    harness.wait_for(lambda: stamped("probe"), 60, "the webhook registered and called", interval=0.5)

    made = create_as(plane, tmp_path, "alice", pod("alices"))
    assert made.returncode == 0, made.stderr
    stored = plane.kubectl_json("get", "pod", "alices")
    assert json.loads(stored["metadata"]["annotations"][USER_INFO]) == {
        "user": "alice", "groups": ["system:authenticated"]}   # the real apiserver's userInfo
    assert stored["spec"]["schedulerName"] == "yunikorn"

    forged = create_as(plane, tmp_path, "alice", pod("as-bob", {USER_INFO: '{"user":"bob","groups":[]}'}))
    assert forged.returncode != 0
    assert "user alice with groups [system:authenticated] is not allowed to set user annotation" in forged.stderr

    def ca_bundle() -> str:
        hooks = plane.kubectl_json("get", "mutatingwebhookconfigurations")["items"]
        return next(h["webhooks"][0]["clientConfig"]["caBundle"] for h in hooks if "yunikorn" in h["metadata"]["name"])
    before = ca_bundle()
    # CA #1 now expires in 60 days: inside YuniKorn's 90-day cutoff, so SIGUSR1 replaces it
    # (tests/shim/test_admission_certs.py rotates the same way against sim-cluster)
    short = certs.new_ca(dt.timedelta(days=60), 2048)
    patch = {"data": {"cacert1.pem": base64.b64encode(short.cert_pem).decode(),
                      "cakey1.pem": base64.b64encode(short.key_pem).decode()}}
    plane.kubectl("patch", "secret", "admission-controller-secrets", "--type=merge", "-p", json.dumps(patch))
    served = log.read_text().count("serving certificate")
    os.kill(proc.pid, signal.SIGUSR1)
    harness.wait_for(lambda: log.read_text().count("serving certificate") > served, 60,
                     "the new certificate served after its grace period", interval=0.2)
    assert ca_bundle() != before
    after = create_as(plane, tmp_path, "alice", pod("after-rotation"))
    assert after.returncode == 0, after.stderr
    assert USER_INFO in plane.kubectl_json("get", "pod", "after-rotation")["metadata"]["annotations"]
