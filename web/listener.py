"""A worker's connections: event streams go to the direct path, every other request to hypercorn.

The accept loop, the connection limits and the hand-over are common.http1's (listener.py). What is
the web's: the first request head of each connection is read (`direct_path`); a plain
`GET /ws/v1/events/stream` is served by web.direct on the raw socket; anything else — or a stream
request the direct path declines (a 400, a 414, a 503 over a limit: hypercorn answers it through
the ASGI app exactly as before) — is handed to hypercorn on the same connection with the bytes
already read put back in front, so keep-alive and pipelined requests behave as they always did. A
stream that ends on a keep-alive connection hands the connection to hypercorn the same way.
With `--certfile` all of it runs over TLS: the handshake first, in the connection's own task
(common.http1.tls); the direct path and the hub then write through the connection's TlsStream.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from common.http1.connection import Connection
from common.http1.head import FOREIGN
from common.http1.limits import Limits
from common.http1.listener import Listener, serve

from . import direct
from .errors import JSON_CONTENT_TYPE, error_body

if TYPE_CHECKING:
    import ssl

    from hypercorn.config import Config, Sockets

    from .app import App

log = logging.getLogger("ykshm.web")

BUSY = (JSON_CONTENT_TYPE, error_body(503, "Too many connections from this address or to this worker"))


def web_listener(app: "App", config: "Config", limits: Limits,
                 tls: "ssl.SSLContext | None" = None) -> Listener:
    """The web's connection handler: streams straight from the socket, the rest by hypercorn;
    with `tls`, both over TLS (common.http1.tls)."""
    listener: Listener

    async def direct_path(conn: Connection) -> bytes | None:
        head = await conn.next_head()
        if head is None:
            return None
        if app.options.hypercorn_only:
            return conn.buf
        if head is FOREIGN or not direct.wants(app, head):
            return conn.buf
        left = await direct.serve(app, conn.stream, head, conn.buf[head.body_start:],
                                  listener.date, conn.peer)
        if left is direct.CLOSE:
            return None
        return conn.buf if left is direct.DECLINED else left

    listener = Listener(app, config, direct_path, limits=limits, busy=BUSY, log=log, tls=tls,
                        proxies=app.proxies)
    return listener


async def worker_serve(app: "App", config: "Config", limits: Limits, *, sockets: "Sockets",
                       shutdown_trigger: Any, tls: "ssl.SSLContext | None" = None) -> None:
    """One worker: the app's lifespan, the accept loop, graceful shutdown on the trigger."""
    await serve(web_listener(app, config, limits, tls), sockets, lifespan=True,
                shutdown_trigger=shutdown_trigger)
