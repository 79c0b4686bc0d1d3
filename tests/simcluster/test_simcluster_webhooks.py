"""Admission webhooks on a live sim-cluster (issue 22.3), driven by kubectl and the official Python
client against a real HTTPS webhook process (`webhook_server.py`, a `trustme` CA): mutation by
JSONPatch, denial worded as kube-apiserver words it, failurePolicy with a hanging or garbage
webhook while sim-cluster keeps answering, selectors, service references, bad configurations.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from kubernetes import client as k8s

from tests.simcluster.test_simcluster import kubectl, start_cluster, stop_cluster

HERE = Path(__file__).parent
REG = "/apis/admissionregistration.k8s.io/v1"


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    proc, url = start_cluster("--nodes", "2", "--kubelet-delay", "0.05")
    try:
        yield url
    finally:
        stop_cluster(proc)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


class Hook:
    """The webhook process: its port, CA bundle and the reviews it received."""

    def __init__(self, port: int, bundle: str, log: Path) -> None:
        self.port, self.bundle, self.log = port, bundle, log

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def reviews(self, path: str) -> list[dict[str, Any]]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [json.loads(line) for line in lines if json.loads(line)["path"] == path]


def start_hook(ca: trustme.CA, tmp: Path, *names: str) -> tuple[subprocess.Popen[str], Hook]:
    cert = ca.issue_cert(*names)
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp / "hook.pem"))
    proc = subprocess.Popen([sys.executable, str(HERE / "webhook_server.py"), str(tmp / "hook.pem"),
                             str(tmp / "hook.pem"), str(tmp / "reviews.log")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("listening "), line
    bundle = base64.b64encode(ca.cert_pem.bytes()).decode()
    return proc, Hook(int(line.split()[1]), bundle, tmp / "reviews.log")


def stop_pid(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGTERM)
    proc.wait(timeout=10)
    for stream in (proc.stdout, proc.stderr):
        if stream:
            stream.close()


@pytest.fixture(scope="module")
def hook(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hook]:
    proc, h = start_hook(ca, tmp_path_factory.mktemp("hook"), "127.0.0.1", "hook.wh.svc")
    try:
        yield h
    finally:
        stop_pid(proc)


def webhook(name: str, client: dict[str, Any], *, ns_selector: dict | None = None, obj_selector: dict | None = None,
            operations: tuple[str, ...] = ("CREATE",), resources: tuple[str, ...] = ("pods",),
            **extra: Any) -> dict[str, Any]:
    hook = {"name": name, "clientConfig": client, "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "rules": [{"operations": list(operations), "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": list(resources)}], **extra}
    if ns_selector is not None:
        hook["namespaceSelector"] = ns_selector
    if obj_selector is not None:
        hook["objectSelector"] = obj_selector
    return hook


def configure(cluster: str, kind: str, name: str, *hooks: dict[str, Any]) -> httpx.Response:
    plural = "mutatingwebhookconfigurations" if kind == "Mutating" else "validatingwebhookconfigurations"
    body = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": f"{kind}WebhookConfiguration",
            "metadata": {"name": name}, "webhooks": list(hooks)}
    return httpx.post(f"{cluster}{REG}/{plural}", json=body, timeout=10)


def remove(cluster: str, kind: str, name: str) -> None:
    plural = "mutatingwebhookconfigurations" if kind == "Mutating" else "validatingwebhookconfigurations"
    assert httpx.delete(f"{cluster}{REG}/{plural}/{name}", timeout=10).status_code == 200


def namespace(cluster: str, name: str, labels: dict[str, str] | None = None) -> None:
    r = httpx.post(f"{cluster}/api/v1/namespaces", json={"metadata": {"name": name, "labels": labels or {}}},
                   timeout=10)
    assert r.status_code == 201, r.text


def test_mutate_and_deny_with_kubectl(cluster: str, hook: Hook, tmp_path: Path) -> None:
    namespace(cluster, "wh1")
    url = {"caBundle": hook.bundle}
    r = configure(cluster, "Mutating", "label-pods", webhook("mutate.test.ykshm.io", {**url, "url": hook.url("/mutate")},
                                                             ns_selector={"matchLabels": {
                                                                 "kubernetes.io/metadata.name": "wh1"}}))
    assert r.status_code == 201, r.text
    assert r.json()["webhooks"][0]["failurePolicy"] == "Fail" and r.json()["webhooks"][0]["timeoutSeconds"] == 10
    r = configure(cluster, "Validating", "deny-some", webhook("deny.test.ykshm.io", {**url, "url": hook.url("/deny")},
                                                              obj_selector={"matchLabels": {"deny": "yes"}}))
    assert r.status_code == 201, r.text
    try:
        out = kubectl(cluster, tmp_path, "-n", "wh1", "run", "ok-pod", "--image=nginx", "--labels=app=a")
        assert out.returncode == 0, out.stderr
        labels = json.loads(kubectl(cluster, tmp_path, "-n", "wh1", "get", "pod", "ok-pod", "-o", "json").stdout)[
            "metadata"]["labels"]
        assert labels == {"app": "a", "mutated": "yes"}
        out = kubectl(cluster, tmp_path, "-n", "wh1", "run", "bad-pod", "--image=nginx", "--labels=deny=yes")
        assert out.returncode == 1
        assert out.stderr.strip() == ('Error from server (Forbidden): admission webhook "deny.test.ykshm.io" denied '
                                      'the request: no pods named bad-pod here')
        assert kubectl(cluster, tmp_path, "-n", "wh1", "get", "pod", "bad-pod").returncode == 1
        sent = hook.reviews("/mutate")[0]
        request = sent["review"]["request"]
        assert sent["query"] == "timeout=10s"
        assert request["operation"] == "CREATE" and request["namespace"] == "wh1" and request["name"] == "ok-pod"
        assert request["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
        assert request["resource"] == {"group": "", "version": "v1", "resource": "pods"}
        assert request["userInfo"]["username"] == "system:anonymous" and request["dryRun"] is False
        assert request["object"]["spec"]["schedulerName"] == "default-scheduler"  # defaulted before mutation
        assert request["oldObject"] is None and request["options"]["kind"] == "CreateOptions"
        # the validating webhook saw the mutated object
        assert hook.reviews("/deny")[0]["review"]["request"]["object"]["metadata"]["labels"]["mutated"] == "yes"
    finally:
        remove(cluster, "Mutating", "label-pods")
        remove(cluster, "Validating", "deny-some")


def test_update_delete_and_subresources_reach_the_webhook(cluster: str, hook: Hook) -> None:
    namespace(cluster, "wh2")
    r = configure(cluster, "Validating", "watch-all", webhook(
        "allow.test.ykshm.io", {"caBundle": hook.bundle, "url": hook.url("/allow")},
        operations=("UPDATE", "DELETE"), resources=("pods/status", "configmaps"),
        ns_selector={"matchLabels": {"kubernetes.io/metadata.name": "wh2"}}))
    assert r.status_code == 201, r.text
    api = k8s.ApiClient(k8s.Configuration(host=cluster))
    core = k8s.CoreV1Api(api)
    try:
        core.create_namespaced_config_map("wh2", {"metadata": {"name": "cm", "labels": {"v": "1"}}, "data": {"a": "1"}})
        core.patch_namespaced_config_map("cm", "wh2", {"data": {"a": "2"}})
        core.delete_namespaced_config_map("cm", "wh2")
        core.create_namespaced_pod("wh2", {"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "c", "image": "nginx"}]}})
        core.patch_namespaced_pod("p", "wh2", {"metadata": {"labels": {"x": "y"}}})  # main resource: no rule
        core.patch_namespaced_pod_status("p", "wh2", {"status": {"message": "hello"}})
        requests = [x["review"]["request"] for x in hook.reviews("/allow")]
        assert [(q["operation"], q["resource"]["resource"], q.get("subResource")) for q in requests] == [
            ("UPDATE", "configmaps", None), ("DELETE", "configmaps", None), ("UPDATE", "pods", "status")]
        assert requests[0]["oldObject"]["data"] == {"a": "1"} and requests[0]["object"]["data"] == {"a": "2"}
        assert requests[1]["object"] is None and requests[1]["oldObject"]["data"] == {"a": "2"}
        assert requests[2]["object"]["status"]["message"] == "hello"
    finally:
        remove(cluster, "Validating", "watch-all")
        api.close()


def test_service_reference_and_namespace_selector(cluster: str, hook: Hook, tmp_path: Path) -> None:
    namespace(cluster, "wh")
    namespace(cluster, "guarded", {"webhooks": "on"})
    namespace(cluster, "open")
    svc = {"metadata": {"name": "hook"}, "spec": {"type": "ExternalName", "externalName": "127.0.0.1"}}
    assert httpx.post(f"{cluster}/api/v1/namespaces/wh/services", json=svc, timeout=10).status_code == 201
    client = {"caBundle": hook.bundle, "service": {"namespace": "wh", "name": "hook", "port": hook.port,
                                                   "path": "/deny"}}
    r = configure(cluster, "Validating", "by-service", webhook("svc.test.ykshm.io", client,
                                                               ns_selector={"matchLabels": {"webhooks": "on"}}))
    assert r.status_code == 201, r.text
    try:
        assert r.json()["webhooks"][0]["clientConfig"]["service"]["port"] == hook.port
        out = kubectl(cluster, tmp_path, "-n", "guarded", "run", "g", "--image=nginx")
        assert 'admission webhook "svc.test.ykshm.io" denied the request: no pods named g here' in out.stderr
        out = kubectl(cluster, tmp_path, "-n", "open", "run", "o", "--image=nginx")
        assert out.returncode == 0, out.stderr
    finally:
        remove(cluster, "Validating", "by-service")


@pytest.mark.parametrize("policy", ["Ignore", "Fail"])
def test_hanging_webhook_failure_policy_and_responsiveness(cluster: str, hook: Hook, tmp_path: Path,
                                                           policy: str) -> None:
    ns = f"hang-{policy.lower()}"
    namespace(cluster, ns)
    name = f"hang-{policy.lower()}.test.ykshm.io"
    r = configure(cluster, "Validating", ns, webhook(
        name, {"caBundle": hook.bundle, "url": hook.url("/hang")}, failurePolicy=policy, timeoutSeconds=2,
        ns_selector={"matchLabels": {"kubernetes.io/metadata.name": ns}}))
    assert r.status_code == 201, r.text
    try:
        proc = subprocess.Popen(["kubectl", "--server", cluster, "-n", ns, "run", "p", "--image=nginx"],
                                env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "KUBECONFIG": "/dev/null"},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        started = time.monotonic()
        assert httpx.get(f"{cluster}/api/v1/namespaces/{ns}/pods", timeout=5).status_code == 200
        assert time.monotonic() - started < 1.0  # served while the webhook hangs
        assert proc.poll() is None  # the create still waits for the webhook
        out, err = proc.communicate(timeout=20)
        if policy == "Ignore":
            assert proc.returncode == 0 and "pod/p created" in out, err
        else:
            assert proc.returncode == 1
            assert err.strip() == (f'Error from server (InternalError): Internal error occurred: failed calling '
                                   f'webhook "{name}": failed to call webhook: Post "{hook.url("/hang")}?timeout=2s": '
                                   'context deadline exceeded')
    finally:
        remove(cluster, "Validating", ns)


def test_garbage_answer_fails_closed(cluster: str, hook: Hook) -> None:
    namespace(cluster, "garbage")
    r = configure(cluster, "Mutating", "garbage", webhook(
        "garbage.test.ykshm.io", {"caBundle": hook.bundle, "url": hook.url("/garbage")},
        ns_selector={"matchLabels": {"kubernetes.io/metadata.name": "garbage"}}))
    assert r.status_code == 201, r.text
    try:
        r = httpx.post(f"{cluster}/api/v1/namespaces/garbage/configmaps", json={"metadata": {"name": "x"}}, timeout=10)
        assert r.status_code == 201  # configmaps: no rule
        r = httpx.post(f"{cluster}/api/v1/namespaces/garbage/pods", timeout=10, json={
            "metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}})
        assert r.status_code == 500 and r.json()["reason"] == "InternalError"
        assert r.json()["message"].startswith('Internal error occurred: failed calling webhook "garbage.test.ykshm.io": '
                                              'failed to call webhook: ')
    finally:
        remove(cluster, "Mutating", "garbage")


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
@pytest.mark.parametrize("path", ["/wronguid", "/nouid"])
def test_an_answer_for_another_request_is_refused(cluster: str, hook: Hook, policy: str, path: str) -> None:
    """kube-apiserver's VerifyAdmissionResponse: an answer whose response.uid is not the request's
    (or is missing) is an invalid response, never applied: failurePolicy Fail refuses the write
    with a 500 naming the expected uid, Ignore admits it without the webhook's patch."""
    ns = f"{path[1:]}-{policy.lower()}"
    namespace(cluster, ns)
    name = f"{ns}.test.ykshm.io"
    r = configure(cluster, "Mutating", ns, webhook(
        name, {"caBundle": hook.bundle, "url": hook.url(path)}, failurePolicy=policy,
        ns_selector={"matchLabels": {"kubernetes.io/metadata.name": ns}}))
    assert r.status_code == 201, r.text
    try:
        r = httpx.post(f"{cluster}/api/v1/namespaces/{ns}/pods", timeout=10, json={
            "metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}})
        uid = [x["review"]["request"]["uid"] for x in hook.reviews(path)
               if x["review"]["request"]["namespace"] == ns][-1]
        got = "" if path == "/nouid" else f"not-{uid}"
        stored = httpx.get(f"{cluster}/api/v1/namespaces/{ns}/pods/x", timeout=10)
        if policy == "Fail":
            assert r.status_code == 500 and r.json()["reason"] == "InternalError", r.text
            assert r.json()["message"] == (f'Internal error occurred: failed calling webhook "{name}": received '
                                           f'invalid webhook response: expected response.uid="{uid}", got "{got}"')
            assert stored.status_code == 404
        else:
            assert r.status_code == 201, r.text
            assert "mutated" not in (stored.json()["metadata"].get("labels") or {})
    finally:
        remove(cluster, "Mutating", ns)


def test_dry_run_reaches_webhooks_with_dry_run_set(cluster: str, hook: Hook) -> None:
    namespace(cluster, "dry")
    r = configure(cluster, "Mutating", "dry", webhook(
        "dry.test.ykshm.io", {"caBundle": hook.bundle, "url": hook.url("/mutate")}, sideEffects="NoneOnDryRun",
        ns_selector={"matchLabels": {"kubernetes.io/metadata.name": "dry"}}))
    assert r.status_code == 201, r.text
    try:
        r = httpx.post(f"{cluster}/api/v1/namespaces/dry/pods", params={"dryRun": "All"}, timeout=10, json={
            "metadata": {"name": "d"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}})
        assert r.status_code == 201 and r.json()["metadata"]["labels"] == {"mutated": "yes"}
        assert httpx.get(f"{cluster}/api/v1/namespaces/dry/pods/d", timeout=10).status_code == 404
        assert [x["review"]["request"]["dryRun"] for x in hook.reviews("/mutate")
                if x["review"]["request"]["namespace"] == "dry"] == [True]
    finally:
        remove(cluster, "Mutating", "dry")


def test_bad_configurations_are_422_naming_the_field(cluster: str, hook: Hook) -> None:
    """Raw requests: the official client refuses a missing clientConfig before sending it."""
    cases = [
        ({"name": "a.b.c", "sideEffects": "None", "admissionReviewVersions": ["v1"]}, "webhooks[0].clientConfig"),
        ({"name": "a.b.c", "sideEffects": "None", "admissionReviewVersions": ["v1"],
          "clientConfig": {"url": hook.url("/x"), "caBundle": base64.b64encode(b"not a cert").decode()}},
         "webhooks[0].clientConfig.caBundle"),
        ({"name": "a.b.c", "sideEffects": "None", "admissionReviewVersions": ["v1"],
          "clientConfig": {"url": "http://127.0.0.1:1/x"}}, "webhooks[0].clientConfig.url"),
        ({"name": "short", "sideEffects": "None", "admissionReviewVersions": ["v1"],
          "clientConfig": {"url": hook.url("/x")}}, "webhooks[0].name"),
        ({"name": "a.b.c", "sideEffects": "Some", "admissionReviewVersions": ["v1"],
          "clientConfig": {"url": hook.url("/x")}}, "webhooks[0].sideEffects"),
        ({"name": "a.b.c", "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 31,
          "clientConfig": {"url": hook.url("/x")}}, "webhooks[0].timeoutSeconds"),
    ]
    for hook_body, field in cases:
        r = configure(cluster, "Validating", "bad", hook_body)
        assert r.status_code == 422, r.text
        status = r.json()
        assert [c["field"] for c in status["details"]["causes"]] == [field], status
        assert status["message"].startswith('ValidatingWebhookConfiguration.admissionregistration.k8s.io "bad" is invalid: ' + field)
