"""A tiny HTTP/1.1 client on raw trio sockets, for what httpx cannot do in a test: choose the source
address (per-host limits), shrink the receive buffer, stop reading (stalled and lapped clients)."""

from __future__ import annotations

import socket

import orjson
import trio


class Closed(Exception):
    """The server ended the response or the connection (EOF or reset)."""


class RawStream:
    def __init__(self, port: int, path: str, *, local: str = "127.0.0.1", rcvbuf: int | None = None,
                 host_header: str = "localhost", headers: dict[str, str] | None = None) -> None:
        self.extra_headers = headers or {}
        self.port = port
        self.path = path
        self.local = local
        self.rcvbuf = rcvbuf
        self.host_header = host_header
        self.sock: trio.socket.SocketType | None = None
        self.buf = b""
        self.pending = b""
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body = b""
        self.done = False
        self.chunked = False

    async def connect(self) -> None:
        sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if self.rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)
        await sock.bind((self.local, 0))
        await sock.connect(("127.0.0.1", self.port))
        self.sock = sock

    async def send(self, data: bytes) -> None:
        await self.sock.send(data)

    async def recv(self) -> bytes:
        return await self.sock.recv(262144)

    async def open(self) -> "RawStream":
        await self.connect()
        extra = "".join(f"{k}: {v}\r\n" for k, v in self.extra_headers.items())
        request = (
            f"GET {self.path} HTTP/1.1\r\nHost: {self.host_header}\r\n{extra}Connection: close\r\n\r\n"
        ).encode("latin-1")
        await self.send(request)
        head = await self._read_until(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        self.status = int(lines[0].split()[1])
        for line in lines[1:]:
            if b":" in line:
                k, v = line.split(b":", 1)
                self.headers[k.strip().lower().decode()] = v.strip().decode()
        self.chunked = self.headers.get("transfer-encoding", "").lower() == "chunked"
        if "content-length" in self.headers:
            n = int(self.headers["content-length"])
            while len(self.buf) < n:
                await self._fill()
            self.body, self.buf = self.buf[:n], self.buf[n:]
            self.done = True
        return self

    async def _fill(self) -> None:
        try:
            data = await self.recv()
        except (ConnectionResetError, BrokenPipeError, OSError, trio.BrokenResourceError) as exc:
            raise Closed(str(exc)) from None
        if not data:
            raise Closed("EOF")
        self.buf += data

    async def _read_until(self, sep: bytes) -> bytes:
        while sep not in self.buf:
            await self._fill()
        head, self.buf = self.buf.split(sep, 1)
        return head

    async def _next_chunk(self) -> bytes | None:
        if self.done:
            return None
        if not self.chunked:
            if self.buf:
                data, self.buf = self.buf, b""
                return data
            try:
                await self._fill()
            except Closed:
                self.done = True
                return None
            data, self.buf = self.buf, b""
            return data
        size_line = await self._read_until(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            self.done = True
            return None
        while len(self.buf) < size + 2:
            await self._fill()
        data, self.buf = self.buf[:size], self.buf[size + 2 :]
        return data

    async def line(self) -> bytes:
        """The next NDJSON line (without newline); Closed when the response/connection ended."""
        while b"\n" not in self.pending:
            chunk = await self._next_chunk()
            if chunk is None:
                raise Closed("end of response")
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line

    async def obj(self) -> dict:
        return orjson.loads(await self.line())

    async def objs(self, n: int) -> list[dict]:
        return [await self.obj() for _ in range(n)]

    async def rest(self) -> list[dict]:
        """Every remaining line until the response ends."""
        out = []
        while True:
            try:
                out.append(await self.obj())
            except Closed:
                return out

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


async def open_stream(port: int, path: str, **kw) -> RawStream:
    return await RawStream(port, path, **kw).open()


class TlsRawStream(RawStream):
    """The same client over TLS (trio.SSLStream), trusting `ctx`'s CA."""

    def __init__(self, port: int, path: str, *, ctx, **kw) -> None:
        super().__init__(port, path, **kw)
        self.ctx = ctx
        self.tls: trio.SSLStream | None = None

    async def connect(self) -> None:
        await super().connect()
        self.tls = trio.SSLStream(trio.SocketStream(self.sock), self.ctx, server_hostname="127.0.0.1")
        await self.tls.do_handshake()

    async def send(self, data: bytes) -> None:
        await self.tls.send_all(data)

    async def recv(self) -> bytes:
        return await self.tls.receive_some(262144)
