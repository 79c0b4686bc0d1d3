"""The web's TLS and trusted-proxy boundaries, each played by an attacker against a real
`ykshm web` (one worker, so the per-worker connection counts are the whole server's) on 127.0.0.1.

- X-Forwarded-For is believed only from `--trusted-proxies` (127.0.0.2 here): a client on
  127.0.0.3 that forges it is still counted as 127.0.0.3, by `maxStreamsPerHost` and by the
  per-peer connection cap; a trusted proxy's clients are counted apart, each still capped, and a
  client behind the proxy cannot prepend addresses to escape (the rightmost untrusted one counts).
- The TLS port never answers plain HTTP, and with `--require-client-cert` a client without a
  certificate from the configured CA does not get through the handshake.
"""

from __future__ import annotations

import re
import socket
import ssl

import httpx
import pytest
import trio
import trustme

from rawhttp import TlsRawStream
from webharness import Ring, WebServer, cleanup, unique_name

PROXY = "127.0.0.2"
ATTACKERS = ("127.0.0.3", "127.0.0.4")
"""Untrusted clients, one per test: the server may still count a closed connection for a moment,
so no test's count starts with another's (or the harness's 127.0.0.1 polls)."""
STREAM = "/ws/v1/events/stream"


@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


@pytest.fixture(scope="module")
def pem(ca, tmp_path_factory):
    d = tmp_path_factory.mktemp("tlssec")
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_and_cert_chain_pem.write_to_path(str(d / "server.pem"))
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    return d


@pytest.fixture(scope="module")
def client_ctx(ca):
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return ctx


def _server(pem, client_ctx, tmp_path_factory, *extra: str) -> WebServer:
    name = unique_name()
    cfg = tmp_path_factory.mktemp("cfg") / "ykshm.yaml"
    cfg.write_text("service:\n  event:\n    maxStreams: 50\n    maxStreamsPerHost: 2\n"
                   f"  web:\n    trustedProxies: [{PROXY}]\n")
    ring = Ring(name, 1000)
    server = WebServer(name, workers=1, config=str(cfg), verify=client_ctx,
                       extra=["--certfile", str(pem / "server.pem"), "--keyfile", str(pem / "server.pem"),
                              *extra])
    server.ring = ring
    return server


@pytest.fixture(scope="module")
def web(pem, client_ctx, tmp_path_factory):
    server = _server(pem, client_ctx, tmp_path_factory, "--max-connections-per-peer", "3")
    yield server
    server.stop()
    server.ring.close()
    cleanup(server.name)


async def _open(web, *, local: str = "127.0.0.1", forwarded: str | None = None) -> TlsRawStream:
    headers = {"X-Forwarded-For": forwarded} if forwarded is not None else {}
    return await TlsRawStream(web.port, STREAM, ctx=web.verify, local=local, headers=headers).open()


async def _wait_closed(streams: list[TlsRawStream], web) -> None:
    for s in streams:
        s.close()
    with trio.fail_after(10):  # the server has released their slots and connections
        while True:
            try:  # refused while the server still counts closed connections
                text = httpx.get(web.url + "/ws/v1/metrics", verify=web.verify, timeout=5).text
                if "\nykshm_web_streams_open 0.0" in text:
                    return
            except httpx.HTTPError:
                pass
            await trio.sleep(0.05)


async def test_a_forged_forwarded_for_does_not_dodge_the_stream_limit_per_host(web):
    opened = []
    try:
        for fake in ("10.0.0.1", "10.0.0.2"):
            s = await _open(web, local=ATTACKERS[0], forwarded=fake)
            opened.append(s)
            assert s.status == 200
        third = await _open(web, local=ATTACKERS[0], forwarded="10.0.0.3")
        opened.append(third)
        assert third.status == 503  # still the attacker's third stream: maxStreamsPerHost 2
        assert b"Too many" in third.body or "status_code" in third.body.decode()
    finally:
        await _wait_closed(opened, web)


async def test_a_trusted_proxys_clients_are_counted_apart_and_each_still_capped(web):
    opened = []
    try:
        for client in ("10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2"):
            s = await _open(web, local=PROXY, forwarded=client)
            opened.append(s)
            assert s.status == 200, client  # four streams through one proxy address
        again = await _open(web, local=PROXY, forwarded="10.0.0.1")
        opened.append(again)
        assert again.status == 503  # 10.0.0.1's third
        # the client behind the proxy prepends a fake address: the proxy appended the real one
        forged = await _open(web, local=PROXY, forwarded="192.0.2.99, 10.0.0.2")
        opened.append(forged)
        assert forged.status == 503
        # a proxy chain: 127.0.0.2 is trusted, so the hop before it is the client
        chained = await _open(web, local=PROXY, forwarded=f"10.0.0.3, {PROXY}")
        opened.append(chained)
        assert chained.status == 200
    finally:
        await _wait_closed(opened, web)


def _tls(web, local: str) -> socket.socket:
    raw = socket.create_connection(("127.0.0.1", web.port), source_address=(local, 0), timeout=5)
    return web.verify.wrap_socket(raw, server_hostname="127.0.0.1")


def _request(sock: socket.socket, forwarded: str | None) -> socket.socket:
    xff = f"X-Forwarded-For: {forwarded}\r\n" if forwarded else ""
    sock.sendall(f"GET {STREAM} HTTP/1.1\r\nHost: x\r\n{xff}\r\n".encode())
    return sock


def _connect(web, local: str, forwarded: str | None) -> socket.socket:
    """A TLS connection that sends one stream request and keeps the connection open."""
    return _request(_tls(web, local), forwarded)


def _answer(sock: socket.socket) -> bytes:
    """The response head, and its body when it has a Content-Length (b"" if closed unanswered)."""
    got = b""
    try:
        while b"\r\n\r\n" not in got:
            data = sock.recv(4096)
            if not data:
                return got
            got += data
        head, _, body = got.partition(b"\r\n\r\n")
        length = re.search(rb"content-length: (\d+)", head, re.I)
        while length and len(body) < int(length.group(1)):
            body += sock.recv(4096)
        return head + b"\r\n\r\n" + body
    except (ssl.SSLError, OSError):
        return got


def _status(answer: bytes) -> int:
    return int(answer.split()[1]) if answer.startswith(b"HTTP/1.1 ") else 0


BUSY = b"Too many connections from this address"


def test_the_connection_cap_per_peer_counts_the_real_client_only_behind_a_trusted_proxy(web):
    """--max-connections-per-peer 3, maxStreamsPerHost 2. An untrusted client cannot spread its
    connections over fake addresses; a trusted proxy's connections count for the clients they
    carry, and each client is still capped."""
    web.ring.renew(1000)
    socks = []
    try:
        for i in range(3):
            socks.append(_connect(web, ATTACKERS[1], f"10.1.0.{i}"))
        assert [_status(_answer(s)) for s in socks] == [200, 200, 503]  # 3rd: the stream limit
        with pytest.raises((ssl.SSLError, OSError)):  # 4th: refused at the connection
            s = _connect(web, ATTACKERS[1], "10.1.0.9")
            socks.append(s)
            if not _answer(s):
                raise ConnectionResetError("closed unanswered")
        for s in socks:
            s.close()
        socks.clear()
        # Trusted proxy: 7 connections open at once through one address (over the cap of 3),
        # then their requests, for three clients
        clients = ("10.2.0.1", "10.2.0.2", "10.2.0.3") * 2 + ("10.2.0.1",)
        socks.extend(_tls(web, PROXY) for _ in clients)
        answers = [_answer(_request(s, client)) for s, client in zip(socks, clients)]
        assert [_status(a) for a in answers] == [200] * 6 + [503]  # 10.2.0.1's 3rd stream
        assert BUSY not in answers[6]
        over = _connect(web, PROXY, "10.2.0.1")  # 10.2.0.1's 4th connection
        socks.append(over)
        answer = _answer(over)
        assert _status(answer) == 503 and BUSY in answer
    finally:
        for s in socks:
            s.close()


def test_a_closed_connection_stops_counting_at_once(web):
    """--max-connections-per-peer 3: 30 requests in a row, each on a new connection that the
    client closes, are all answered (hypercorn's task for a closed connection lingers until its
    keep-alive timer ends, 5 s; the Gate no longer counts it from the client's EOF)."""
    statuses = [httpx.get(web.url + "/ws/v1/events/batch?count=1", verify=web.verify, timeout=5).status_code
                for _ in range(30)]
    assert statuses == [200] * 30


def test_plain_http_to_the_tls_port_is_never_answered_in_plain_text(web):
    web.ring.renew(1000)
    web.ring.publish(3)
    s = socket.create_connection(("127.0.0.1", web.port), timeout=5)
    try:
        s.sendall(b"GET /ws/v1/events/batch HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while True:
            data = s.recv(4096)
            if not data:
                break
            got += data
    finally:
        s.close()
    assert b"HTTP/1.1" not in got and b"EventRecords" not in got
    assert httpx.get(web.url + "/ws/v1/events/batch", verify=web.verify, timeout=5).status_code == 200


def _ctx_with_cert(ca, cert, path) -> ssl.SSLContext:
    cert.private_key_and_cert_chain_pem.write_to_path(str(path))
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    ctx.load_cert_chain(str(path))
    return ctx


@pytest.fixture(scope="module")
def mtls_web(ca, pem, tmp_path_factory):
    alice = _ctx_with_cert(ca, ca.issue_cert("alice"), tmp_path_factory.mktemp("alice") / "alice.pem")
    server = _server(pem, alice, tmp_path_factory, "--ca-certs", str(pem / "ca.pem"),
                     "--require-client-cert")
    yield server
    server.stop()
    server.ring.close()
    cleanup(server.name)


def test_a_client_certificate_is_required_and_must_be_signed_by_the_ca(ca, client_ctx, mtls_web, tmp_path):
    url = mtls_web.url + "/ws/v1/events/batch"
    with pytest.raises(httpx.HTTPError):
        httpx.get(url, verify=client_ctx, timeout=5)  # no certificate
    mallory = _ctx_with_cert(ca, trustme.CA().issue_cert("mallory"), tmp_path / "mallory.pem")
    with pytest.raises(httpx.HTTPError):
        httpx.get(url, verify=mallory, timeout=5)  # a certificate of another CA
    assert httpx.get(url, verify=mtls_web.verify, timeout=5).status_code == 200  # alice's
