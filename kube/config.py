"""A connection to one kube-apiserver: its URL, how its certificate is checked, our credentials.

`KubeConfig` is what every role gets from `kube.source.resolve` (in-cluster, a kubeconfig or
`--api-server`) and hands to the API calls: `client()` is an httpx client whose `KubeAuth` puts
the current credentials on each request; `RawConnection` asks the same `Applier`. Two things
client-go allows and a user should hear about are logged, once, when the connection is made:
`insecure-skip-tls-verify` (the server is not authenticated) and a bearer token sent to an
`http://` server (anyone on the path can read it).
"""

from __future__ import annotations

import logging
import ssl
from typing import Any

import httpx

from .credentials import Applier, Credentials, KubeAuth, StaticToken

log = logging.getLogger("ykshm.kube")
USER_AGENT = "ykshm/0.1"


def tls_context(ca_pem: bytes | None, insecure: bool) -> ssl.SSLContext:
    """The client TLS context: the cluster's CA (system roots without one), or no check at all."""
    if insecure:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    return ssl.create_default_context(cadata=ca_pem.decode() if ca_pem else None)


class KubeConfig:
    """Server, TLS and credentials of one API server. `KubeConfig(server=URL, token=T)` is a
    plain connection (tests, `--api-server`); the loaders pass `tls` and `credentials`."""

    def __init__(self, server: str, token: str = "", *, tls: ssl.SSLContext | None = None,
                 credentials: Credentials | None = None, insecure: bool = False,
                 headers: list[tuple[str, str]] | None = None, origin: str = "--api-server") -> None:
        self.server = server.rstrip("/")
        self.https = self.server.startswith("https://")
        self.tls = tls if tls is not None or not self.https else tls_context(None, insecure)
        self.credentials = credentials or (StaticToken(token) if token else Credentials())
        self.headers = list(headers or [])
        self.origin = origin
        self.insecure = insecure
        self.applier = Applier(self.credentials, self.tls)

    @property
    def verify(self) -> bool | ssl.SSLContext:
        """False when the server's certificate is not checked, else the TLS context (True: http)."""
        if self.insecure:
            return False
        return self.tls if self.tls is not None else True

    @property
    def token(self) -> str:
        """The bearer token a request would carry now (a token file is read if it changed)."""
        read = getattr(self.credentials, "read", None)
        return read() if read else getattr(self.credentials, "token", "")

    def warn_once(self) -> None:
        """The two warnings client-go users should hear, logged when the connection is set up."""
        if self.insecure:
            log.warning("%s: insecure-skip-tls-verify: the API server's certificate is not checked",
                        self.origin)
        if not self.https and type(self.credentials) is not Credentials:
            log.warning("%s: credentials (%s) are sent to %s in clear text (http://)",
                        self.origin, self.credentials.describe, self.server)

    def client(self, **kw: Any) -> httpx.AsyncClient:
        headers = httpx.Headers([("Accept", "application/json"), ("User-Agent", USER_AGENT),
                                 *self.headers])
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        return httpx.AsyncClient(base_url=self.server, headers=headers,
                                 verify=self.tls if self.tls is not None else True,
                                 auth=KubeAuth(self.applier), limits=limits,
                                 timeout=httpx.Timeout(30.0, connect=10.0), **kw)


__all__ = ["KubeConfig", "tls_context"]
