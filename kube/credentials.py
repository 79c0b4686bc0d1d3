"""What a request to the API server carries, and what a 401 does: client-go's rules.

A `Credentials` source hands out the current `Credential` (a bearer token and/or a client
certificate) and, after a 401, `refresh()`es it: a token file is re-read (projected ServiceAccount
tokens rotate: it is also re-read whenever its mtime changes), an exec plugin is run again. When the
refresh changes nothing, or the retried request gets a 401 again, `CredentialsError` ends the role
with the reason (kubelet/systemd restart it) instead of an endless retry against a server that
will keep saying no. `KubeAuth` applies all this to httpx; `RawConnection` calls the same source.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import ssl
import tempfile

import httpx
import orjson

from .errors import CredentialsError

log = logging.getLogger("ykshm.kube")


@dataclasses.dataclass(frozen=True)
class Credential:
    """What one request carries: a bearer token, a client certificate + key (PEM), or nothing."""

    token: str = ""
    cert_pem: bytes = b""
    key_pem: bytes = b""


class Credentials:
    """A source of credentials. This base one has none (an anonymous client)."""

    describe = "no credentials"

    async def get(self) -> Credential:
        return Credential()

    async def refresh(self) -> bool:
        """Called after a 401: obtain them again; True when what is sent changed."""
        return False


class StaticToken(Credentials):
    """A token written in the kubeconfig: nothing to re-read."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.describe = "the kubeconfig's token"

    async def get(self) -> Credential:
        return Credential(token=self.token)


class TokenFile(Credentials):
    """A token file (`tokenFile`, the ServiceAccount token): re-read when its mtime, size or inode
    changes, and after a 401. A read that fails keeps the last good token (a rotation replaces
    the file by rename, so a reader may meet the moment between)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.describe = f"token file {path}"
        self._stamp: tuple[int, int, int] | None = None
        self._token = ""
        self.read(force=True)
        if not self._token:
            raise CredentialsError(f"{self.describe}: empty or unreadable")

    def read(self, force: bool = False) -> str:
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
            if force or stamp != self._stamp:
                with open(self.path, encoding="utf-8") as f:
                    token = f.read().strip()
                if token:
                    if self._token and token != self._token:
                        log.info("%s: rotated token picked up", self.describe)
                    self._token, self._stamp = token, stamp
        except OSError as exc:
            log.warning("%s: %s; keeping the last token", self.describe, exc.strerror)
        return self._token

    async def get(self) -> Credential:
        return Credential(token=self.read())

    async def refresh(self) -> bool:
        old = self._token
        return self.read(force=True) != old


def load_pem_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """Put a PEM certificate (chain) + key into an SSL context, client or server side (ssl loads
    only from files: a 0700 temp directory, 0600 files made with O_EXCL, removed at once).
    ssl.SSLError is the caller's."""
    with tempfile.TemporaryDirectory(prefix="ykshm-kc-") as tmp:
        cpath, kpath = os.path.join(tmp, "c.pem"), os.path.join(tmp, "k.pem")
        for path, data in ((cpath, cert), (kpath, key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        ctx.load_cert_chain(cpath, kpath)


def refused(describe: str, code: int, body: bytes) -> CredentialsError:
    """The error of a 401 that re-reading did not cure, with the server's own message."""
    message = ""
    try:
        doc = orjson.loads(body)
        if isinstance(doc, dict):
            message = str(doc.get("message") or "")
    except orjson.JSONDecodeError:
        message = body[:200].decode("utf-8", "replace").strip()
    return CredentialsError(f"the API server refuses our credentials ({describe}): "
                            f"{code} Unauthorized{': ' + message if message else ''}")


class Applier:
    """Turns a source's `Credential` into headers, and loads a certificate it brings into the
    TLS context once (an exec plugin may hand out client certificates)."""

    def __init__(self, creds: Credentials, tls: ssl.SSLContext | None) -> None:
        self.creds, self.tls = creds, tls
        self._cert: tuple[bytes, bytes] = (b"", b"")

    async def authorization(self) -> str:
        cred = await self.creds.get()
        if cred.cert_pem and (cred.cert_pem, cred.key_pem) != self._cert:
            if self.tls is None:
                raise CredentialsError(f"{self.creds.describe}: a client certificate needs https")
            try:
                load_pem_chain(self.tls, cred.cert_pem, cred.key_pem)
            except ssl.SSLError as exc:
                raise CredentialsError(f"{self.creds.describe}: client certificate: {exc}") from None
            self._cert = (cred.cert_pem, cred.key_pem)
        return f"Bearer {cred.token}" if cred.token else ""


class KubeAuth(httpx.Auth):
    """httpx auth: the current credentials on each request; a 401 refreshes them and retries once."""

    def __init__(self, applier: Applier) -> None:
        self.applier = applier

    async def _apply(self, request: httpx.Request) -> None:
        value = await self.applier.authorization()
        if value:
            request.headers["Authorization"] = value

    async def async_auth_flow(self, request: httpx.Request):  # type: ignore[override]
        await self._apply(request)
        response = yield request
        if response.status_code != 401:
            return
        await response.aread()
        if await self.applier.creds.refresh():
            await self._apply(request)
            response = yield request
            if response.status_code != 401:
                return
            await response.aread()
        raise refused(self.applier.creds.describe, 401, response.content)


__all__ = ["Applier", "Credential", "Credentials", "KubeAuth", "StaticToken", "TokenFile",
           "load_pem_chain", "refused"]
