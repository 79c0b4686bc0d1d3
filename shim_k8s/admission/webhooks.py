"""The CA pair in YuniKorn's Secret and the webhook configurations the controller installs
(webhook_manager.go), over the shared kube client.

Secret `admission-controller-secrets` in the controller's namespace must exist (YuniKorn's chart
creates it empty; so does deploy/); its keys `cacert1.pem`, `cakey1.pem`, `cacert2.pem`,
`cakey2.pem` hold two CAs whose expiries lie about six months apart. A CA that is missing,
corrupt or inside 90 days of expiry is made anew (logged) and the Secret updated with its
resourceVersion; a conflict (another replica won) starts over, at most 10 times, so replicas end
up sharing one pair. The Mutating/ValidatingWebhookConfigurations `yunikorn-admission-controller-
mutations` / `-validations` are created, or rewritten when their webhook differs from ours (the
caBundle above all: PEM(CA1)+PEM(CA2)), on the same 10-attempt conflict loop. Nothing deletes them.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping
from typing import Any

import httpx
import orjson
import trio

from kube.client import check
from kube.errors import ApiStatusError

from . import certs
from .conf import AdmissionConf

log = logging.getLogger("ykshm.admission")

SECRET = "admission-controller-secrets"
CA_KEYS = (("cacert1.pem", "cakey1.pem"), ("cacert2.pem", "cakey2.pem"))
VALIDATING = "yunikorn-admission-controller-validations"
MUTATING = "yunikorn-admission-controller-mutations"
VALIDATE_HOOK = "admission-webhook.yunikorn.validate-conf"
MUTATE_HOOK = "admission-webhook.yunikorn.mutate-pods"
ATTEMPTS = 10
REG = "/apis/admissionregistration.k8s.io/v1"
JSON = {"Content-Type": "application/json"}


class SetupError(Exception):
    """The controller cannot get its certificates or webhooks in place (exit 1 with this)."""


def _b64(data: Mapping[str, Any], key: str) -> bytes | None:
    try:
        return base64.b64decode(str(data.get(key) or ""), validate=True) or None
    except ValueError:
        return None


async def _ca(data: Mapping[str, Any], index: int, other_missing: bool, key_bits: int
              ) -> tuple[certs.KeyPair, bool]:
    """(CA #index+1, made anew?)."""
    cert_key, key_key = CA_KEYS[index]
    stored = certs.load_ca(_b64(data, cert_key), _b64(data, key_key))
    if stored is not None:
        return stored, False
    if data.get(cert_key) or data.get(key_key):
        log.warning("Secret %s: CA #%d is corrupt, does not match its key or expires within 90 "
                    "days: generating a new one", SECRET, index + 1)
    life = certs.HALF_YEAR if index == 0 and other_missing else certs.YEAR
    return await trio.to_thread.run_sync(certs.new_ca, life, key_bits), True


async def load_cas(client: httpx.AsyncClient, namespace: str, key_bits: int = certs.KEY_BITS
                   ) -> tuple[certs.KeyPair, certs.KeyPair]:
    path = f"/api/v1/namespaces/{namespace}/secrets/{SECRET}"
    for _attempt in range(ATTEMPTS):
        resp = await client.get(path)
        if resp.status_code == 404:
            raise SetupError(f"Secret {namespace}/{SECRET} does not exist; create it (kubectl -n "
                             f"{namespace} create secret generic {SECRET})")
        secret = check(resp)
        data = secret.get("data") or {}
        ca2_missing = certs.load_ca(_b64(data, CA_KEYS[1][0]), _b64(data, CA_KEYS[1][1])) is None
        ca1, new1 = await _ca(data, 0, ca2_missing, key_bits)
        ca2, new2 = await _ca(data, 1, False, key_bits)
        if not (new1 or new2):
            return ca1, ca2
        secret["data"] = {**data, **{k: base64.b64encode(v).decode() for k, v in (
            (CA_KEYS[0][0], ca1.cert_pem), (CA_KEYS[0][1], ca1.key_pem),
            (CA_KEYS[1][0], ca2.cert_pem), (CA_KEYS[1][1], ca2.key_pem))}}
        resp = await client.put(path, content=orjson.dumps(secret), headers=JSON)
        if resp.status_code == 409:
            log.info("Secret %s changed meanwhile (another replica?): reading it again", SECRET)
            continue
        check(resp)
        log.info("Secret %s/%s updated with new CA certificates", namespace, SECRET)
        return ca1, ca2
    raise SetupError(f"Secret {namespace}/{SECRET}: still conflicting after {ATTEMPTS} attempts")


def _client_config(conf: AdmissionConf, path: str, bundle: bytes, url: str) -> dict[str, Any]:
    cfg: dict[str, Any] = {"caBundle": base64.b64encode(bundle).decode()}
    if url:
        cfg["url"] = url.rstrip("/") + path
    else:
        cfg["service"] = {"name": conf.am_service_name, "namespace": conf.namespace, "path": path}
    return cfg


def webhook(conf: AdmissionConf, bundle: bytes, url: str, mutating: bool) -> dict[str, Any]:
    """The one webhook of each configuration, as YuniKorn writes it but for the mutating one's
    `failurePolicy: Fail` (YuniKorn: Ignore). That webhook is the identity check: with Ignore, a
    pod created while it is down (restarting, OOM-killed, stopped) keeps the `user.info` its author
    wrote (security review 2, N4). With Fail kube-apiserver refuses pods and workloads until it
    answers again, except in the namespaces `namespaceSelector` leaves out (`_unwatched`). The
    ConfigMap validation keeps Ignore: a config edit while it is down is checked by the scheduler."""
    if mutating:
        rule = {"operations": ["CREATE", "UPDATE"], "apiGroups": ["", "apps", "batch"],
                "apiVersions": ["v1"], "resources": ["pods", "deployments", "replicasets",
                                                     "statefulsets", "daemonsets", "jobs", "cronjobs"]}
    else:
        rule = {"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
                "resources": ["configmaps"]}
    return {"name": MUTATE_HOOK if mutating else VALIDATE_HOOK,
            "clientConfig": _client_config(conf, "/mutate" if mutating else "/validate-conf",
                                           bundle, url),
            "rules": [rule], "failurePolicy": "Fail" if mutating else "Ignore", "sideEffects": "None",
            "admissionReviewVersions": ["v1"], "timeoutSeconds": 10,
            "namespaceSelector": _unwatched(conf) if mutating else {}}


def _unwatched(conf: AdmissionConf) -> dict[str, Any]:
    """The namespaces whose pods never wait for the webhook: `kube-system` (the control plane must
    start without it, as Kubernetes advises for a Fail webhook) and the controller's own
    namespace (its pod must restart while its webhook is down), but never `default`, where users
    work: when the controller runs there (`ykshm run`'s process) nothing waits on its pod."""
    names = sorted({"kube-system", conf.namespace} - {"default"})
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                  "values": names}]}


def _same(have: Any, want: Mapping[str, Any]) -> bool:
    """checkMutatingWebhook/checkValidatingWebhook: one webhook, ours in every field we set."""
    if not isinstance(have, list) or len(have) != 1 or not isinstance(have[0], Mapping):
        return False
    hook = have[0]
    rules = [{k: r.get(k) for k in ("operations", "apiGroups", "apiVersions", "resources")}
             for r in hook.get("rules") or [] if isinstance(r, Mapping)]
    client_config = dict(hook.get("clientConfig") or {})
    if "service" in client_config:
        client_config["service"] = {k: v for k, v in client_config["service"].items() if k != "port"}
    return (hook.get("name") == want["name"] and client_config == want["clientConfig"]
            and rules == want["rules"] and hook.get("failurePolicy") == want["failurePolicy"]
            and hook.get("sideEffects") == want["sideEffects"]
            and (hook.get("namespaceSelector") or {}) == want["namespaceSelector"]
            and hook.get("timeoutSeconds", 10) == want["timeoutSeconds"])


async def _install_one(client: httpx.AsyncClient, resource: str, name: str, hook: dict[str, Any]) -> None:
    path = f"{REG}/{resource}/{name}"
    for _attempt in range(ATTEMPTS):
        resp = await client.get(path)
        if resp.status_code == 404:
            body = {"apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "MutatingWebhookConfiguration" if "mutating" in resource
                    else "ValidatingWebhookConfiguration",
                    "metadata": {"name": name, "labels": {"app": "yunikorn"}}, "webhooks": [hook]}
            resp = await client.post(f"{REG}/{resource}", content=orjson.dumps(body), headers=JSON)
            if resp.status_code == 409:
                continue
            check(resp)
            log.info("created %s %s", resource, name)
            return
        current = check(resp)
        if _same(current.get("webhooks"), hook):
            return
        current["webhooks"] = [hook]
        resp = await client.put(path, content=orjson.dumps(current), headers=JSON)
        if resp.status_code in (404, 409):
            continue
        check(resp)
        log.info("updated %s %s (caBundle or webhook changed)", resource, name)
        return
    raise SetupError(f"{resource}/{name}: still conflicting after {ATTEMPTS} attempts")


async def install(client: httpx.AsyncClient, conf: AdmissionConf, bundle: bytes, url: str = "") -> None:
    try:
        await _install_one(client, "validatingwebhookconfigurations", VALIDATING,
                           webhook(conf, bundle, url, mutating=False))
        await _install_one(client, "mutatingwebhookconfigurations", MUTATING,
                           webhook(conf, bundle, url, mutating=True))
    except ApiStatusError as exc:
        raise SetupError(f"installing the webhook configurations: {exc}") from None


__all__ = ["MUTATING", "SECRET", "SetupError", "VALIDATING", "install", "load_cas", "webhook"]
