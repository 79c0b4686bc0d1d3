"""The direct stream path (web.listener, web.direct, web.hub) in a real `ykshm web`: streams are
served on the raw socket, everything else on the same connections is still hypercorn's."""

from __future__ import annotations

import re
import signal
import socket

import httpx
import trio

from rawhttp import open_stream
from webharness import Ring, WebServer


def direct_streams(web) -> float:
    text = httpx.get(web.url + "/ws/v1/metrics", timeout=5).text
    return float(re.search(r"^ykshm_web_streams_direct_total (\S+)$", text, re.M).group(1))


async def _read_until(sock: trio.socket.SocketType, buf: bytes, marker: bytes) -> bytes:
    with trio.fail_after(10):
        while marker not in buf:
            data = await sock.recv(65536)
            assert data, f"EOF before {marker!r}: {buf[-300:]!r}"
            buf += data
    return buf


async def _connect(port: int) -> trio.socket.SocketType:
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    await sock.connect(("127.0.0.1", port))
    return sock


async def test_a_plain_stream_request_is_served_directly_and_http10_by_hypercorn(web):
    before = direct_streams(web)
    web.ring.publish(3)
    s = await open_stream(web.port, "/ws/v1/events/stream?count=2")
    try:
        assert s.status == 200 and s.headers["transfer-encoding"] == "chunked"
        assert s.headers["access-control-allow-origin"] == "*"
        await s.obj()
        assert [e["id"] for e in await s.objs(2)] == [1, 2]
        web.ring.publish(2, start=3)
        assert [e["id"] for e in await s.objs(2)] == [3, 4]
    finally:
        s.close()
    assert direct_streams(web) == before + 1
    # HTTP/1.0 has no chunked coding: hypercorn streams it until the connection closes
    sock = await _connect(web.port)
    try:
        await sock.send(b"GET /ws/v1/events/stream?count=1 HTTP/1.0\r\nHost: x\r\n\r\n")
        buf = await _read_until(sock, b"", b'"id":4')
        assert buf.startswith(b"HTTP/1.1 200 ") and b"Transfer-Encoding" not in buf
    finally:
        sock.close()
    assert direct_streams(web) == before + 1


async def test_keep_alive_and_pipelined_requests_are_answered_by_hypercorn(web):
    sock = await _connect(web.port)
    try:
        await sock.send(b"GET /ws/v1/events/batch HTTP/1.1\r\nHost: x\r\n\r\n")
        buf = await _read_until(sock, b"", b'"EventRecords":')
        buf = await _read_until(sock, buf, b"}")
        # two more on the same connection in one send: both answered, in order
        await sock.send(b"GET /ws/v1/scheduler/healthcheck HTTP/1.1\r\nHost: x\r\n\r\n"
                        b"GET /ws/v1/nope HTTP/1.1\r\nHost: x\r\n\r\n")
        buf = await _read_until(sock, buf, b"HTTP/1.1 404 ")
        assert buf.count(b"HTTP/1.1 200 ") == 2
        assert buf.index(b'"Healthy"') < buf.index(b"HTTP/1.1 404 ")
    finally:
        sock.close()


async def test_after_a_direct_stream_ends_the_connection_goes_on_with_hypercorn(web):
    """A stream that ends (here at once: its start was overwritten) on a keep-alive connection,
    with the next request pipelined behind it: the 410 line, the last chunk, then the answer."""
    web.ring.publish(250)  # ids 150..249 retained
    before = direct_streams(web)
    sock = await _connect(web.port)
    try:
        await sock.send(b"GET /ws/v1/events/stream?start=120 HTTP/1.1\r\nHost: x\r\n\r\n"
                        b"GET /ws/v1/events/batch?count=1 HTTP/1.1\r\nHost: x\r\n\r\n")
        buf = await _read_until(sock, b"", b'"EventRecords":')
        buf = await _read_until(sock, buf, b"]}")
        stream, rest = buf.split(b"0\r\n\r\n", 1)
        assert b'"status_code":410' in stream and b"lost events 120-149" in stream
        assert rest.startswith(b"HTTP/1.1 200 ") and b'"HighestID":249' in rest
        # and the connection is still open for more
        await sock.send(b"GET /ws/v1/events/batch?count=1 HTTP/1.1\r\nHost: x\r\n\r\n")
        more = await _read_until(sock, b"", b"]}")
        assert more.startswith(b"HTTP/1.1 200 ")
    finally:
        sock.close()
    assert direct_streams(web) == before + 1


async def test_a_stream_request_after_another_request_is_still_served(web):
    """Keep-alive: once hypercorn has the connection, it serves a stream through the ASGI app."""
    sock = await _connect(web.port)
    try:
        await sock.send(b"GET /ws/v1/scheduler/healthcheck HTTP/1.1\r\nHost: x\r\n\r\n"
                        b"GET /ws/v1/events/stream HTTP/1.1\r\nHost: x\r\n\r\n")
        buf = await _read_until(sock, b"", b'{"InstanceUUID":')
        buf = await _read_until(sock, buf, b"}\n")
        web.ring.publish(1)
        buf = await _read_until(sock, buf, b'"id":0')
    finally:
        sock.close()


async def test_sigterm_ends_direct_streams_with_the_shutdown_line(name_factory):
    name = name_factory()
    ring = Ring(name, 1000)
    server = WebServer(name, workers=1)
    streams = []
    try:
        ring.publish(2)
        streams += [await open_stream(server.port, "/ws/v1/events/stream") for _ in range(3)]
        for s in streams:
            await s.obj()
        ring.publish(1, start=2)
        for s in streams:
            assert (await s.obj())["id"] == 2
        idle = await _connect(server.port)  # connected, no request yet
        streams.append(idle)
        server.proc.send_signal(signal.SIGTERM)
        with trio.fail_after(10):
            assert await idle.recv(100) == b""  # closed, not left waiting for a request
        streams.pop()
        for s in streams:
            with trio.fail_after(10):
                rest = await s.rest()
            assert rest == [{"status_code": 503,
                             "message": "Event stream closed: the server is shutting down; reconnect with start=3"}]
        with trio.fail_after(15):
            while server.proc.poll() is None:
                await trio.sleep(0.05)
        assert server.proc.returncode == 0
    finally:
        for s in streams:
            s.close()
        server.stop()
        ring.close()


def test_metrics_name_the_direct_streams(web):
    text = httpx.get(web.url + "/ws/v1/metrics", timeout=5).text
    assert "# HELP ykshm_web_streams_direct_total Event streams served on the raw socket" in text


async def test_streams_served_by_hypercorn_keep_their_last_lines(web):
    """The ASGI stream handler (a stream asked on a connection hypercorn holds) still ends with
    the 410 line for lost events and the 503 line for a new engine instance."""
    web.ring.publish(250)  # ids 150..249 retained
    before = direct_streams(web)
    sock = await _connect(web.port)
    try:
        await sock.send(b"GET /ws/v1/scheduler/healthcheck HTTP/1.1\r\nHost: x\r\n\r\n"
                        b"GET /ws/v1/events/stream?start=120 HTTP/1.1\r\nHost: x\r\n\r\n")
        buf = await _read_until(sock, b"", b"0\r\n\r\n")
        assert b"lost events 120-149; reconnect with start=150" in buf
        await sock.send(b"GET /ws/v1/events/stream?count=1 HTTP/1.1\r\nHost: x\r\n\r\n")
        buf = await _read_until(sock, b"", b'"id":249')
        web.ring.renew(100)
        buf = await _read_until(sock, buf, b"0\r\n\r\n")
        assert b'"status_code":503' in buf and b"its event IDs end at 249" in buf
    finally:
        sock.close()
    assert direct_streams(web) == before


async def test_a_bare_lf_stream_request_is_answered_at_once_by_hypercorn(web):
    """h11 takes bare-LF line ends; the direct path leaves such a head to hypercorn at once rather
    than waiting the keep-alive timeout (5 s) for a CRLF blank line that never comes."""
    sock = await _connect(web.port)
    try:
        t0 = trio.current_time()
        await sock.send(b"GET /ws/v1/events/stream HTTP/1.1\nHost: x\n\n")
        buf = await _read_until(sock, b"", b'{"InstanceUUID":')
        assert buf.startswith(b"HTTP/1.1 200 ") and trio.current_time() - t0 < 2
    finally:
        sock.close()


async def test_an_over_long_stream_target_gets_the_apps_414(web):
    before = direct_streams(web)
    sock = await _connect(web.port)
    try:
        await sock.send(b"GET /ws/v1/events/stream?x=%s HTTP/1.1\r\nHost: x\r\n\r\n" % (b"a" * 9000))
        buf = await _read_until(sock, b"", b"}")
        assert buf.startswith(b"HTTP/1.1 414 ") and b'"status_code":414' in buf
    finally:
        sock.close()
    assert direct_streams(web) == before
