"""The operator's API listener: the hot PE requests answered on the socket, the rest by hypercorn.

Every round, every PE of a region sends a checkpoint (or reset) PUT and may poll its
notifications: `rest.HOT`. The accept loop, connection limits and hand-over are common.http1's
(listener.py); what is the operator's is `hot_requests`: while the request at the front of the
connection's buffer is a plain hot one (common.http1.head + rest.hot_route), it is answered
directly through `RegionApi.call` — the same handlers and refusals as the ASGI app — with the bytes
h11 would write (common.http1.wire). Keep-alive and pipelining follow: the next request is taken
from what is left of the buffer. The first request that is anything else (another route, a HEAD,
a chunked body, Expect: 100-continue, HTTP/1.0, a malformed or over-long head, a body over
MAX_BODY) hands the connection to hypercorn with the bytes already read put back in front;
hypercorn keeps it from then on, so every such request is answered — or refused with h11's 400 —
exactly as before.

hypercorn's connection rules held on the direct path: an idle connection is closed after
keep_alive_timeout, a head or body that trickles after the Limits deadlines; the
keep_alive_max_requests-th response carries `connection: close` and the connection ends;
`Connection: close` from the client ends it after the answer (but a close request with more
already pipelined behind it goes to hypercorn, since h11 answers that one with a 400). A
connection handed to hypercorn starts its request count afresh.
"""

from __future__ import annotations

import dataclasses
import logging
from functools import partial

import trio
from hypercorn.config import Config
from hypercorn.utils import repr_socket_addr

from common.http1 import listener as http1
from common.http1.connection import Connection
from common.http1.head import FOREIGN
from common.http1.limits import Limits
from common.http1.wire import CLIENT_CLOSE, SERVER_CLOSE, response

from .rest import MAX_BODY, JSON, RegionApi, hot_route

log = logging.getLogger("ykshm.cr-operator")

LIMITS = Limits()
"""The operator's connection limits by default (common.http1.limits; README names them)."""
STALL_TIMEOUT = 10.0
"""TCP_USER_TIMEOUT of the API socket: a PE that stops reading is reset after this (seconds)."""
BUSY = (JSON, b'{"status_code":503,"message":"too many connections","description":'
              b'"too many connections","reason":"tooManyConnections"}')


@dataclasses.dataclass(slots=True)
class ListenerStats:
    """What the listener did since it started (tests and debugging read it)."""

    direct: int = 0
    """Requests answered on the direct path."""
    handed_over: int = 0
    """Connections handed to hypercorn."""


class Listener:
    """The operator's API on one or more sockets (`serve_api`)."""

    def __init__(self, api: RegionApi, config: Config, limits: Limits = LIMITS) -> None:
        self.api = api
        self.config = config
        self.stats = ListenerStats()
        self.http = http1.Listener(api, config, self.hot_requests, limits=limits, busy=BUSY,
                                   log=log)

    async def hot_requests(self, conn: Connection) -> bytes | None:
        """Answer hot requests until the connection ends (None) or the request at the front is
        not ours: then the bytes received and not yet answered, for hypercorn."""
        while True:
            request = await conn.next_head()
            if request is None:
                return None
            if request is FOREIGN:
                return self._hand_over(conn)
            route = hot_route(request.method, request.path)
            if route is None or request.length > MAX_BODY:
                return self._hand_over(conn)
            end = request.body_start + request.length
            if not await conn.receive_until(end):
                return None
            if request.close and len(conn.buf) > end:
                return self._hand_over(conn)  # more after a close: h11 answers it 400
            body = conn.take(request.body_start, end)
            conn.served += 1
            self.stats.direct += 1
            answer = await self.api.call(*route, body, request.method, request.path, request.headers,
                                         conn.peer)
            close = CLIENT_CLOSE if request.close else (
                SERVER_CLOSE if conn.served >= self.config.keep_alive_max_requests else b"")
            await conn.stream.send_all(response(answer.status, answer.response_headers(),
                                                answer.body, self.http.date.value(), close))
            if close:
                return None

    def _hand_over(self, conn: Connection) -> bytes:
        self.stats.handed_over += 1
        return conn.buf


async def serve_api(listener: Listener, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Listen on the listener's `config.bind` until cancelled; `started` with the URLs
    ("http://host:port")."""
    config = listener.config
    sockets = config.create_sockets()
    http1.tune(sockets, STALL_TIMEOUT)
    binds = []
    for sock in sockets.insecure_sockets:
        sock.listen(config.backlog)
        binds.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")
    for url in binds:
        await config.log.info(f"Running on {url} (CTRL + C to quit)")
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(http1.serve, listener.http, sockets))
        task_status.started(binds)
