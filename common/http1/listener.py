"""A worker's accept loop: each connection read by a direct path first, then given to hypercorn.

Two servers answer their hot requests on the raw socket (the web's event streams, `web.direct`;
the cr-operator's PE reports, `streams.regions.listener`) and give every other request to
hypercorn's own trio connection handler (`TCPServer`) on the same connection, with the bytes
already read put back in front (`ReplayStream`), so keep-alive, pipelining and every refusal
behave as with hypercorn alone. A direct path is `async def direct(conn) -> bytes | None`: None
when the connection is to be closed, else the bytes for hypercorn.

Every accepted connection passes the worker's Gate first (limits.py): over the cap per peer or per
worker it is answered 503 and closed (a TLS listener closes it without an answer: a 503 before the
handshake is no use to a TLS client, and a handshake is what a flood wants to cost us). With a TLS
context (`tls=`) the handshake runs next, in the connection's own task under the head deadline
(tls.py), and the direct path and hypercorn both get the decrypted stream. A trusted proxy's
connection is counted for the client its first request names (`proxies=`, forwarded.py).

`serve` is hypercorn's trio `worker_serve` (lifespan when asked, graceful shutdown, plain-TCP
sockets only: TLS is ours, above) with `Listener.handle` as the handler; it relies on hypercorn
internals (TCPServer, WorkerContext, Lifespan), hence the pinned minor versions in pyproject.toml.

Resource handling
    One nursery owns the accept loops and a task per connection; each connection is closed by
    the task that owns it (or by hypercorn once handed over). At shutdown, connections waiting
    for a head close at once, the rest get config.graceful_timeout.

Error handling
    A broken or reset connection is closed quietly; any other exception is logged and costs that
    connection only, never the worker.
"""

from __future__ import annotations

import logging
import socket
import ssl
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import trio
from hypercorn.config import Config, Sockets
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.statsd import StatsdLogger
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import ShutdownError, raise_shutdown, wrap_app

from .connection import Connection
from .forwarded import TrustedProxies
from .limits import Gate, Limits
from .replay import ReplayStream
from .tls import TlsReplayStream, TlsStream, accept
from .wire import SERVER_CLOSE, DateHeader, response

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

TCP_USER_TIMEOUT = getattr(socket, "TCP_USER_TIMEOUT", 18)

DirectPath = Callable[[Connection], Awaitable["bytes | None"]]
GONE = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class Listener:
    """One worker's connection handler: the Gate, the direct path, the hand-over to hypercorn."""

    def __init__(self, asgi: Any, config: Config, direct: DirectPath, *, limits: Limits,
                 busy: tuple[bytes, bytes], log: logging.Logger,
                 tls: ssl.SSLContext | Callable[[], ssl.SSLContext] | None = None,
                 proxies: TrustedProxies = TrustedProxies()) -> None:
        """`busy`: (content type, body) of the 503 a connection over a cap is answered; `tls`:
        serve TLS with this context, or with the one this callable gives at each connection (a
        certificate rotated by swapping contexts); `proxies`: whose X-Forwarded-For names the client."""
        if config.include_server_header or config.alt_svc_headers or not config.include_date_header:
            raise ValueError("the direct path writes hypercorn's response headers as configured "
                             "here: date, no server, no alt-svc")
        limits.check()
        self.asgi = wrap_app(asgi, config.wsgi_max_body_size, "asgi")
        self.config = config
        self.direct = direct
        self.gate = Gate(limits)
        self.date = DateHeader()
        self.context = WorkerContext(None)
        self.handed_over = 0
        self.tls = tls
        self.proxies = proxies
        self._busy = busy
        self._log = log
        self.lifespan_state({})

    def lifespan_state(self, state: dict) -> None:
        """What the app's lifespan startup left for its requests (ASGI `state`)."""
        self._hypercorn = partial(TCPServer, self.asgi, self.config, self.context,
                                  ConnectionState(state.copy()))

    async def handle(self, stream: trio.SocketStream) -> None:
        try:
            peer = str(stream.socket.getpeername()[0])
        except (OSError, IndexError):
            peer = "unknown"
        proxied = self.proxies.trusts(peer)
        if not self.gate.admit(peer, capped=not proxied):
            await (close(stream) if self.tls is not None else self._refuse(stream))
            return
        conn = Connection(stream, self.gate, self.config.keep_alive_timeout, peer=peer,
                          proxies=self.proxies if proxied else None)
        counted = True

        def release() -> None:  # once: at the client's EOF under hypercorn, or at the end
            nonlocal counted
            if counted:
                counted = False
                self.gate.release(conn.peer)

        try:
            if self.tls is not None:
                context = self.tls() if callable(self.tls) else self.tls
                conn.stream = await accept(stream, context, self.gate)
                if conn.stream is None:
                    return
            rest = await self.direct(conn)
            if conn.over_cap:
                await self._refuse(conn.stream)
            elif rest is None:
                await close(conn.stream)
            else:
                self.handed_over += 1
                await self._hypercorn(replay(conn.stream, rest, release))
        except GONE:
            pass
        except Exception:  # a bug costs one connection, never the worker
            self._log.exception("bug while serving a connection")
        finally:
            release()
            await (conn.stream or stream).aclose()  # closing twice is harmless

    async def _refuse(self, stream: trio.abc.HalfCloseableStream) -> None:
        """503 on a fresh connection (its send buffer is empty: this write does not wait)."""
        content_type, body = self._busy
        headers = [(b"content-type", content_type), (b"content-length", b"%d" % len(body))]
        try:
            await stream.send_all(response(503, headers, body, self.date.value(), SERVER_CLOSE))
            await close(stream)
        except GONE:
            await stream.aclose()


def replay(stream: trio.abc.HalfCloseableStream, rest: bytes, on_eof=None) -> ReplayStream:
    """The stream for hypercorn, with `rest` (already read) put back in front."""
    if isinstance(stream, TlsStream):
        return TlsReplayStream(stream, rest, on_eof)
    return ReplayStream(stream, rest, on_eof)  # type: ignore[arg-type]


def tune(sockets: Sockets, stall_timeout: float) -> None:
    """TCP_NODELAY and TCP_USER_TIMEOUT on the listening sockets (accepted ones inherit them): a
    peer that stops reading is reset by the kernel after `stall_timeout` seconds of unacknowledged
    data, which ends a blocked send — no timeout is ever put around a send. hypercorn sets
    TCP_NODELAY only on sockets it binds itself; an fd://N socket from systemd needs it too, or
    Nagle holds back small writes (~40 ms tails)."""
    for sock in sockets.insecure_sockets:
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            continue
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if stall_timeout > 0:
            sock.setsockopt(socket.IPPROTO_TCP, TCP_USER_TIMEOUT, int(stall_timeout * 1000))


async def close(stream: trio.abc.HalfCloseableStream) -> None:
    """As hypercorn closes: EOF first, then the socket."""
    try:
        await stream.send_eof()
    except GONE:
        pass
    await stream.aclose()


async def serve(listener: Listener, sockets: Sockets, *, lifespan: bool = False,
                shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
                task_status=trio.TASK_STATUS_IGNORED) -> None:
    """hypercorn.trio.run.worker_serve with `listener.handle` as the connection handler, on the
    sockets' listening plain-TCP sockets; ends on `shutdown_trigger` or by cancellation."""
    config = listener.config
    config.set_statsd_logger_class(StatsdLogger)
    state: dict = {}
    span = Lifespan(listener.asgi, config, state) if lifespan else None
    async with trio.open_nursery() as lifespan_nursery:
        if span is not None:
            await lifespan_nursery.start(span.handle_lifespan)
            await span.wait_for_startup()
            listener.lifespan_state(state)
        async with trio.open_nursery() as server_nursery:
            listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(sock))
                         for sock in sockets.insecure_sockets]
            try:
                async with trio.open_nursery(strict_exception_groups=True) as nursery:
                    if shutdown_trigger is not None:
                        nursery.start_soon(raise_shutdown, shutdown_trigger)
                    nursery.start_soon(raise_shutdown, listener.context.terminate.wait)
                    await nursery.start(partial(trio.serve_listeners, listener.handle, listeners,
                                                handler_nursery=server_nursery))
                    task_status.started()
                    await trio.sleep_forever()
            except BaseExceptionGroup as error:
                _, other_errors = error.split((ShutdownError, KeyboardInterrupt))
                if other_errors is not None:
                    raise other_errors
            finally:
                listener.gate.close_waiting()
                server_nursery.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
                await listener.context.terminated.set()
        if span is not None:
            await span.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()
