"""The webhook's HTTP side (admission_controller.go `Serve`, `Health`), an ASGI app for hypercorn.

`/health`: 200 `OK\r\n`. `/mutate` and `/validate-conf` check, in YuniKorn's order: an empty (or
unreadable, or larger than 16 MiB) body is 400 `empty or invalid body`; a Content-Type other than
exactly `application/json` is 415; then the AdmissionReview is decoded, and one that does not
decode is answered `allowed: false`, uid `yunikorn-invalid-body`, `body decode failed`. Any other
path is Go's mux 404. A bug in a handler is logged and answered as a denial naming the error,
never a 500 and never a dead webhook.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from common.http1.lifespan import nothing_to_start
from common.http1.routing import normalise

from . import mutate, validate
from .caches import ClusterCache
from .request import INVALID_UID, Response, decode

log = logging.getLogger("ykshm.admission")
MAX_BODY = 16 << 20
TEXT = [(b"content-type", b"text/plain; charset=utf-8"), (b"x-content-type-options", b"nosniff")]


async def _read(receive: Any) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _send(send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": headers + [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class Webhook:
    """The ASGI app: `cache` holds the configuration and the informers' view, `client` calls the
    scheduler for /validate-conf."""

    def __init__(self, cache: ClusterCache, client: httpx.AsyncClient) -> None:
        self.cache, self.client = cache, client

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await nothing_to_start(receive, send)
            return
        if scope["type"] != "http":
            return
        path = normalise(scope["path"])
        if path is None:
            await _send(send, 400, b"a '.' or '..' path segment is not allowed\n", TEXT)
            return
        if path == "/health":
            await _send(send, 200, b"OK\r\n", [(b"content-type", b"text/plain")])
            return
        if path not in ("/mutate", "/validate-conf"):
            await _send(send, 404, b"404 page not found\n", TEXT)
            return
        body = await _read(receive)
        if not body:
            await _send(send, 400, b"empty or invalid body\n", TEXT)
            return
        content_type = dict(scope["headers"]).get(b"content-type", b"")
        if content_type != b"application/json":
            await _send(send, 415, b"invalid Content-Type, expect `application/json`\n", TEXT)
            return
        answer = await self.answer(path, body)
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


__all__ = ["MAX_BODY", "Webhook"]
