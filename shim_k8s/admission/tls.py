"""The serving certificate: made, installed and rotated while the server keeps answering.

The listener (common.http1, main.py) handshakes with `ServingTLS.current()`, and
`ServingTLS.swap` replaces it with a context holding the new chain: handshakes from then on present
the new certificate, connections already open finish on the old one, no request is dropped and no
listener restarted. `CertManager.refresh` is YuniKorn's UpdateWebhookConfiguration: the CA pair
from the Secret (kept or renewed), a new serving certificate signed by the CA that expires last,
the caBundle written into the webhook configurations first, then, after `grace` seconds (kube-
apiserver learns the new caBundle by watch; until it does it trusts only the old CAs, and the
certificate served meanwhile is the old one, signed by a CA both bundles hold), the swap. When the CA
that signed the served certificate is not in the new pair (both CAs replaced at once: a Secret
edited by hand, a controller down for months), the caBundle installed first also holds that old
CA, and it is dropped only once the new certificate is served: a kube-apiserver that has the new
caBundle trusts the old certificate during the grace, one that has not yet trusts the old, and no
connection is refused at any moment. YuniKorn restarts its server instead, dropping what is in
flight. `run` sleeps until the first CA expiry minus 30 days
(or SIGUSR1, as YuniKorn) and refreshes; a refresh that fails there is retried every minute while
the current certificate is still valid.
"""

from __future__ import annotations

import datetime as dt
import logging
import signal
import ssl
from collections.abc import Callable

import httpx
import trio

from kube.credentials import load_pem_chain
from kube.errors import ApiStatusError

from . import certs, webhooks
from .conf import AdmissionConf

log = logging.getLogger("ykshm.admission")
RETRY = 60.0


class ServingTLS:
    """The server SSL context (TLS 1.2+, h2 and http/1.1) new handshakes use: `swap` makes a new
    one rather than loading the new chain into the context in use, because a chain loaded in place
    reached handshakes already under way (clients saw `SSL: UNEXPECTED_MESSAGE` at a rotation);
    a connection keeps the context it started with."""

    def __init__(self) -> None:
        self.context = self._new()

    @staticmethod
    def _new() -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["h2", "http/1.1"])
        return context

    def current(self) -> ssl.SSLContext:
        """The context of the next handshake (the listener asks at each connection)."""
        return self.context

    def swap(self, server: certs.KeyPair, ca: certs.KeyPair) -> None:
        """Serve [server cert, CA] from the next handshake on."""
        context = self._new()
        load_pem_chain(context, server.cert_pem + ca.cert_pem, server.key_pem)
        self.context = context


class CertManager:
    """Certificates in the Secret, caBundle in the webhook configurations, the served chain."""

    def __init__(self, client: httpx.AsyncClient, conf: Callable[[], AdmissionConf], tls: ServingTLS,
                 *, url: str = "", extra_hosts: tuple[str, ...] = (), key_bits: int = certs.KEY_BITS,
                 grace: float = 15.0) -> None:
        self.client, self.conf, self.tls, self.grace = client, conf, tls, grace
        self.url, self.extra_hosts, self.key_bits = url, extra_hosts, key_bits
        self.renew = dt.datetime.max.replace(tzinfo=dt.timezone.utc)
        self.refreshes = 0
        self.signer: certs.KeyPair | None = None   # the CA of the certificate served now
        self.wake = trio.Event()

    async def refresh(self) -> None:
        """Raises webhooks.SetupError (with the API error in it) when it cannot be done. The first
        refresh swaps at once: nothing is served yet."""
        conf = self.conf()
        try:
            ca1, ca2 = await webhooks.load_cas(self.client, conf.namespace, self.key_bits)
            signer = certs.best(ca1, ca2)
            server = await trio.to_thread.run_sync(
                certs.server_cert, signer, conf.am_service_name, conf.namespace, self.extra_hosts,
                self.key_bits)
            bundle = certs.bundle(ca1, ca2)
            replaced = self.signer.cert_pem if self.signer and self.signer.cert_pem not in bundle else b""
            await webhooks.install(self.client, conf, bundle + replaced, self.url)
        except (ApiStatusError, httpx.HTTPError) as exc:
            raise webhooks.SetupError(f"certificates and webhooks: {exc}") from None
        if self.refreshes:
            await trio.sleep(self.grace)
        self.tls.swap(server, signer)
        self.signer = signer
        if replaced:
            await self._drop_old_ca(conf, bundle)
        self.renew = certs.renew_at(ca1, ca2)
        self.refreshes += 1
        log.info("serving certificate %x (signed by the CA expiring %s); next renewal %s",
                 server.cert.serial_number, signer.not_after.date(), self.renew.date())

    async def _drop_old_ca(self, conf: AdmissionConf, bundle: bytes) -> None:
        """The caBundle without the CA no certificate served any more was signed by. A failure
        leaves that CA trusted a while longer (harmless); the next refresh writes the bundle."""
        try:
            await webhooks.install(self.client, conf, bundle, self.url)
        except (ApiStatusError, httpx.HTTPError, webhooks.SetupError) as exc:
            log.warning("dropping the replaced CA from the caBundle: %s", exc)

    async def run(self) -> None:
        """Refresh at renewal time or when woken (SIGUSR1)."""
        while True:
            delay = (self.renew - dt.datetime.now(dt.timezone.utc)).total_seconds()
            with trio.move_on_after(max(delay, 0.0)):
                await self.wake.wait()
            self.wake = trio.Event()
            try:
                await self.refresh()
            except webhooks.SetupError as exc:
                log.error("%s; retrying in %.0fs", exc, RETRY)
                self.renew = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=RETRY)

    async def on_sigusr1(self) -> None:
        with trio.open_signal_receiver(signal.SIGUSR1) as signals:
            async for _ in signals:
                log.info("SIGUSR1: regenerating certificates")
                self.wake.set()


__all__ = ["CertManager", "ServingTLS"]
