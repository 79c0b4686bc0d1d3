"""The admission controller as an attacker meets it: a user who may create pods and workloads but
wants the scheduler to count their work against someone else (user.info is what the user and
group limits key on), or who wants to knock the webhook over. Each attack goes through the real
HTTPS webhook (`ykshm admission` against a sim-cluster) and fails without the check it names.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import orjson
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shim"))

from admission_harness import AdmissionWorld, patched, pod, review  # noqa: E402

USER_INFO = "yunikorn.apache.org/user.info"
BOB = '{"user":"bob","groups":["admins"]}'


@pytest.fixture(scope="module")
def world():
    w = AdmissionWorld(f"t-adms-{uuid.uuid4().hex[:8]}")
    try:
        yield w.start()
    finally:
        w.close()


def test_a_pod_claiming_another_user_is_denied(world):
    """Check: IsAnnotationAllowed before any user.info is kept."""
    response = world.admit(review(pod(annotations={USER_INFO: BOB}), user="alice", groups=("dev",)))
    assert response["allowed"] is False and "patch" not in response


def test_the_submitter_is_stamped_even_when_the_pod_asks_for_nothing(world):
    """Check: a pod without user.info gets the authenticated submitter, not the shim's default."""
    obj = pod()
    out = patched(obj, world.admit(review(obj, user="alice", groups=("dev",))))
    assert out["metadata"]["annotations"][USER_INFO] == '{"user":"alice","groups":["dev"]}'


def test_a_service_account_outside_kube_system_is_not_a_trusted_controller(world):
    """Check: systemUsers is anchored at ^system:serviceaccount:kube-system: (a user's own SA in
    another namespace, or a name that merely contains it, is not a controller)."""
    for user in ("system:serviceaccount:default:ci", "evil-system:serviceaccount:kube-system:x"):
        response = world.admit(review(pod(annotations={USER_INFO: BOB}), user=user,
                                      groups=("system:serviceaccounts",)))
        assert response["allowed"] is False, user


def test_a_workload_template_claiming_another_user_is_denied(world):
    """Check: the template's user.info is checked like a pod's, or the controller (trusted) would
    carry the forgery into every pod it creates."""
    deployment = {"kind": "Deployment", "metadata": {"name": "d"},
                  "spec": {"template": {"metadata": {"annotations": {USER_INFO: BOB}}}}}
    response = world.admit(review(deployment, kind="Deployment", group="apps", user="alice"))
    assert response["allowed"] is False
    cron = {"kind": "CronJob", "metadata": {"name": "c"}, "spec": {"jobTemplate": {"spec": {
        "template": {"metadata": {"annotations": {USER_INFO: BOB}}}}}}}
    assert world.admit(review(cron, kind="CronJob", group="batch", user="alice"))["allowed"] is False


def test_a_user_info_swapped_on_update_is_denied(world):
    """Check: processPodUpdate compares old and new user.info."""
    old = pod(annotations={USER_INFO: '{"user":"alice"}'})
    new = pod(annotations={USER_INFO: BOB})
    response = world.admit(review(new, op="UPDATE", old=old, user="alice"))
    assert response["allowed"] is False
    assert response["status"]["message"] == "user info annotation change is not allowed"


def test_a_replicaset_made_by_a_user_is_stamped_not_skipped(world):
    """Check: only a system user's ReplicaSet is skipped; a user's own one is stamped."""
    rs = {"kind": "ReplicaSet", "metadata": {"name": "rs"}, "spec": {"template": {"metadata": {}}}}
    out = patched(rs, world.admit(review(rs, kind="ReplicaSet", group="apps", user="alice", groups=())))
    assert out["spec"]["template"]["metadata"]["annotations"][USER_INFO] == '{"user":"alice"}'


def test_an_oversized_body_is_refused_without_taking_the_webhook_down(world):
    """Check: bodies are read up to MAX_BODY (3 MiB and 64 KiB: the largest review kube-apiserver
    can send), then 413; the webhook keeps answering."""
    from shim_k8s.admission.review import MAX_BODY

    huge = b'{"request": {"uid": "' + b"x" * MAX_BODY + b'"}}'
    resp = world.post("/mutate", huge)
    assert (resp.status_code, resp.text) == (413, f"request body larger than {MAX_BODY} bytes\n")
    assert world.admit(review(pod()))["allowed"] is True


def test_the_webhook_only_serves_tls_from_its_own_ca(world):
    """Check: the served chain verifies only against the CAs in its Secret, not a public root."""
    import httpx

    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.post(world.url + "/mutate", content=orjson.dumps(review(pod())),
                   headers={"Content-Type": "application/json"}, timeout=10)
    with pytest.raises(httpx.TransportError):        # no plain http beside it
        httpx.get(world.url.replace("https", "http") + "/health", timeout=5)
