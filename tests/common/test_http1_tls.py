"""common.http1.tls: a closed TLS stream never writes again, whoever asks it to.

The admission webhook under a flood (tests/security/test_admission_webhook_limits.py) showed it:
a client that went away left ciphertext in its stream's backlog, the listener's `finally` closed
the stream a second time, and that flush went to the fd number the kernel had meanwhile given the
next accepted connection: a stranger's handshake got a record of another client's answer
(`SSL: UNEXPECTED_MESSAGE`), one connection in ten under load.
"""

from __future__ import annotations

import socket
import ssl

import pytest
import trio
import trustme

from common.http1.tls import TlsStream


def _contexts() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca = trustme.CA()
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


async def _connected() -> tuple[TlsStream, trio.SSLStream, socket.socket]:
    server_ctx, client_ctx = _contexts()
    a, b = socket.socketpair()
    server = TlsStream(trio.SocketStream(trio.socket.from_stdlib_socket(a)), server_ctx)
    client = trio.SSLStream(trio.SocketStream(trio.socket.from_stdlib_socket(b)), client_ctx,
                            server_hostname="127.0.0.1")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.do_handshake)
        nursery.start_soon(client.do_handshake)
    return server, client, a


def _socket_on_fd(fd: int) -> tuple[socket.socket, socket.socket, list[socket.socket]]:
    """A fresh connected pair one end of which got `fd` (the lowest free number is reused)."""
    spare: list[socket.socket] = []
    for _ in range(64):
        x, y = socket.socketpair()
        if fd in (x.fileno(), y.fileno()):
            return (x, y, spare) if x.fileno() == fd else (y, x, spare)
        spare += [x, y]
    raise AssertionError(f"fd {fd} was not reused")


async def test_a_stream_closed_with_ciphertext_left_writes_nothing_to_the_next_socket_on_its_fd():
    server, client, raw = await _connected()
    fd = raw.fileno()
    await client.transport_stream.aclose()              # the client is gone without reading
    with pytest.raises(trio.BrokenResourceError):
        await server.send_all(b"an answer for the client that left" * 1000)
    await server.aclose()                               # its flush fails too: the fd is freed
    reused, peer, spare = _socket_on_fd(fd)
    try:
        await server.aclose()                           # the listener's `finally` closes it again
        with pytest.raises(OSError):
            server.send_nowait(b"late")                 # the web hub's write, after the close
        peer.setblocking(False)
        with pytest.raises(BlockingIOError):
            peer.recv(65536)                            # nothing reached the stranger
    finally:
        for s in (reused, peer, *spare):
            s.close()


async def test_closing_twice_after_a_clean_close_is_harmless():
    server, client, _ = await _connected()
    await server.send_all(b"hello")
    assert await client.receive_some(5) == b"hello"
    await server.aclose()
    await server.aclose()
    assert await client.receive_some(5) == b""          # close_notify, once


async def test_a_write_after_the_clients_eof_is_a_broken_stream_not_an_ssl_error():
    """A client that left without close_notify (a probe that timed out): the answer written
    after its EOF is trio's BrokenResourceError, which hypercorn takes as a closed connection,
    not an `ssl.SSLEOFError` it logs as "Error in ASGI Framework" with a traceback."""
    server, client, _ = await _connected()
    await client.transport_stream.send_eof()            # its FIN, no close_notify
    assert await server.receive_some() == b""
    with pytest.raises(trio.BrokenResourceError):
        await server.send_all(b"HTTP/1.1 200 OK\r\n\r\nOK\r\n")
    await server.aclose()
    await client.transport_stream.aclose()
