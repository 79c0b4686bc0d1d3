"""GET /ws/v1/events/stream served straight on the socket, beside hypercorn (the direct path).

web.listener gives us a connection whose first request is a plain `GET /ws/v1/events/stream`
(common.http1.head). We check it exactly as the ASGI handler does (`events.plan_stream`, the
stream-slot limits); if it would be refused we answer nothing and say so (`DECLINED`): the
listener hands the untouched request to hypercorn, whose answer (400/500/503 JSON, metrics) is the
one the ASGI handler gives. Otherwise we write the response head and the first line ourselves, and
the stream's body goes out as chunks framed once and shared (web.hub).

The task of one stream, in turn:
- own mode: writes what the hub handed back (`Follower.pending`), then reads with its own cursor
  and `send_all`s until it is at the head (or ends with its last line) — this is also where a
  stream with history starts;
- hub mode: the hub writes for it; the task only waits on the socket for the client to go away
  (EOF/reset/TCP_USER_TIMEOUT: the disconnect watcher) until the hub hands it back.
Every rule of web.events holds (first line, order, no gap/repeat, 410/503 last lines, limits by
peer address, a stalled client reset by TCP_USER_TIMEOUT with no timeout around a send).

After the last chunk the connection stays open as after any HTTP/1.1 response: it goes to
hypercorn with whatever the client sent meanwhile (pipelined requests), unless the client asked
for `Connection: close` or the worker is stopping.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import trio

from .app import MAX_TARGET, Request
from .errors import HTTPError
from .events import (CHUNK, COALESCE_BYTES, INSTANCE_CHECK_SECONDS, RESPONSE_HEADERS, collect_more,
                     first_line, instance_line, lapped_line, plan_stream, shutdown_line)
from common.http1.head import Head
from common.http1.tls import TlsStream
from common.http1.wire import CLIENT_CLOSE, LAST_CHUNK, DateHeader, frame, response_head

from .hub import Follower
from .responses import cors_headers

if TYPE_CHECKING:
    from .app import App

STREAM_PATH = "/ws/v1/events/stream"
HEADERS = [*RESPONSE_HEADERS, *cors_headers(("GET",))]
MAX_PIPELINED = 64 * 1024
"""What a client may send while its stream runs (pipelined requests, kept for hypercorn); a client
that sends more is closed."""

DECLINED = object()
"""`serve` sent nothing: the request goes to hypercorn as it came."""
CLOSE = None
"""`serve` is done and the connection is to be closed."""


def wants(app: "App", head: Head) -> bool:
    """Whether the direct path serves this request (the rest is hypercorn's, and so is a target
    over MAX_TARGET: the ASGI app answers it 414)."""
    return (app.hub is not None and head.method == "GET" and head.path == STREAM_PATH
            and not head.length and len(head.path) + len(head.query) <= MAX_TARGET)


async def serve(app: "App", stream: trio.abc.Stream, head: Head, extra: bytes,
                date: DateHeader, client: str):
    """Serve one stream request from `client` (the address the limits count: the peer, or the
    one a trusted proxy forwarded). Returns DECLINED, CLOSE, or the bytes the client sent after
    the request (the connection continues with hypercorn). `stream` is a trio SocketStream or a
    common.http1.tls.TlsStream."""
    t0 = time.perf_counter()
    host, port = client, stream.socket.getpeername()[1]
    req = Request({"query_string": head.query, "client": (host, port), "headers": list(head.headers)},
                  None, {})
    try:
        reader, first = plan_stream(app, req)
    except HTTPError:
        return DECLINED
    slot = app.segment.acquire_stream(host, app.settings.max_streams, app.settings.max_streams_per_host)
    if slot is None:
        return DECLINED
    assert app.hub is not None
    follower = Follower(stream.socket.fileno(), reader, reader.cursor(first),
                        stream if isinstance(stream, TlsStream) else None)
    received = bytearray(extra)
    reason = "error"
    try:
        app.metrics.stream_opened()
        app.metrics.stream_direct()
        await stream.send_all(response_head(200, HEADERS, date.value(),
                                            CLIENT_CLOSE if head.close else b"", chunked=True)
                              + frame(first_line(reader)))
        app.metrics.request("events_stream", 200, time.perf_counter() - t0)
        reason = "client_closed"
        reason = await _follow(app, stream, follower, received)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        app.hub.leave(follower)
        app.segment.release_stream(slot)
        app.metrics.stream_closed(reason)
    if reason == "client_closed" or head.close or app.stopping.is_set():
        return CLOSE
    return bytes(received)


async def _follow(app: "App", stream: trio.abc.Stream, f: Follower, received: bytearray) -> str:
    """Own mode and hub mode in turn until the stream ends; returns the close reason."""
    assert app.hub is not None
    next_check = 0.0
    while True:
        if f.pending or f.tls is not None:  # a TLS stream's pending bytes are in its backlog
            await stream.send_all(f.pending)
            f.pending = b""
        if f.end is not None:
            return f.end
        end, next_check = await _catch_up(app, stream, f, next_check)
        if end is not None:
            return end
        f.scope = trio.CancelScope()
        app.hub.join(f)
        with f.scope:
            while True:  # the disconnect watcher: wait for the client, not for events
                data = await stream.receive_some(65536)
                if not data:
                    return "client_closed"
                received += data
                if len(received) > MAX_PIPELINED:
                    return "client_closed"


async def _catch_up(app: "App", stream: trio.abc.Stream, f: Follower,
                    next_check: float) -> tuple[str | None, float]:
    """Read and send with the stream's own cursor until it is at the head (None) or has ended."""
    reader, cursor = f.reader, f.cursor
    while True:
        if app.stopping.is_set():
            await stream.send_all(frame(shutdown_line(cursor.next_id)) + LAST_CHUNK)
            return "shutdown", next_check
        now = trio.current_time()
        if now >= next_check:
            next_check = now + INSTANCE_CHECK_SECONDS
            if reader.instance_changed():
                await stream.send_all(frame(instance_line(reader, cursor.next_id)) + LAST_CHUNK)
                return "instance_changed", next_check
        got = app.chunks.poll(reader, cursor, CHUNK)
        if got.lost is not None:
            await stream.send_all(frame(lapped_line(got.lost)) + LAST_CHUNK)
            return "lapped", next_check
        if not got.count:
            return None, next_check
        body, size, lost = collect_more(app, reader, cursor, got)
        data = frame(body)
        if lost is not None:
            await stream.send_all(data + frame(lapped_line(lost)) + LAST_CHUNK)
            return "lapped", next_check
        await stream.send_all(data)
        pause = app.budget.spend(len(data), trio.current_time())
        if pause:
            await trio.sleep(pause)  # between sends, never around one (web.budget)
        if size < COALESCE_BYTES:
            return None, next_check
