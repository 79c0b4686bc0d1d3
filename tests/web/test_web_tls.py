"""`ykshm web` over TLS: real web processes on 127.0.0.1 with a trustme CA.

The server here takes its certificate from the config keys (`service.web.certFile/keyFile`); the
flags are exercised by the bad-input tests and tests/security/test_web_tls_security.py.
"""

from __future__ import annotations

import re
import socket
import ssl
import subprocess
import sys

import httpx
import pytest
import trio
import trustme

from rawhttp import Closed, TlsRawStream
from webharness import ROOT, Ring, WebServer, cleanup, unique_name


@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


@pytest.fixture(scope="module")
def pem(ca, tmp_path_factory):
    """Paths of the server's chain and key, the CA, and a second pair that does not match."""
    d = tmp_path_factory.mktemp("tls")
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_pem.write_to_path(str(d / "key.pem"))
    with open(d / "chain.pem", "wb") as f:
        for blob in cert.cert_chain_pems:
            f.write(blob.bytes())
    other = ca.issue_cert("127.0.0.1")
    other.private_key_pem.write_to_path(str(d / "other-key.pem"))
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    return d


@pytest.fixture(scope="module")
def client_ctx(ca):
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return ctx


@pytest.fixture(scope="module")
def tls_web(pem, client_ctx, tmp_path_factory):
    name = unique_name()
    cfg = tmp_path_factory.mktemp("tlscfg") / "ykshm.yaml"
    cfg.write_text(f"service:\n  web:\n    certFile: {pem / 'chain.pem'}\n    keyFile: {pem / 'key.pem'}\n"
                   "  event:\n    maxStreams: 20\n    maxStreamsPerHost: 20\n")
    ring = Ring(name, 100_000)
    server = WebServer(name, workers=1, config=str(cfg), verify=client_ctx,
                       extra=["--stall-timeout", "30", "--head-timeout", "1"])
    server.ring = ring
    yield server
    server.stop()
    ring.close()
    cleanup(name)


def _direct_streams(web) -> float:
    text = httpx.get(web.url + "/ws/v1/metrics", verify=web.verify, timeout=5).text
    return float(re.search(r"^ykshm_web_streams_direct_total (\S+)$", text, re.M).group(1))


async def _stream(web, **kw) -> TlsRawStream:
    return await TlsRawStream(web.port, kw.pop("path", "/ws/v1/events/stream"), ctx=web.verify, **kw).open()


async def test_batch_and_stream_over_https_on_the_direct_path(tls_web):
    ring = tls_web.ring
    ring.renew(100_000)
    ring.publish(5)
    r = httpx.get(tls_web.url + "/ws/v1/events/batch", verify=tls_web.verify, timeout=5)
    assert r.status_code == 200
    assert [e["id"] for e in r.json()["EventRecords"]] == [0, 1, 2, 3, 4]
    direct_before = _direct_streams(tls_web)
    history = await _stream(tls_web, path="/ws/v1/events/stream?start=0")
    live = await _stream(tls_web)
    try:
        assert history.status == 200 and live.status == 200
        assert "InstanceUUID" in await history.obj() and "InstanceUUID" in await live.obj()
        with trio.fail_after(10):
            assert [e["id"] for e in await history.objs(5)] == [0, 1, 2, 3, 4]
            ring.publish(3, start=5)
            assert [e["id"] for e in await history.objs(3)] == [5, 6, 7]
            assert [e["id"] for e in await live.objs(3)] == [5, 6, 7]
    finally:
        history.close()
        live.close()
    assert _direct_streams(tls_web) == direct_before + 2  # served on the raw socket, not by hypercorn


async def test_a_stall_mid_handshake_does_not_stall_others_and_is_closed(tls_web):
    """Connections that send half a ClientHello and stop: others are served meanwhile, and each is
    closed by the head deadline (1 s here)."""
    tls_web.ring.renew(100_000)
    stalled = []
    for _ in range(4):
        s = socket.create_connection(("127.0.0.1", tls_web.port))
        s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a ClientHello's first bytes
        stalled.append(s)
    try:
        t0 = trio.current_time()
        good = await _stream(tls_web)
        try:
            await good.obj()
            tls_web.ring.publish(2)
            with trio.fail_after(5):
                assert [e["id"] for e in await good.objs(2)] == [0, 1]
        finally:
            good.close()
        assert trio.current_time() - t0 < 5
        for s in stalled:
            s.settimeout(5)  # socket.timeout fails the test: the server must close it
            while s.recv(100):
                pass  # an alert, if any, then EOF
        assert trio.current_time() - t0 >= 0.9  # closed by the deadline, not refused at once
    finally:
        for s in stalled:
            s.close()


async def test_a_stalled_tls_stream_does_not_stall_the_hub(tls_web):
    """A TLS client that stops reading mid-stream (4 KiB receive buffer; stall timeout 30 s, so it
    stays connected): a reading TLS client gets every event, in order, and promptly."""
    tls_web.ring.renew(100_000)
    stalled = await _stream(tls_web, rcvbuf=4096)
    good = await _stream(tls_web)
    try:
        await stalled.obj()
        await good.obj()
        big = "z" * 1000
        received: list[int] = []
        next_id = 0
        t0 = trio.current_time()
        while next_id < 6000:  # ~7 MB of JSON: far more than the stalled client's buffers hold
            tls_web.ring.publish(300, start=next_id, message=big)
            next_id += 300
            with trio.fail_after(10):
                while len(received) < next_id:
                    received.append((await good.obj())["id"])
        assert received == list(range(next_id))
        assert trio.current_time() - t0 < 30
        text = httpx.get(tls_web.url + "/ws/v1/metrics", verify=tls_web.verify, timeout=5).text
        assert re.search(r"^ykshm_web_streams_open 2\.0$", text, re.M)  # the stalled one is still open
    finally:
        stalled.close()
        good.close()


def _web(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.cli", "web", "--bind", "127.0.0.1:0", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


def _one_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_bad_certificate_or_key_is_one_line_exit_2(pem, tmp_path):
    line = _one_line(_web("--certfile", str(tmp_path / "nope.pem"), "--keyfile", str(pem / "key.pem")))
    assert f"--certfile {tmp_path / 'nope.pem'}: no such file" in line
    line = _one_line(_web("--certfile", str(pem / "chain.pem"), "--keyfile", str(tmp_path / "gone.pem")))
    assert f"--keyfile {tmp_path / 'gone.pem'}: no such file" in line
    line = _one_line(_web("--certfile", str(pem / "chain.pem"), "--keyfile", str(pem / "other-key.pem")))
    assert "not a matching PEM certificate and key" in line and "other-key.pem" in line
    line = _one_line(_web("--certfile", str(pem / "key.pem"), "--keyfile", str(pem / "key.pem")))
    assert "--certfile" in line and "not a matching PEM certificate and key" in line
    assert "go together" in _one_line(_web("--certfile", str(pem / "chain.pem")))
    line = _one_line(_web("--certfile", str(pem / "chain.pem"), "--keyfile", str(pem / "key.pem"),
                          "--ca-certs", str(pem / "key.pem")))
    assert "--ca-certs" in line and "no PEM CA certificate" in line
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"service:\n  web:\n    certFile: /nonexistent/cert.pem\n    keyFile: {pem / 'key.pem'}\n")
    assert "service.web.certFile /nonexistent/cert.pem: no such file" in _one_line(_web("--config", str(cfg)))
    cfg.write_text("service:\n  web:\n    trustedProxies: [10.0.0.0/33]\n")
    line = _one_line(_web("--config", str(cfg)))
    assert "service.web.trustedProxies[0]" in line and "10.0.0.0/33" in line
    assert "--trusted-proxies" in _one_line(_web("--trusted-proxies", "10.0.0.1,bogus"))


async def test_hypercorn_only_serves_the_same_stream_through_hypercorn(pem, client_ctx):
    """`--hypercorn-only` (the design `bench web --tls` compares with): same lines, none direct."""
    name = unique_name()
    ring = Ring(name, 100)
    server = WebServer(name, workers=1, verify=client_ctx,
                       extra=["--certfile", str(pem / "chain.pem"), "--keyfile", str(pem / "key.pem"),
                              "--hypercorn-only"])
    try:
        ring.publish(3)
        s = await _stream(server, path="/ws/v1/events/stream?start=0")
        try:
            assert s.status == 200 and "InstanceUUID" in await s.obj()
            with trio.fail_after(10):
                assert [e["id"] for e in await s.objs(3)] == [0, 1, 2]
                ring.publish(2, start=3)
                assert [e["id"] for e in await s.objs(2)] == [3, 4]
        finally:
            s.close()
        assert _direct_streams(server) == 0
    finally:
        server.stop()
        ring.close()
        cleanup(name)
