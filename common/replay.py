"""Handing a connection to hypercorn after we read its first bytes ourselves.

Two of our servers answer some requests on the raw socket and give every other connection to
hypercorn's trio `TCPServer` (the web's event streams, `web.listener`; the cr-operator's PE
reports, `streams.regions.listener`). Both need the same two pieces, kept here once.
"""

from __future__ import annotations

import time
from wsgiref.handlers import format_date_time

import trio


class ReplayStream(trio.abc.HalfCloseableStream):
    """A socket stream with the bytes already read from it put back in front (for hypercorn).

    It has the stream's `socket` and no `do_handshake`, which is how hypercorn's TCPServer
    recognises a plain (not TLS) connection."""

    def __init__(self, stream: trio.SocketStream, prefix: bytes) -> None:
        self._stream = stream
        self._prefix = prefix
        self.socket = stream.socket

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._prefix:
            data = self._prefix if max_bytes is None else self._prefix[:max_bytes]
            self._prefix = self._prefix[len(data):]
            await trio.lowlevel.checkpoint()
            return data
        return await self._stream.receive_some(max_bytes)

    async def send_all(self, data) -> None:
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()


class DateHeader:
    """The `date` header value, formatted once per second (hypercorn formats it per response)."""

    def __init__(self) -> None:
        self._second = -1
        self._value = b""

    def value(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._value = format_date_time(now).encode("ascii")
        return self._value
