"""GET /ws/v1/events/batch and GET /ws/v1/events/stream, served straight from the ring.

Batch: the records are rendered in C (`read_range_json_parts`) with the envelope
`{"InstanceUUID","LowestID","HighestID","EventRecords"}` around them; more than BATCH_PART events
go out in pieces as they render (chunked transfer encoding, no Content-Length).

Stream — rules of one stream (the seed's "Stream new events directly from ring buffer"). Two
paths keep them: a plain HTTP/1.1 request on a new connection is served on the raw socket
(web.listener -> web.direct, web.hub: no hypercorn/h11 per chunk); the ASGI handler below serves
the rest (a stream asked on a connection hypercorn already holds, HTTP/1.0, a Redis replica).

1. The response starts with `{"InstanceUUID":..}`; then every event from the cursor's first id on,
   one per line, in id order. History (`count` past events, or everything from `start`) and live
   events come from the same cursor, so they cannot interleave, repeat or skip.
2. The cursor reads the ring in chunks of at most CHUNK events; what is ready at one wake goes out
   in one `send` (at most COALESCE_BYTES); nothing else is buffered per stream, so a stream costs
   the same memory whether it asked for 0 or 100,000 past events. Streams at the same position
   share one rendering of a chunk (web.fanout: render once per worker, send to many).
3. A stream ends with one last line `{"status_code":N,"message":M}` when it cannot continue:
   410 when its cursor was overwritten before it was read (it fell a whole ring behind — the line
   names the lost id range), 503 when the engine started a new instance (ids restart at 0) or the
   worker is shutting down. Then the response is finished and the connection closed.
4. A client that goes away (EOF, reset, or a stalled peer killed by TCP_USER_TIMEOUT on the
   listening socket) is seen by the disconnect watcher, which cancels the stream at once.
   `send` itself is never wrapped in a timeout (hypercorn loses later sends if it is).
5. maxStreams / maxStreamsPerHost are counted in the shared segment across all workers, keyed on
   the peer address of the connection (never the Host header); over a limit -> 503
   "Too many streaming connections" before any byte of the stream is sent.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson
import trio

from shm.reader import JsonPieces

from .errors import JSON_CONTENT_TYPE, BadRequest, InternalError, Unavailable, error_line, parse_uint64
from .settings import rest_response_size

if TYPE_CHECKING:
    from .app import App, Request

log = logging.getLogger("ykshm.web")

CHUNK = 256
"""Events per read from the ring and per `send` of a stream: what one stream holds in memory at most
(256 records of at most ~1.5 KiB of JSON each, typically ~75 KiB)."""

COALESCE_BYTES = 256 * 1024
"""A stream that is behind sends what it can read at once in one write, up to this many bytes."""

WAKE_SECONDS = 0.25
"""An idle stream re-checks instance change and shutdown at least this often."""

NDJSON = b"application/x-ndjson"


def _require_tracking(app: "App") -> None:
    if not app.settings.tracking_events_enabled or app.settings.ring_buffer_capacity == 0:
        raise InternalError("Event tracking is disabled")


def _count_param(req: "Request", default: int, *, zero_ok: bool) -> int:
    text = req.query.get("count")
    if text is None or text == "":
        return default
    value = parse_uint64("count", text)
    if value == 0 and not zero_ok:
        raise BadRequest('0 is not a valid value for "count"')
    return value


def _start_param(req: "Request") -> int | None:
    text = req.query.get("start")
    if text is None or text == "":
        return None
    return parse_uint64("start", text)


BATCH_PART = 2048
"""Events per piece of a batch answer. A batch of more goes out in pieces (chunked; gzipped with a
flush per piece, web.responses.GzipStream) rendered one after the other as they are sent: the
client reads and inflates the first piece while the worker renders and compresses the next, so the
two sides overlap instead of taking turns (YuniKorn's Go server streams a large answer in chunks
too). ~570 KB of JSON a piece: few enough sends that their cost stays small."""


async def batch(app: "App", req: "Request", send) -> None:
    """GET /ws/v1/events/batch?start=S&count=C."""
    _require_tracking(app)
    limit = rest_response_size(app.settings)
    count = min(_count_param(req, limit, zero_ok=False), limit)
    start = _start_param(req)
    reader = app.ring.get()
    bounds = reader.bounds()
    lowest, highest = (0, 0) if bounds is None else bounds
    head = b"".join((b'{"InstanceUUID":', orjson.dumps(reader.instance_uuid),
                     b',"LowestID":%d,"HighestID":%d,"EventRecords":' % (lowest, highest)))
    first = lowest if start is None else start
    if bounds is None or first < lowest or first > highest:
        await app.send_json(send, 200, head + b"null}")
        return
    pieces = JsonPieces()
    parts = reader.read_range_json_parts(first, count, BATCH_PART, head, b"}", pieces)
    if min(count, highest + 1 - first) <= BATCH_PART:
        await app.send_json(send, 200, b"".join(parts))
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", JSON_CONTENT_TYPE)]})
    for part in parts:   # the last piece sets pieces.done
        await send({"type": "http.response.body", "body": part, "more_body": not pieces.done})


class StreamPlan(NamedTuple):
    reader: Any
    first: int


def plan_stream(app: "App", req: "Request") -> StreamPlan:
    """The checks of a stream request before any byte is sent (400/500/503 as HTTPError), and
    the id it starts at. Shared by the ASGI handler and the direct path (web.direct)."""
    _require_tracking(app)
    count = _count_param(req, 0, zero_ok=True)
    start = _start_param(req)
    reader = app.ring.get()
    bounds = reader.bounds()
    next_id = 0 if bounds is None else bounds[1] + 1
    lowest = 0 if bounds is None else bounds[0]
    if start is not None:
        if start > next_id:
            raise BadRequest(
                f"start {start} is past the next event ID {next_id} of instance {reader.instance_uuid}"
            )
        return StreamPlan(reader, start)
    return StreamPlan(reader, max(lowest, next_id - count))


def first_line(reader) -> bytes:
    return b'{"InstanceUUID":' + orjson.dumps(reader.instance_uuid) + b"}\n"


RESPONSE_HEADERS = [
    (b"content-type", NDJSON),
    (b"cache-control", b"no-cache"),
    (b"x-content-type-options", b"nosniff"),
]


async def stream(app: "App", req: "Request", send) -> None:
    """GET /ws/v1/events/stream?count=N[&start=S] (NDJSON)."""
    reader, first = plan_stream(app, req)

    host = req.client_host
    slot = app.segment.acquire_stream(host, app.settings.max_streams, app.settings.max_streams_per_host)
    if slot is None:
        app.metrics.stream_rejected()
        raise Unavailable("Too many streaming connections")
    reason = "error"
    try:
        app.metrics.stream_opened()
        cursor = reader.cursor(first)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": list(RESPONSE_HEADERS),
            }
        )
        req.mark_started()
        await send(
            {
                "type": "http.response.body",
                "body": first_line(reader),
                "more_body": True,
            }
        )
        reason = "client_closed"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watch_disconnect, req, nursery.cancel_scope)
            reason = await _pump(app, reader, cursor, send)
            nursery.cancel_scope.cancel()
    finally:
        app.segment.release_stream(slot)
        app.metrics.stream_closed(reason)


async def _watch_disconnect(req: "Request", scope: trio.CancelScope) -> None:
    while True:
        message = await req.receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return


INSTANCE_CHECK_SECONDS = 0.1
"""How often a stream asks whether its ring was replaced (a stat of the segment file)."""


async def _pump(app: "App", reader, cursor, send) -> str:
    """Relay events until the stream has to end; returns the close reason."""
    next_check = 0.0
    while True:
        if app.stopping.is_set():
            await _end(send, shutdown_line(cursor.next_id))
            return "shutdown"
        now = trio.current_time()
        if now >= next_check:
            next_check = now + INSTANCE_CHECK_SECONDS
            if reader.instance_changed():
                await _end(send, instance_line(reader, cursor.next_id))
                return "instance_changed"
        got = app.chunks.poll(reader, cursor, CHUNK)
        if got.lost is not None:
            await _lapped(send, got.lost)
            return "lapped"
        if not got.count:
            await app.watcher.wait_beyond(cursor.next_id, WAKE_SECONDS)
            continue
        # One write per wake: what is ready now goes out in one send, up to COALESCE_BYTES.
        body, size, lost = collect_more(app, reader, cursor, got)
        await send({"type": "http.response.body", "body": body, "more_body": True})
        if lost is not None:
            await _lapped(send, lost)
            return "lapped"
        if size < COALESCE_BYTES:
            # At the head: wait for the watcher's next wake even if more was published meanwhile,
            # so a stream sends once per wake (with all that is new), not once per event.
            await app.watcher.wait_beyond(cursor.next_id, WAKE_SECONDS)


def collect_more(app: "App", reader, cursor, got) -> tuple[bytes, int, tuple[int, int] | None]:
    """`got` (a full chunk or less) and what else is ready now, up to COALESCE_BYTES:
    (lines, their size, the lost range if the cursor was overwritten on the way)."""
    parts = [got.lines]
    size = len(got.lines)
    while got.count == CHUNK and size < COALESCE_BYTES:
        got = app.chunks.poll(reader, cursor, CHUNK)
        if got.lost is not None:
            return b"".join(parts), size, got.lost
        if not got.count:
            break
        parts.append(got.lines)
        size += len(got.lines)
    return (parts[0] if len(parts) == 1 else b"".join(parts)), size, None


def lapped_line(lost: tuple[int, int]) -> bytes:
    """The 410 line for events the cursor can no longer read. The same line for both causes (a
    `start` below LowestID, or a reader a whole ring behind): the cursor cannot tell them apart."""
    lo, hi = lost
    return error_line(
        410,
        "Event stream closed: no longer retained (the start was below LowestID, or the client fell "
        f"a whole ring behind): lost events {lo}-{hi}; reconnect with start={hi + 1} or later",
    )


def shutdown_line(next_id: int) -> bytes:
    return error_line(503, "Event stream closed: the server is shutting down; reconnect with start="
                      f"{next_id}")


def instance_line(reader, next_id: int) -> bytes:
    return error_line(
        503,
        f"Event stream closed: the event ring of instance {reader.instance_uuid} was replaced "
        f"by a new instance or removed (engine restart); its event IDs end at {next_id - 1}; "
        "reconnect to follow the new instance",
    )


async def _lapped(send, lost: tuple[int, int]) -> None:
    await _end(send, lapped_line(lost))


async def _end(send, line: bytes) -> None:
    await send({"type": "http.response.body", "body": line, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
