"""Handing a connection to hypercorn after we read its first bytes ourselves (listener.py)."""

from __future__ import annotations

import trio


class ReplayStream(trio.abc.HalfCloseableStream):
    """A socket stream with the bytes already read from it put back in front (for hypercorn).

    It has the stream's `socket` and no `do_handshake`, which is how hypercorn's TCPServer
    recognises a plain (not TLS) connection."""

    def __init__(self, stream: trio.SocketStream, prefix: bytes, on_eof=None) -> None:
        """`on_eof()` is called when the client's EOF is read: hypercorn's connection task lingers
        until its keep-alive timer ends even then, but the connection is over for the Gate."""
        self._stream = stream
        self._prefix = prefix
        self._on_eof = on_eof
        self.socket = stream.socket

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._prefix:
            data = self._prefix if max_bytes is None else self._prefix[:max_bytes]
            self._prefix = self._prefix[len(data):]
            await trio.lowlevel.checkpoint()
            return data
        data = await self._stream.receive_some(max_bytes)
        if not data and self._on_eof is not None:
            self._on_eof()
        return data

    async def send_all(self, data) -> None:
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()
