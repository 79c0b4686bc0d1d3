"""The admission tests' world: a real sim-cluster, a real `ykshm web` (the scheduler's
validate-conf) and a real `ykshm admission` serving HTTPS on 127.0.0.1, each a subprocess stopped
by pid; AdmissionReview v1 bodies built as kube-apiserver sends them; answers decoded and their
JSONPatch applied with `jsonpatch` as kube-apiserver applies it.

sim-cluster on main serves no admissionregistration.k8s.io kinds yet: when it does not, the
harness registers the two webhook configuration kinds as CRDs so the controller's GET/POST/PUT
reach a real API server either way.
"""

from __future__ import annotations

import base64
import socket
import ssl
import time
import uuid
from typing import Any

import httpx
import jsonpatch
import orjson

from tools.harness import Cluster, Proc, wait_for

NAMESPACE = "yunikorn"
SECRET = "admission-controller-secrets"
REG = "/apis/admissionregistration.k8s.io/v1"


def review(obj: Any, *, kind: str = "Pod", op: str = "CREATE", user: str = "alice",
           groups: tuple[str, ...] = ("dev", "system:authenticated"), namespace: str = "default",
           old: Any = None, group: str = "", uid: str | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": kind.lower() + "s"},
        "namespace": namespace, "operation": op,
        "userInfo": {"username": user, "groups": list(groups)}, "object": obj,
    }
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def pod(name: str = "p", labels: dict | None = None, annotations: dict | None = None,
        **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}


def patched(obj: Any, response: dict[str, Any]) -> Any:
    """The object after the answer's JSONPatch, as kube-apiserver would store it."""
    if "patch" not in response:
        return obj
    assert response["patchType"] == "JSONPatch"
    ops = orjson.loads(base64.b64decode(response["patch"]))
    return jsonpatch.apply_patch(obj, ops)


def _ensure_webhook_kinds(api: httpx.Client) -> None:
    if api.get(f"{REG}/mutatingwebhookconfigurations").status_code != 404:
        return
    for kind, plural in (("MutatingWebhookConfiguration", "mutatingwebhookconfigurations"),
                         ("ValidatingWebhookConfiguration", "validatingwebhookconfigurations")):
        crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": f"{plural}.admissionregistration.k8s.io"},
               "spec": {"group": "admissionregistration.k8s.io", "scope": "Cluster",
                        "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
                        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                            "openAPIV3Schema": {"type": "object",
                                                "x-kubernetes-preserve-unknown-fields": True}}}]}}
        resp = api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd)
        assert resp.status_code in (200, 201), resp.text
    wait_for(lambda: api.get(f"{REG}/mutatingwebhookconfigurations").status_code == 200, 10,
             "the webhook configuration kinds")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AdmissionWorld:
    """sim-cluster + web + `ykshm admission --webhook-url https://127.0.0.1:PORT`."""

    def __init__(self, name: str, configs: dict[str, str] | None = None) -> None:
        self.cluster = Cluster(name)
        self.cluster.spawn_sim()  # the web needs no cluster: both start side by side
        self.web_port = free_port()
        self.web = Proc("web", ["web", "--name", name, "--workers", "1",
                                "--bind", f"127.0.0.1:{self.web_port}"], self.cluster.log_dir)
        try:
            self.cluster.wait_sim()
        except BaseException:
            self.web.stop()
            self.cluster.close()
            raise
        self.api = self.cluster.api
        assert self.api is not None
        self.api.post("/api/v1/namespaces", json={"metadata": {"name": NAMESPACE}})
        self.api.post(f"/api/v1/namespaces/{NAMESPACE}/secrets",
                      json={"metadata": {"name": SECRET}, "type": "Opaque"})
        _ensure_webhook_kinds(self.api)
        data = {"admissionController.webHook.schedulerServiceAddress": f"127.0.0.1:{self.web_port}",
                **(configs or {})}
        self.put_configs(data)
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.proc: Proc | None = None
        wait_for(lambda: httpx.get(f"http://127.0.0.1:{self.web_port}/ws/v1/scheduler/healthcheck",
                                   timeout=2).status_code == 200, 30, "ykshm web")

    def put_configs(self, data: dict[str, str]) -> None:
        path = f"/api/v1/namespaces/{NAMESPACE}/configmaps/yunikorn-configs"
        body = {"metadata": {"name": "yunikorn-configs", "namespace": NAMESPACE}, "data": data}
        if self.api.get(path).status_code == 404:
            assert self.api.post(f"/api/v1/namespaces/{NAMESPACE}/configmaps", json=body).status_code == 201
        else:
            assert self.api.put(path, json=body).status_code == 200

    def start(self, *extra: str) -> "AdmissionWorld":
        self.proc = Proc("admission", ["admission", "--api-server", self.cluster.url,
                                       "--namespace", NAMESPACE, "--bind", f"127.0.0.1:{self.port}",
                                       "--webhook-url", self.url, "--key-bits", "2048",
                                       "--rotation-grace", "1", *extra],
                         self.cluster.log_dir)
        wait_for(self._healthy, 60, "ykshm admission /health")
        return self

    def _healthy(self) -> bool:
        assert self.proc is not None
        if not self.proc.alive():
            raise AssertionError(f"ykshm admission exited: {self.proc.tail()}")
        return self.get("/health").status_code == 200

    def ca_bundle(self) -> bytes:
        data = self.api.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/{SECRET}").json().get("data") or {}
        return b"".join(base64.b64decode(data[k]) for k in ("cacert1.pem", "cacert2.pem") if k in data)

    def verify(self) -> ssl.SSLContext:
        """Trust only the CAs in the controller's Secret (the caBundle it installs)."""
        return ssl.create_default_context(cadata=self.ca_bundle().decode())

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, verify=self.verify(), timeout=10)

    def post(self, path: str, body: bytes, content_type: str = "application/json") -> httpx.Response:
        return httpx.post(self.url + path, content=body, verify=self.verify(), timeout=10,
                          headers={"Content-Type": content_type})

    def admit(self, doc: dict[str, Any], path: str = "/mutate") -> dict[str, Any]:
        resp = self.post(path, orjson.dumps(doc))
        assert resp.status_code == 200, resp.text
        answer = resp.json()
        assert answer["kind"] == "AdmissionReview" and answer["apiVersion"] == "admission.k8s.io/v1"
        return answer["response"]

    def eventually(self, doc: dict[str, Any], check, path: str = "/mutate", timeout: float = 10) -> dict:
        """Post until `check(response)` holds (a ConfigMap change reaches the controller by watch)."""
        deadline = time.monotonic() + timeout
        while True:
            response = self.admit(doc, path)
            if check(response) or time.monotonic() > deadline:
                return response
            time.sleep(0.1)

    def close(self) -> None:
        for proc in (self.proc, self.web):
            if proc is not None:
                proc.stop()
        self.cluster.close()


__all__ = ["AdmissionWorld", "NAMESPACE", "SECRET", "patched", "pod", "review"]
