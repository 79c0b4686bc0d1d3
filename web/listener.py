"""A worker's accept loop: event streams go to the direct path, every other request to hypercorn.

Each accepted connection's request head is read here first (`first_head`). A plain
`GET /ws/v1/events/stream` is served by web.direct on the raw socket; anything else — or a stream
request the direct path declines (a 400, a 503 over a limit: hypercorn answers it through the
ASGI app exactly as before) — is handed to hypercorn's own trio connection handler (`TCPServer`)
on the same connection, with the bytes already read put back in front (`ReplayStream`), so
keep-alive and pipelined requests behave as they always did. A stream that ends on a keep-alive
connection hands the connection to hypercorn the same way.

`worker_serve` is hypercorn's trio `worker_serve` (lifespan, graceful shutdown, plain-TCP sockets
only — `ykshm web` binds no TLS or QUIC socket) with this dispatcher as the connection handler.
"""

from __future__ import annotations

import logging
import sys
from functools import partial
from typing import TYPE_CHECKING, Any

import trio
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.statsd import StatsdLogger
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import ShutdownError, raise_shutdown

from common.replay import DateHeader, ReplayStream

from . import direct
from .httpwire import HEAD_END, parse_head

if TYPE_CHECKING:
    from hypercorn.config import Config, Sockets

    from .app import App

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

log = logging.getLogger("ykshm.web")

MAX_HEAD = 16 * 1024
"""A longer request head is not a stream request we serve ourselves (hypercorn answers it)."""




async def first_head(stream: trio.SocketStream, timeout: float) -> bytes:
    """What the client sent, up to the end of its first request head (or MAX_HEAD, EOF, or
    `timeout` seconds of waiting — hypercorn's keep-alive timeout for a silent connection)."""
    buf = b""
    with trio.move_on_after(timeout):
        while HEAD_END not in buf and len(buf) <= MAX_HEAD:
            data = await stream.receive_some(65536)
            if not data:
                break
            buf += data
    return buf


class Waiting:
    """Connections still waiting for their first request head: at shutdown they are closed at
    once (hypercorn closes its idle keep-alive connections the same way), not after the grace."""

    def __init__(self) -> None:
        self.scopes: set[trio.CancelScope] = set()
        self.closing = False

    async def first_head(self, stream: trio.SocketStream, timeout: float) -> bytes:
        if self.closing:
            return b""
        with trio.CancelScope() as scope:
            self.scopes.add(scope)
            try:
                return await first_head(stream, timeout)
            finally:
                self.scopes.discard(scope)
        return b""

    def close_all(self) -> None:
        self.closing = True
        for scope in self.scopes:
            scope.cancel()


async def handle(app: "App", hypercorn, date: DateHeader, timeout: float, waiting: Waiting,
                 stream: trio.SocketStream) -> None:
    """One accepted connection."""
    try:
        buf = await waiting.first_head(stream, timeout)
        if not buf:
            await stream.aclose()
            return
        end = buf.find(HEAD_END)
        head = parse_head(buf[:end]) if 0 <= end <= MAX_HEAD else None
        if head is not None and direct.wants(app, head):
            left = await direct.serve(app, stream, head, buf[end + 4:], date)
            if left is direct.CLOSE:
                await stream.aclose()
                return
            if left is not direct.DECLINED:
                buf = left
        await hypercorn(ReplayStream(stream, buf))
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        await stream.aclose()
    except Exception:  # a bug must cost one connection, never the worker
        log.exception("web: bug while serving a connection")
        await stream.aclose()


async def worker_serve(asgi: Any, app: "App", config: "Config", *, sockets: "Sockets",
                       shutdown_trigger) -> None:
    """hypercorn.trio.run.worker_serve with `handle` as the connection handler."""
    config.set_statsd_logger_class(StatsdLogger)
    lifespan_state: dict = {}
    lifespan = Lifespan(asgi, config, lifespan_state)
    context = WorkerContext(None)
    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()
        async with trio.open_nursery() as server_nursery:
            listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(sock))
                         for sock in sockets.insecure_sockets]
            hypercorn = partial(TCPServer, asgi, config, context, ConnectionState(lifespan_state.copy()))
            waiting = Waiting()
            handler = partial(handle, app, hypercorn, DateHeader(), config.keep_alive_timeout, waiting)
            try:
                async with trio.open_nursery(strict_exception_groups=True) as nursery:
                    nursery.start_soon(raise_shutdown, shutdown_trigger)
                    nursery.start_soon(raise_shutdown, context.terminate.wait)
                    nursery.start_soon(partial(trio.serve_listeners, handler, listeners,
                                               handler_nursery=server_nursery))
                    await trio.sleep_forever()
            except BaseExceptionGroup as error:
                _, other_errors = error.split((ShutdownError, KeyboardInterrupt))
                if other_errors is not None:
                    raise other_errors
            finally:
                await context.terminated.set()
                waiting.close_all()
                server_nursery.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()
