"""The webhook's HTTP side (admission_controller.go `Serve`, `Health`), an ASGI app for hypercorn.

`/health`: 200 `OK\r\n`. `/mutate` and `/validate-conf` check, in YuniKorn's order: an empty (or
unreadable) body is 400 `empty or invalid body`; a Content-Type other than exactly
`application/json` is 415; then the AdmissionReview is decoded, and one that does not decode is
answered `allowed: false`, uid `yunikorn-invalid-body`, `body decode failed`. Any other path is
Go's mux 404. A bug in a handler is logged and answered as a denial naming the error, never a 500
and never a dead webhook.

Memory (security review 2, N4: 12 connections of 16 MiB bodies took the webhook from 54 to 254 MB):
a body is at most `MAX_BODY` (413 above it, on Content-Length before anything is read) and must
arrive within the body deadline (408). Before it is read, its size (Content-Length, or MAX_BODY
when chunked) is reserved from a `BodyBudget` of `BUDGET` bytes in all and `PEER_BUDGET` per client
address; with no room it is a 503 at once, never a wait, so bodies held in memory stay under
BUDGET and stalled bodies from one address cannot hold up kube-apiserver's (a review is a few KiB;
other requests hold only what hypercorn buffers for a connection, its app queue being 2 messages:
main.py). YuniKorn reads any body whole, with no limit.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from common.http1.body import BodyErrors, declared_length, read_body
from common.http1.lifespan import nothing_to_start
from common.http1.routing import normalise

from . import mutate, validate
from .caches import ClusterCache
from .request import INVALID_UID, Response, decode

log = logging.getLogger("ykshm.admission")
MAX_BODY = 3 * 1024 * 1024 + 64 * 1024
"""kube-apiserver takes no request body above 3 MiB and etcd keeps objects of at most 1.5 MiB, so
an UPDATE's review (object and oldObject) is at most 3 MiB plus its envelope (uid, kinds,
userInfo, options: a few KiB): 3 MiB + 64 KiB turns away nothing kube-apiserver can send."""
BUDGET = 64 * 1024 * 1024
"""Bytes of request bodies held at once, in all: far below the 500Mi the deployment allows."""
PEER_BUDGET = 16 * 1024 * 1024
"""... and per client address: five of the largest reviews, thousands of ordinary ones."""
BODY_TIMEOUT = 10.0
"""Seconds for a whole body (kube-apiserver's own call gives up after timeoutSeconds, 10)."""
TEXT = [(b"content-type", b"text/plain; charset=utf-8"), (b"x-content-type-options", b"nosniff")]


class BodyBudget:
    """Bytes reserved for request bodies being read, in all and per client address."""

    def __init__(self, total: int = BUDGET, per_peer: int = PEER_BUDGET) -> None:
        self.total, self.per_peer = total, per_peer
        self.used = 0
        self._peers: dict[str, int] = {}

    def reserve(self, peer: str, size: int) -> bool:
        """Hold `size` bytes for `peer`, or False (nothing held) when either budget lacks room."""
        mine = self._peers.get(peer, 0)
        if self.used + size > self.total or mine + size > self.per_peer:
            return False
        self.used += size
        self._peers[peer] = mine + size
        return True

    def release(self, peer: str, size: int) -> None:
        self.used -= size
        left = self._peers[peer] - size
        if left:
            self._peers[peer] = left
        else:
            del self._peers[peer]


class _Refused(Exception):
    """A request the webhook does not take: the `status` and the `text` to answer."""

    def __init__(self, status: int, text: bytes) -> None:
        super().__init__(text)
        self.status, self.text = status, text


BODY_ERRORS = BodyErrors(
    too_large=lambda limit: _Refused(413, f"request body larger than {limit} bytes\n".encode()),
    too_slow=lambda seconds: _Refused(408, f"request body not received within {seconds:g} s\n".encode()),
    gone=lambda: _Refused(400, b"empty or invalid body\n"))


async def _send(send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": headers + [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class Webhook:
    """The ASGI app: `cache` holds the configuration and the informers' view, `client` calls the
    scheduler for /validate-conf."""

    def __init__(self, cache: ClusterCache, client: httpx.AsyncClient,
                 body_timeout: float = BODY_TIMEOUT) -> None:
        self.cache, self.client, self.body_timeout = cache, client, body_timeout
        self.budget = BodyBudget()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await nothing_to_start(receive, send)
            return
        if scope["type"] != "http":
            return
        path = normalise(scope["path"])
        if path is None:
            await _send(send, 400, b"a '.' or '..' path segment is not allowed\n", TEXT)
        elif path == "/health":
            await _send(send, 200, b"OK\r\n", [(b"content-type", b"text/plain")])
        elif path not in ("/mutate", "/validate-conf"):
            await _send(send, 404, b"404 page not found\n", TEXT)
        else:
            try:
                await self._review(path, scope, receive, send)
            except _Refused as exc:
                await _send(send, exc.status, exc.text, TEXT)

    async def _review(self, path: str, scope: dict, receive: Any, send: Any) -> None:
        headers = scope.get("headers", ())
        length = declared_length(headers)
        if (length or 0) > MAX_BODY:
            raise BODY_ERRORS.too_large(MAX_BODY)      # unread
        size = MAX_BODY if length is None else length
        peer = str((scope.get("client") or ("unknown",))[0])
        if not self.budget.reserve(peer, size):
            raise _Refused(503, b"too many request bodies in flight\n")
        try:                                           # held until the body is let go
            body = await read_body(receive, headers, limit=size, timeout=self.body_timeout,
                                   errors=BODY_ERRORS)
            if not body:
                raise _Refused(400, b"empty or invalid body\n")
            if dict(headers).get(b"content-type", b"") != b"application/json":
                raise _Refused(415, b"invalid Content-Type, expect `application/json`\n")
            answer = await self.answer(path, body)
        finally:
            self.budget.release(peer, size)
        await _send(send, 200, answer.review(), [(b"content-type", b"application/json")])

    async def answer(self, path: str, body: bytes) -> Response:
        req = decode(body)
        if req is None:
            return Response(INVALID_UID, False, "body decode failed")
        conf = self.cache.conf
        try:
            if path == "/mutate":
                return mutate.mutate(conf, self.cache, req)
            return await validate.validate_conf(conf, self.cache.configmaps, self.client, req)
        except Exception as exc:  # noqa: BLE001 - a bug costs one request, never the webhook
            log.exception("admission request %s failed", req.uid)
            return Response(req.uid, False, f"admission controller error: {type(exc).__name__}")


__all__ = ["BUDGET", "MAX_BODY", "PEER_BUDGET", "BodyBudget", "Webhook"]
