"""TLS on the fast path: the server context, the handshake, and a TLS stream the hub can write to.

Why not trio's SSLStream: a stream's bytes go out from two places, its own task (`send_all`,
awaiting a slow client) and the web's hub (one non-blocking write per stream per round, no task
wake: web.hub). SSLStream can only be written by awaiting it. `TlsStream` is an `ssl.SSLObject`
over memory BIOs whose ciphertext waits in one `backlog`: `send_nowait` encrypts and writes what
the socket takes at once (the hub), `send_all` encrypts and waits until the backlog is on the wire
(the stream's task). Both consume the backlog from its head in one synchronous step, so records
never interleave, whoever writes; a stalled client keeps its ciphertext in its own backlog and
stalls nobody. Everything else is the plain path's: the handshake gets the head deadline and is
evictable by the Gate while it waits (limits.py), ALPN offers http/1.1 only, TLS 1.2 at least, no
renegotiation. `TlsReplayStream` hands a TLS connection to hypercorn (scheme `https`).

Errors: a certificate, key or CA file that cannot be used is a `TlsConfigError` naming the flag
and the file (one line, exit 2); a failed handshake costs that connection only.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import ssl
from collections.abc import Mapping

import trio

from .limits import Gate
from .replay import ReplayStream

RECEIVE = 65536
CLOSE_GRACE = 0.5
"""Seconds `aclose` waits for the close_notify to leave (it never waits on a stalled client)."""


class TlsConfigError(Exception):
    """A certificate, key or CA file that cannot be used; the message names the flag and file."""


DEFAULT_FLAGS = {"cert": "--certfile", "key": "--keyfile", "ca": "--ca-certs"}


def server_context(cert_file: str, key_file: str, ca_file: str | None = None, *,
                   require_client_cert: bool = False,
                   flags: Mapping[str, str] = DEFAULT_FLAGS) -> ssl.SSLContext:
    """The server context; with `ca_file` client certificates signed by it are verified (and with
    `require_client_cert` a client without one fails the handshake). `flags` name the settings in
    the errors (e.g. `{"cert": "service.web.certFile", ...}`)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_RENEGOTIATION
    ctx.set_alpn_protocols(["http/1.1"])
    for which, path in (("cert", cert_file), ("key", key_file)):
        if not os.path.isfile(path):
            raise TlsConfigError(f"{flags['cert' if which == 'cert' else 'key']} {path}: no such file")
    try:
        ctx.load_cert_chain(cert_file, key_file)
    except (ssl.SSLError, OSError) as exc:
        raise TlsConfigError(f"{flags['cert']} {cert_file} / {flags['key']} {key_file}: not a matching "
                             f"PEM certificate and key ({getattr(exc, 'reason', None) or exc})") from None
    if ca_file:
        try:
            ctx.load_verify_locations(cafile=ca_file)
        except FileNotFoundError:
            raise TlsConfigError(f"{flags['ca']} {ca_file}: no such file") from None
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise TlsConfigError(f"{flags['ca']} {ca_file}: no PEM CA certificate in it "
                                 f"({getattr(exc, 'reason', None) or exc})") from None
        ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    return ctx


@dataclasses.dataclass(frozen=True, slots=True)
class TlsFiles:
    """Where a server's certificate, key and client CAs are, and the names a user set them by
    (picklable: each spawned worker builds its own context from it)."""

    cert_file: str
    key_file: str
    ca_file: str = ""
    require_client_cert: bool = False
    flags: tuple[tuple[str, str], ...] = tuple(DEFAULT_FLAGS.items())

    def context(self) -> ssl.SSLContext:
        """The checked server context (TlsConfigError names the flag and file)."""
        return server_context(self.cert_file, self.key_file, self.ca_file or None,
                              require_client_cert=self.require_client_cert, flags=dict(self.flags))


class TlsStream(trio.abc.HalfCloseableStream):
    """A server-side TLS connection on a trio socket stream (see the module docstring)."""

    def __init__(self, transport: trio.SocketStream, ctx: ssl.SSLContext) -> None:
        self.transport_stream = transport
        self.socket = transport.socket
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = ctx.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self.backlog = bytearray()
        """Ciphertext not yet on the wire, oldest first (written from its head, then dropped)."""
        self._eof = False

    # --- the TLS engine ---------------------------------------------------------------------

    def _write(self) -> int:
        """Write the backlog's head; the fd is asked of the socket each time, never kept: once the
        socket is closed its number is the next accepted connection's, and a late flush (a second
        `aclose` after a failed one, as the listener's `finally` makes) wrote this connection's
        ciphertext into that stranger's handshake (it failed with UNEXPECTED_MESSAGE)."""
        fd = self.socket.fileno()
        if fd < 0:
            raise OSError(errno.EBADF, "TLS stream closed")
        return os.write(fd, self.backlog)

    def _queue(self) -> None:
        """Move what the TLS engine wrote to the end of the backlog."""
        if self._outgoing.pending:
            self.backlog += self._outgoing.read()

    async def _flush(self) -> None:
        """Until the backlog is on the wire (awaits a slow client; TCP_USER_TIMEOUT ends a stall).
        Each write takes the backlog's head as it is then, so a `send_nowait` meanwhile is safe."""
        await trio.lowlevel.checkpoint_if_cancelled()
        waited = False
        while self.backlog:
            try:
                n = self._write()
            except BlockingIOError:
                waited = True
                await trio.lowlevel.wait_writable(self.socket)
                continue
            except OSError as exc:
                raise trio.BrokenResourceError(str(exc)) from None
            del self.backlog[:n]
        if not waited:
            await trio.lowlevel.cancel_shielded_checkpoint()

    async def _receive(self) -> None:
        data = await self.transport_stream.receive_some(RECEIVE)
        if data:
            self._incoming.write(data)
        else:
            self._incoming.write_eof()

    async def do_handshake(self) -> None:
        """The TLS handshake (a second call does nothing; hypercorn makes one)."""
        while True:
            try:
                self._tls.do_handshake()
                self._queue()
                await self._flush()
                return
            except ssl.SSLWantReadError:
                self._queue()
                await self._flush()
                await self._receive()
            except (ssl.SSLError, ssl.CertificateError) as exc:
                raise trio.BrokenResourceError(f"TLS handshake failed: {exc}") from None

    def selected_alpn_protocol(self) -> str | None:
        return self._tls.selected_alpn_protocol()

    def getpeercert(self) -> dict | None:
        return self._tls.getpeercert()

    # --- the stream -------------------------------------------------------------------------

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        while True:
            try:
                data = self._tls.read(max_bytes or RECEIVE)
                self._queue()  # e.g. a key update answered
                return data
            except ssl.SSLWantReadError:
                self._queue()
                if self.backlog:
                    try:
                        self.send_nowait(b"")
                    except OSError:
                        return b""
                await self._receive()
            except ssl.SSLZeroReturnError:
                return b""  # the client's close_notify
            except (ssl.SSLEOFError, ssl.SSLSyscallError):
                return b""  # closed without close_notify: an EOF all the same
            except ssl.SSLError as exc:
                raise trio.BrokenResourceError(f"TLS error: {exc}") from None

    async def send_all(self, data) -> None:
        if data:
            try:
                self._tls.write(data)
            except ssl.SSLError as exc:   # the engine saw the client's EOF or an alert: gone
                raise trio.BrokenResourceError(f"TLS error: {exc}") from None
            self._queue()
        await self._flush()

    def send_nowait(self, data: bytes) -> bool:
        """Encrypt `data` and write what the socket takes now; True if nothing is left waiting.
        OSError when the connection is gone (as `os.write`)."""
        if data:
            self._tls.write(data)
            self._queue()
        if self.backlog:
            try:
                n = self._write()
            except BlockingIOError:
                n = 0
            del self.backlog[:n]
        return not self.backlog

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        """close_notify (TLS has no half close), then EOF on the socket if it left at once."""
        self._close_notify()
        try:
            if self.send_nowait(b""):
                await self.transport_stream.send_eof()
        except OSError:
            pass

    def _close_notify(self) -> None:
        if self._eof:
            return
        self._eof = True
        try:
            self._tls.unwrap()
        except ssl.SSLError:
            pass  # SSLWantRead: ours is written, the client's is not awaited
        self._queue()

    async def aclose(self) -> None:
        try:
            self._close_notify()
            with trio.move_on_after(CLOSE_GRACE):
                await self._flush()
        except (trio.BrokenResourceError, OSError):
            pass
        finally:
            self.backlog.clear()  # what did not leave in the grace never will
            await self.transport_stream.aclose()


class TlsReplayStream(ReplayStream):
    """A TLS connection handed to hypercorn with the plaintext already read put back in front:
    hypercorn's TCPServer recognises TLS by `do_handshake` and finds the peer on `transport_stream`."""

    def __init__(self, stream: TlsStream, prefix: bytes, on_eof=None) -> None:
        super().__init__(stream, prefix, on_eof)  # type: ignore[arg-type]
        self.transport_stream = stream.transport_stream

    async def do_handshake(self) -> None:
        await self._stream.do_handshake()  # type: ignore[union-attr]

    def selected_alpn_protocol(self) -> str | None:
        return self._stream.selected_alpn_protocol()  # type: ignore[union-attr]


async def accept(stream: trio.SocketStream, ctx: ssl.SSLContext, gate: Gate) -> TlsStream | None:
    """The TLS connection once its handshake is done within the head deadline, or None (the
    client failed, stalled, or the Gate took its place): the caller closes `stream` then."""
    tls = TlsStream(stream, ctx)
    with trio.CancelScope(deadline=trio.current_time() + gate.limits.head_timeout) as scope, \
            gate.waiting(scope):
        try:
            await tls.do_handshake()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return None
        return tls
    return None
