"""One accepted connection while a direct path reads it: its buffer and the deadlines.

The next request head is waited for in two steps: up to `idle_timeout` (hypercorn's
keep_alive_timeout) for its first byte, then up to `Limits.head_timeout` for the rest; the body a
direct path takes, up to `Limits.body_timeout`. A client that misses a deadline is closed without
an answer (as hypercorn closes an idle connection). While it waits for a head the connection can
be closed by the worker's Gate to make room (limits.py). A connection from a trusted proxy is
counted for the client its first request names (forwarded.py; over that client's cap: `over_cap`).
"""

from __future__ import annotations

import trio

from .forwarded import TrustedProxies
from .head import FOREIGN, INCOMPLETE, Head, parse
from .limits import Gate

RECEIVE = 65536


class Connection:
    """The stream, what was received and not yet consumed (`buf`), and the requests served."""

    def __init__(self, stream: trio.abc.Stream, gate: Gate, idle_timeout: float, *,
                 peer: str = "unknown", proxies: TrustedProxies | None = None) -> None:
        """`peer`: the address the Gate counts this connection for; `proxies` when that is a
        trusted proxy (the Gate counts it uncapped until the first head names the client)."""
        self.stream = stream
        self.gate = gate
        self.idle_timeout = idle_timeout
        self.buf = b""
        self.served = 0
        self.peer = peer
        self.over_cap = False
        self._proxies = proxies

    async def next_head(self) -> Head | str | None:
        """The head at the front of the buffer (Head or FOREIGN), or None when the client went
        away, stayed idle, was too slow with its head, or its place was taken (Gate)."""
        request = parse(self.buf) if self.buf else INCOMPLETE
        if request is INCOMPLETE:
            request = await self._wait_head()
        if isinstance(request, Head) and self._proxies is not None:
            if not self._forwarded(request):
                return None
        return request

    def _forwarded(self, head: Head) -> bool:
        """Count a trusted proxy's connection for the client of its first request; False (and
        `over_cap`) when that client is at its cap."""
        proxies, self._proxies = self._proxies, None
        assert proxies is not None
        client = proxies.client(self.peer, head.headers)
        if not self.gate.move(self.peer, client):
            self.over_cap = True
            return False
        self.peer = client
        return True

    async def _wait_head(self) -> Head | str | None:
        request: Head | str | None = INCOMPLETE
        with trio.CancelScope() as scope, self.gate.waiting(scope):
            if not self.buf:
                with trio.move_on_after(self.idle_timeout):
                    await self._receive()
                if not self.buf:
                    return None  # gone, or idle for the keep-alive timeout
                request = parse(self.buf)
            scope.deadline = trio.current_time() + self.gate.limits.head_timeout
            while request is INCOMPLETE:
                if not await self._receive():
                    # hypercorn says what an unfinished head is worth (a 400), and closes
                    return FOREIGN if self.buf else None
                request = parse(self.buf)
        return None if request is INCOMPLETE else request

    async def receive_until(self, end: int) -> bool:
        """Until the buffer holds `end` bytes (a request's body); False if the client went away
        or did not send them within the body deadline."""
        with trio.move_on_after(self.gate.limits.body_timeout):
            while len(self.buf) < end:
                if not await self._receive():
                    return False
            return True
        return False

    def take(self, start: int, end: int) -> bytes:
        """The bytes [start, end) of the buffer; what comes after stays for the next request."""
        data, self.buf = self.buf[start:end], self.buf[end:]
        return data

    async def _receive(self) -> bool:
        data = await self.stream.receive_some(RECEIVE)
        self.buf += data
        return bool(data)
