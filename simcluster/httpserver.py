"""A small HTTP/1.1 server on trio + h11: keep-alive, request bodies, long-lived chunked streams.

Why not hypercorn: a watch is a response that never ends by itself; we need to notice a client
that went away while nothing is being written (a concurrent read sees EOF and cancels the stream),
bound a stalled writer (`send_timeout`), and flush every event at once. That is a few lines on h11.
A connection that sends no whole request head within `idle_timeout` (90 s, as kube-apiserver) of
its last answer is closed, so idle or trickling clients do not pile up.

Plain requests (what `common.http1.head.parse` takes: HTTP/1.1, Content-Length bodies, one Host)
skip h11: they are parsed by that strict parser and answered with `h1wire`'s bytes, which are
h11's own; the first request of a connection that is not plain (HTTP/1.0, a chunked body,
`Expect`, an over-long head, bad syntax) hands the connection to h11 for good, so it is answered
(or refused) exactly as before. h11 had been ~24% of the CPU with three requests a pod in
`ykshm bench e2e` (issue 25), a cost only the simulator has: kube-apiserver (which KWOK, the
setting of YuniKorn's 833 pods/s, runs for real) parses HTTP in Go on every core.

Connections are capped as `ykshm web`'s and the cr-operator's are (`common.http1.limits.Gate`):
`max_per_peer` per client address (1024 by default: every component and process pod of `ykshm run`
connects from 127.0.0.1) and `max_connections` in all (4096), where the connection that has
waited longest for a request head makes room. One over a cap is answered 503 (a Status) and
closed at once; over TLS it is closed without a handshake (review 2026-11-28, N15).

Resource handling: `serve()` runs under the caller's nursery (`nursery.start(serve, ...)`), one
task per connection; cancelling that nursery closes every connection. Error handling: a handler
exception is the handler's job (the API layer turns everything into a Status); a broken socket
ends only its own connection.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

import h11
import orjson
import trio

from common.http1 import head as plainhead
from common.http1 import wire
from common.http1.limits import Gate, Limits

from . import h1wire
from .errors import status_object

log = logging.getLogger("ykshm.sim-cluster.http")

MAX_BODY = 16 * 1024 * 1024
SERVER_HEADER = b"ykshm-sim-cluster"


_reason = h1wire.reason


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes = b""
    peer: str = ""
    peer_cert: dict | None = None  # a verified TLS client certificate (`ssl.getpeercert()`)
    header_items: list[tuple[str, str]] = field(default_factory=list)  # every header, repeats kept
    user: Any = None  # the authenticated caller (`access.Access.admit`), when authentication is on

    def param(self, name: str, default: str = "") -> str:
        values = self.query.get(name)
        return values[-1] if values else default

    def header(self, name: str, default: str = "") -> str:
        return self.headers.get(name, default)


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class StreamResponse:
    """A chunked response: `writer(send)` awaits `send(chunk)` per chunk and returns at the end.

    The writer is cancelled when the client goes away.
    """

    status: int
    writer: Callable[[Callable[[bytes], Awaitable[None]]], Awaitable[None]]
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)


Handler = Callable[[Request], Awaitable[Response | StreamResponse]]


class _Closed(Exception):
    pass


_INTERNAL = (b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
             b'"message":"internal error","reason":"InternalError","code":500}')


def _plain_request(parsed: plainhead.Head, body: bytes, peer: str, peer_cert: dict | None
                   ) -> Request:
    """The Request of a fast-path head: the fields h11's path (`_read_request`) gives."""
    query = parsed.query.decode("latin-1")
    parts = urlsplit(f"{parsed.path}?{query}" if query else parsed.path)
    headers: dict[str, str] = {}
    items: list[tuple[str, str]] = []
    for name, value in parsed.headers:
        key, val = name.decode("latin-1"), value.decode("latin-1")
        items.append((key, val))
        headers[key] = f"{headers[key]},{val}" if key in headers and key == "accept" else val
    return Request(method=parsed.method.upper(), path=unquote(parts.path),
                   query=parse_qs(parts.query, keep_blank_values=True), headers=headers,
                   body=body, peer=peer, peer_cert=peer_cert, header_items=items)


LIMITS = Limits(max_connections=4096, max_per_peer=1024)
"""sim-cluster's connection caps (`--max-connections`, `--max-connections-per-peer`)."""
_BUSY = orjson.dumps(status_object(503, "ServiceUnavailable", "too many open connections; try again later"))
_REFUSAL = h1wire.head(503, [("content-type", "application/json"), ("content-length", str(len(_BUSY)))],
                       close=True) + _BUSY

IDLE_TIMEOUT = 90.0
"""Seconds a connection may wait for its next request (kube-apiserver's IdleTimeout, which is
http.DefaultTransport's keep-alive: clients drop theirs first)."""


class HttpServer:
    def __init__(self, handler: Handler, send_timeout: float = 30.0,
                 idle_timeout: float = IDLE_TIMEOUT, limits: Limits = LIMITS) -> None:
        self.handler = handler
        self.gate = Gate(limits)
        self.send_timeout = send_timeout
        self.idle_timeout = idle_timeout
        self.connections = 0

    async def serve(self, listeners: list[trio.SocketListener], *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            for listener in listeners:
                nursery.start_soon(self._accept_loop, listener, nursery)
            task_status.started()

    async def _accept_loop(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        async with listener:
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:  # EMFILE and friends: back off, keep serving
                    log.warning("accept failed: %s", exc)
                    await trio.sleep(0.1)
                    continue
                nursery.start_soon(self._connection, stream)

    async def _send(self, stream: trio.SocketStream, data: bytes | None) -> None:
        if not data:
            return
        with trio.move_on_after(self.send_timeout) as scope:
            await stream.send_all(data)
        if scope.cancelled_caught:
            raise _Closed("send timeout")

    async def _connection(self, stream: trio.SocketStream) -> None:
        try:
            peer = getattr(stream, "transport_stream", stream).socket.getpeername()
            peer_s = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
            host = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        except OSError:
            peer_s = host = "?"
        if not self.gate.admit(host):
            await _refuse(stream)
            return
        self.connections += 1
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
        try:
            peer_cert = await _handshake(stream)
            rest = await self._serve_plain(stream, peer_s, peer_cert)
            if not rest:
                return
            conn.receive_data(rest)   # h11 reads on from the first request that is not plain
            while True:
                request = await self._read_request(stream, conn, peer_s)
                if request is not None:
                    request.peer_cert = peer_cert
                if request is None:
                    return
                response = await self._handle(request)
                if isinstance(response, StreamResponse):
                    await self._stream(stream, conn, request, response)
                else:
                    await self._respond(stream, conn, request, response)
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    return
                try:
                    conn.start_next_cycle()
                except h11.LocalProtocolError:
                    return
        except (_Closed, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, ConnectionError):
            return
        except (h11.LocalProtocolError, h11.RemoteProtocolError) as exc:
            if isinstance(exc, h11.LocalProtocolError):
                log.warning("connection %s: %s", peer_s, exc)
                return
            try:
                await self._send(stream, conn.send(h11.Response(status_code=exc.error_status_hint, reason=_reason(exc.error_status_hint), headers=[
                    ("content-length", "0"), ("connection", "close")])))
            except Exception:
                pass
            return
        except Exception:  # one broken connection must never take the server down
            log.exception("connection %s failed", peer_s)
            return
        finally:
            self.connections -= 1
            self.gate.release(host)
            with trio.CancelScope(shield=True):
                with trio.move_on_after(1):
                    await stream.aclose()

    # -- the fast path: plain requests without h11 ------------------------------------------------
    async def _serve_plain(self, stream: trio.SocketStream, peer: str, peer_cert: dict | None
                           ) -> bytes:
        """Serve the requests `common.http1.head.parse` takes (plain HTTP/1.1, a Content-Length
        body at most MAX_BODY) and answer with `h1wire`'s h11-identical bytes. Returns the bytes
        of the first request that is not plain, for h11 to read on; b"" when the connection is
        done (closed, idle, `Connection: close`)."""
        buf = b""
        while True:
            parsed: plainhead.Head | str = plainhead.INCOMPLETE
            # an idle (or never finished) head: closed after idle_timeout, or to make room at the cap
            with trio.move_on_after(self.idle_timeout) as waiting, self.gate.waiting(waiting):
                while (parsed := plainhead.parse(buf)) is plainhead.INCOMPLETE:
                    data = await stream.receive_some(65536)
                    if not data:
                        return b""
                    buf += data
            if parsed is plainhead.INCOMPLETE:
                return b""
            if parsed is plainhead.FOREIGN or parsed.length > MAX_BODY:
                return buf
            end = parsed.body_start + parsed.length
            if len(buf) < end:          # the body's chunks joined once, not copied per read
                parts, have = [buf], len(buf)
                while have < end:
                    data = await stream.receive_some(max(65536, end - have))
                    if not data:
                        return b""
                    parts.append(data)
                    have += len(data)
                buf = b"".join(parts)
            request = _plain_request(parsed, buf[parsed.body_start:end], peer, peer_cert)
            buf = buf[end:]
            response = await self._handle(request)
            close = parsed.close or any(k.lower() == "connection" and "close" in v.lower()
                                        for k, v in response.headers)
            try:
                if isinstance(response, StreamResponse):
                    buf += await self._stream_plain(stream, response, close)
                else:
                    body = b"" if request.method == "HEAD" else response.body
                    await self._send(stream, h1wire.head(
                        response.status, self._headers(response.content_type, response.headers,
                                                       len(response.body)), close) + body)
            except ValueError as exc:   # a header h11 would refuse too: end the connection
                log.warning("connection %s: %s", peer, exc)
                return b""
            if close:
                return b""

    async def _stream_plain(self, stream: trio.SocketStream, response: StreamResponse,
                            close: bool) -> bytes:
        """A chunked response on the fast path; returns what the client sent meanwhile (a
        pipelined request). Raises _Closed when the client went away."""
        headers = self._headers(response.content_type, response.headers, None)
        await self._send(stream, h1wire.head(response.status, headers, close, chunked=True))
        pending = bytearray()

        def keep(data: bytes) -> bool:
            pending.extend(data)
            return True

        await self._body_while_watching(stream, response, wire.frame, keep)
        await self._send(stream, wire.LAST_CHUNK)
        return bytes(pending)

    async def _body_while_watching(self, stream: trio.SocketStream, response: StreamResponse,
                                   frame: Callable[[bytes], bytes], received: Callable[[bytes], bool]) -> None:
        """Run the response's writer (each chunk through `frame`) while a task reads what the
        client sends meanwhile (`received`, False: a protocol error). Raises _Closed when the
        client went away or broke the protocol: the writer is cancelled then."""
        gone = False
        async with trio.open_nursery() as nursery:

            async def watch_peer() -> None:
                nonlocal gone
                while True:
                    try:
                        data = await stream.receive_some(65536)
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        data = b""
                    if not data or not received(data):
                        gone = True
                        nursery.cancel_scope.cancel()
                        return

            async def send(chunk: bytes) -> None:
                if chunk:
                    await self._send(stream, frame(chunk))

            nursery.start_soon(watch_peer)
            try:
                await response.writer(send)
            except (_Closed, trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
                gone = True  # raised here, not inside the nursery's exception group
            finally:
                nursery.cancel_scope.cancel()
        if gone:
            raise _Closed("peer went away")

    async def _handle(self, request: Request) -> Response | StreamResponse:
        try:
            return await self.handler(request)
        except Exception:  # the handler has its own catch-all; this is a last resort
            log.exception("handler crashed on %s %s", request.method, request.path)
            return Response(500, _INTERNAL)

    # -- h11: every other request ------------------------------------------------------------------
    async def _next_event(self, stream: trio.SocketStream, conn: h11.Connection):
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                conn.receive_data(data)
                continue
            return event

    async def _read_request(self, stream: trio.SocketStream, conn: h11.Connection, peer: str) -> Request | None:
        event = None
        with trio.move_on_after(self.idle_timeout) as waiting, self.gate.waiting(waiting):  # as _serve_plain
            event = await self._next_event(stream, conn)
        if isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            return None
        if not isinstance(event, h11.Request):
            return None
        if conn.they_are_waiting_for_100_continue:
            await self._send(stream, conn.send(h11.InformationalResponse(status_code=100, headers=[])))
        body = bytearray()
        while True:
            ev = await self._next_event(stream, conn)
            if isinstance(ev, h11.Data):
                body += ev.data
                if len(body) > MAX_BODY:
                    await self._respond(stream, conn, None, Response(413, b'{"kind":"Status","apiVersion":"v1",'
                                        b'"metadata":{},"status":"Failure","message":"request entity too large",'
                                        b'"reason":"RequestEntityTooLarge","code":413}'))
                    raise _Closed("body too large")
            elif isinstance(ev, h11.EndOfMessage):
                break
            else:
                return None
        target = event.target.decode("latin-1")
        parts = urlsplit(target)
        headers: dict[str, str] = {}
        items: list[tuple[str, str]] = []
        for name, value in event.headers:
            key = name.decode("latin-1").lower()
            val = value.decode("latin-1")
            items.append((key, val))
            headers[key] = f"{headers[key]},{val}" if key in headers and key == "accept" else val
        return Request(
            method=event.method.decode("ascii").upper(),
            path=unquote(parts.path),
            query=parse_qs(parts.query, keep_blank_values=True),
            headers=headers,
            body=bytes(body),
            peer=peer,
            header_items=items,
        )

    def _headers(self, content_type: str, extra: list[tuple[str, str]], length: int | None) -> list[tuple[str, str]]:
        headers = [("content-type", content_type), ("server", SERVER_HEADER.decode()),
                   ("cache-control", "no-cache, private")]
        if length is not None:
            headers.append(("content-length", str(length)))
        headers.extend(extra)
        return headers

    async def _respond(self, stream: trio.SocketStream, conn: h11.Connection, request: Request | None,
                       response: Response) -> None:
        body = b"" if request is not None and request.method == "HEAD" else response.body
        out = conn.send(h11.Response(
            status_code=response.status, reason=_reason(response.status),
            headers=self._headers(response.content_type, response.headers, len(response.body)))) or b""
        if body:
            out += conn.send(h11.Data(data=body)) or b""
        out += conn.send(h11.EndOfMessage()) or b""
        await self._send(stream, out)  # one write per response

    async def _stream(self, stream: trio.SocketStream, conn: h11.Connection, request: Request,
                      response: StreamResponse) -> None:
        headers = self._headers(response.content_type, response.headers, None)
        if conn.their_http_version == b"1.0":
            headers.append(("connection", "close"))
        else:
            headers.append(("transfer-encoding", "chunked"))
        await self._send(stream, conn.send(h11.Response(status_code=response.status, reason=_reason(response.status),
                                                               headers=headers)))

        def feed(data: bytes) -> bool:
            try:
                conn.receive_data(data)  # a pipelined request: kept for the next cycle
            except h11.RemoteProtocolError:
                return False
            return True

        await self._body_while_watching(stream, response, lambda chunk: conn.send(h11.Data(data=chunk)), feed)
        await self._send(stream, conn.send(h11.EndOfMessage()))


async def _refuse(stream: trio.abc.Stream) -> None:
    """A connection over a cap: a 503 Status and close (over TLS: closed, no handshake spent on it)."""
    with trio.CancelScope(shield=True), trio.move_on_after(1):
        try:
            if not isinstance(stream, trio.SSLStream):
                await stream.send_all(_REFUSAL)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        await (stream.transport_stream if isinstance(stream, trio.SSLStream) else stream).aclose()


async def _handshake(stream: trio.abc.Stream) -> dict | None:
    """TLS (an `SSLStream` from `tlsserve`): finish the handshake within 10 s; the verified client
    certificate, if one was sent. A failed handshake raises BrokenResourceError (ends the connection)."""
    if not isinstance(stream, trio.SSLStream):
        return None
    with trio.fail_after(10):
        await stream.do_handshake()
    return stream.getpeercert() or None


async def open_listeners(host: str, port: int) -> list[trio.SocketListener]:
    """Bind host:port (port 0 picks a free port); OSError (port in use) propagates to the caller."""
    return await trio.open_tcp_listeners(port, host=host, backlog=1024)
