"""The operator's API listener: the hot PE requests answered on the socket, the rest by hypercorn.

Every round, every PE of a region sends a checkpoint (or reset) PUT and may poll its
notifications: `rest.HOT`. Each accepted connection is read here first; while the request at the
front of the buffer is a plain hot one (httpwire.parse + rest.hot_route), it is answered directly
through `RegionApi.call` — the same handlers and refusals as the ASGI app — with the bytes h11
would write (httpwire.response). Keep-alive and pipelining follow: the next request is taken
from what is left of the buffer. The first request that is anything else (another route, a HEAD,
a chunked body, Expect: 100-continue, HTTP/1.0, a malformed or over-long head, a body over
MAX_BODY) hands the connection to hypercorn's own trio connection handler (`TCPServer`) with the
bytes already read put back in front (`ReplayStream`); hypercorn keeps it from then on, so every
such request is answered — or refused with h11's 400 — exactly as before.

hypercorn's connection rules held on the direct path: an idle connection (no whole head within
keep_alive_timeout) is closed; the keep_alive_max_requests-th response carries
`connection: close` and the connection ends; `Connection: close` from the client ends it after
the answer (but a close request with more already pipelined behind it goes to hypercorn, since
h11 answers that one with a 400). A connection handed to hypercorn starts its request count
afresh.

`serve_api` is hypercorn's trio `worker_serve` reduced to what the operator uses: plain-TCP
sockets, no lifespan (the app has nothing to start), stopped by cancellation.

Resource handling
    One nursery: the accept loops and a task per connection; each connection is closed by the
    task that owns it (or by hypercorn once handed over).

Error handling
    A broken or reset connection is closed quietly; any other exception is logged and costs that
    connection only, never the listener.
"""

from __future__ import annotations

import dataclasses
import logging
from functools import partial

import trio
from hypercorn.config import Config
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import repr_socket_addr, wrap_app

from common.replay import DateHeader, ReplayStream

from .httpwire import (CLIENT_CLOSE, FOREIGN, INCOMPLETE, SERVER_CLOSE, Request,
                       parse, response)
from .rest import MAX_BODY, RegionApi, hot_route

log = logging.getLogger("ykshm.cr-operator")

RECEIVE = 65536




class Connection:
    """One accepted connection on the direct path (`run`), until it closes or is handed over."""

    def __init__(self, listener: "Listener", stream: trio.SocketStream) -> None:
        self.listener = listener
        self.stream = stream
        self.buf = b""
        self.served = 0

    async def run(self) -> bytes | None:
        """Answer hot requests until the connection ends (None) or the request at the front is
        not ours: then the bytes received and not yet answered, for hypercorn."""
        api, config = self.listener.api, self.listener.config
        while True:
            request = await self._next_head(config.keep_alive_timeout)
            if request is None:
                return None
            if request is FOREIGN:
                return self.buf
            route = hot_route(request.method, request.path)
            if route is None or request.length > MAX_BODY:
                return self.buf
            end = request.body_start + request.length
            if not await self._receive_until(end):
                return None
            if request.close and len(self.buf) > end:
                return self.buf  # more after a close: h11 answers it 400, hypercorn's to say
            body, self.buf = self.buf[request.body_start:end], self.buf[end:]
            self.served += 1
            self.listener.stats.direct += 1
            answer = await api.call(*route, body, request.method, request.path)
            close = CLIENT_CLOSE if request.close else (
                SERVER_CLOSE if self.served >= config.keep_alive_max_requests else b"")
            await self.stream.send_all(response(answer.status, answer.response_headers(),
                                                answer.body, self.listener.date.value(), close))
            if close:
                return None

    async def _next_head(self, timeout: float) -> Request | str | None:
        """The next request head (Request or FOREIGN), or None when the client went away or
        stayed idle for `timeout` seconds (hypercorn's keep-alive timeout)."""
        request = parse(self.buf) if self.buf else INCOMPLETE
        with trio.move_on_after(timeout):
            while request is INCOMPLETE:
                data = await self.stream.receive_some(RECEIVE)
                if not data:
                    # hypercorn says what an unfinished head is worth (a 400), and closes
                    return FOREIGN if self.buf else None
                self.buf += data
                request = parse(self.buf)
        return None if request is INCOMPLETE else request

    async def _receive_until(self, end: int) -> bool:
        """Until the buffer holds `end` bytes (a request's body); False if the client went away."""
        while len(self.buf) < end:
            data = await self.stream.receive_some(RECEIVE)
            if not data:
                return False
            self.buf += data
        return True


@dataclasses.dataclass(slots=True)
class ListenerStats:
    """What the listener did since it started (tests and debugging read it)."""

    direct: int = 0
    """Requests answered on the direct path."""
    handed_over: int = 0
    """Connections handed to hypercorn."""


class Listener:
    """The operator's API on one or more sockets (`serve_api`): the connection handler."""

    def __init__(self, api: RegionApi, config: Config) -> None:
        if config.include_server_header or config.alt_svc_headers or not config.include_date_header:
            raise ValueError("the direct path writes hypercorn's response headers as "
                             "rest.hypercorn_config sets them: date, no server, no alt-svc")
        self.api = api
        self.config = config
        self.date = DateHeader()
        self.stats = ListenerStats()
        asgi = wrap_app(api, config.wsgi_max_body_size, "asgi")
        self._hypercorn = partial(TCPServer, asgi, config, WorkerContext(None), ConnectionState({}))

    async def handle(self, stream: trio.SocketStream) -> None:
        try:
            rest = await Connection(self, stream).run()
            if rest is None:
                await _close(stream)
            else:
                self.stats.handed_over += 1
                await self._hypercorn(ReplayStream(stream, rest))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        except Exception:  # a bug costs one connection, never the listener
            log.exception("cr-operator: bug while serving a connection")
        finally:
            await stream.aclose()  # closing twice is harmless; cancelled or not, it is closed


async def _close(stream: trio.SocketStream) -> None:
    """As hypercorn closes: EOF first, then the socket."""
    try:
        await stream.send_eof()
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    await stream.aclose()


async def serve_api(listener: Listener, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Listen on the listener's `config.bind` until cancelled; `started` with the URLs
    ("http://host:port")."""
    config = listener.config
    sockets = config.create_sockets()
    listeners, binds = [], []
    for sock in sockets.insecure_sockets:
        sock.listen(config.backlog)
        listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
        binds.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")
    for url in binds:
        await config.log.info(f"Running on {url} (CTRL + C to quit)")
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(trio.serve_listeners, listener.handle, listeners))
        task_status.started(binds)
