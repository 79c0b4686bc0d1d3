"""Calling one admission webhook: where it is (`clientConfig.url` or `.service`), the HTTPS POST
verified against its `caBundle`, and the `timeoutSeconds` bound, as kube-apiserver's webhook
client does. Every failure is a `CallError` whose text is what kube-apiserver puts after
`failed calling webhook "NAME": `.

A `clientConfig.service` is resolved in kube-apiserver's order: a ready address of the Service's
Endpoints (when sim-cluster serves Endpoints) on the matching target port; an `ExternalName`
Service's `externalName` (what kube-apiserver's resolver does too; today the way to point a
service reference at a loopback test server); a `spec.clusterIP` in 127.0.0.0/8. The certificate
must be valid for `NAME.NAMESPACE.svc`, as kube-apiserver checks it. The call runs in the caller's
task under a trio deadline, so other requests are served meanwhile.
"""

from __future__ import annotations

import base64
import ipaddress
import ssl
from dataclasses import dataclass
from typing import Any

import httpx
import trio

from .store import Store

Obj = dict[str, Any]


class CallError(Exception):
    """The webhook could not be called or answered garbage (failurePolicy decides)."""


@dataclass(frozen=True)
class Target:
    """Where to POST: the URL (host may be an IP) and the name its certificate must carry."""

    url: str
    server_name: str


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _endpoint_host(store: Store, svc: Obj, port: int) -> tuple[str, int] | None:
    """A ready address from the Service's Endpoints and the port the Service's `port` targets."""
    meta = svc["metadata"]
    eps = store.get("endpoints", meta["namespace"], meta["name"]) if store.has_bucket("endpoints") else None
    spec_port = next((p for p in (svc.get("spec") or {}).get("ports") or [] if p.get("port") == port), None)
    for subset in (eps or {}).get("subsets") or []:
        addresses = subset.get("addresses") or []
        if not addresses:
            continue
        ports = subset.get("ports") or []
        name = (spec_port or {}).get("name")
        chosen = next((p for p in ports if name and p.get("name") == name), ports[0] if ports else {"port": port})
        return str(addresses[0]["ip"]), int(chosen.get("port", port))
    return None


def resolve(store: Store, config: Obj) -> Target:
    """The URL to call for a webhook's clientConfig; CallError when the service cannot be reached."""
    if config.get("url"):
        return Target(str(config["url"]), "")
    ref = config["service"]
    ns, name, port = ref["namespace"], ref["name"], int(ref.get("port") or 443)
    path = ref.get("path") or ""
    server_name = f"{name}.{ns}.svc"
    svc = store.get("services", ns, name)
    if svc is None:
        raise CallError(f'failed to call webhook: service "{name}" not found')
    spec = svc.get("spec") or {}
    found = _endpoint_host(store, svc, port)
    if found is None and spec.get("type") == "ExternalName" and spec.get("externalName"):
        found = (str(spec["externalName"]), port)
    if found is None and _loopback(str(spec.get("clusterIP") or "")):
        found = (str(spec["clusterIP"]), port)
    if found is None:
        raise CallError(f'failed to call webhook: service "{name}" in namespace "{ns}" has no ready endpoints')
    host = f"[{found[0]}]" if ":" in found[0] else found[0]
    return Target(f"https://{host}:{found[1]}{path}", server_name)


def _ssl_context(config: Obj) -> ssl.SSLContext:
    bundle = config.get("caBundle")
    if bundle:
        return ssl.create_default_context(cadata=base64.b64decode(bundle).decode("ascii"))
    return ssl.create_default_context()


def _describe(exc: BaseException, target: Target) -> str:
    """The cause as Go's client words the usual ones (x509, connection refused)."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):
            if "hostname" in (cause.verify_message or "") or "IP address mismatch" in (cause.verify_message or ""):
                name = target.server_name or httpx.URL(target.url).host
                return f"tls: failed to verify certificate: x509: certificate is not valid for {name}"
            return "tls: failed to verify certificate: x509: certificate signed by unknown authority " \
                   f"({cause.verify_message} [CERTIFICATE_VERIFY_FAILED])"
        if isinstance(cause, ConnectionRefusedError):
            return "dial tcp: connect: connection refused"
        cause = cause.__cause__ or cause.__context__
    return str(exc) or type(exc).__name__


async def post(store: Store, config: Obj, body: bytes, timeout: int) -> Any:
    """POST the AdmissionReview, return the decoded answer; CallError on any failure."""
    target = resolve(store, config)
    url = httpx.URL(target.url).copy_merge_params({"timeout": f"{timeout}s"})
    shown = f'Post "{url}"'
    extensions = {"sni_hostname": target.server_name} if target.server_name else {}
    try:
        with trio.fail_after(timeout):
            async with httpx.AsyncClient(verify=_ssl_context(config), timeout=None, trust_env=False) as client:
                response = await client.post(url, content=body, extensions=extensions,
                                             headers={"Content-Type": "application/json",
                                                      "Accept": "application/json"})
    except trio.TooSlowError:
        raise CallError(f"failed to call webhook: {shown}: context deadline exceeded") from None
    except (httpx.HTTPError, ssl.SSLError, OSError) as exc:
        raise CallError(f"failed to call webhook: {shown}: {_describe(exc, target)}") from None
    if response.status_code >= 400:
        raise CallError(f"failed to call webhook: the server responded with the status code "
                        f"{response.status_code} but did not return more information")
    try:
        return response.json()
    except ValueError as exc:
        raise CallError(f"failed to call webhook: {exc}") from None
