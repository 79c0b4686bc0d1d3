"""Bundle fetching behind a proxy (`HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY` in the controller's
environment), against a real forward proxy (tests/streams/proxy_server.py, a subprocess on
127.0.0.1) and real servers on 127.0.0.1: the request goes through the proxy, NO_PROXY bypasses
it, a target the policy refuses is refused before a byte reaches the proxy, and a github token
only ever crosses the proxy inside a CONNECT tunnel's TLS."""

from __future__ import annotations

import functools
import http.server
import pathlib
import ssl
import subprocess
import sys
import threading

import pytest

from streams.errors import FetchError
from streams_adl import pipeline, sab
from test_streams_fetch import Cluster, LOCAL, cluster, fetch, github_spec, server  # noqa: F401 - fixtures

PROXY = pathlib.Path(__file__).parent / "proxy_server.py"
PROXY_VARS = ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "ALL_PROXY")


class Proxy:
    def __init__(self, log: pathlib.Path, port: int) -> None:
        self.log, self.url = log, f"http://127.0.0.1:{port}"

    def requests(self) -> list[str]:
        path = self.log / "requests"
        return path.read_text().splitlines() if path.exists() else []

    def bytes_seen(self) -> bytes:
        path = self.log / "bytes"
        return path.read_bytes() if path.exists() else b""


@pytest.fixture
def proxy(tmp_path, monkeypatch):
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.lower(), raising=False)
    log = tmp_path / "proxy"
    log.mkdir()
    proc = subprocess.Popen([sys.executable, str(PROXY), str(log)], stdout=subprocess.PIPE, text=True)
    try:
        yield Proxy(log, int(proc.stdout.readline()))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()


@pytest.fixture
def http_server(tmp_path):
    """A plain http server on 127.0.0.1 (a thread of the test, shut down at its end)."""
    root = tmp_path / "plain"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv.server_address[1], root
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)


def plain_spec(port: int, name: str = "app.sab", host: str = "127.0.0.1") -> dict:
    return {"name": name, "http": {"url": f"http://{host}:{port}/{name}"}, "pullPolicy": "Always"}


async def test_http_goes_through_the_proxy_as_an_absolute_uri_and_no_proxy_bypasses_it(
        proxy, http_server, cluster, tmp_path, monkeypatch):
    port, root = http_server
    bundle = sab(pipeline(2))
    (root / "app.sab").write_bytes(bundle)
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    assert await fetch(plain_spec(port), cluster, tmp_path) == bundle
    assert proxy.requests() == [f"GET http://127.0.0.1:{port}/app.sab HTTP/1.1"]

    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert await fetch(plain_spec(port), cluster, tmp_path) == bundle
    assert len(proxy.requests()) == 1           # the second fetch went direct


async def test_github_token_crosses_the_proxy_only_inside_the_connect_tunnel(proxy, server, cluster, tmp_path,
                                                                             monkeypatch):
    bundle = sab(pipeline(2))
    (server.root / "app.sab").write_bytes(bundle)
    (server.root / ".token").write_text("s3cret-token-value")
    cluster.secrets[("ns", "gh")] = {"token": b"s3cret-token-value"}
    ctx = ssl.create_default_context()
    server.ca.configure_trust(ctx)
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    assert await fetch(github_spec(server), cluster, tmp_path, ssl_context=ctx) == bundle
    assert proxy.requests() == [f"CONNECT 127.0.0.1:{server.port} HTTP/1.1"]
    seen = proxy.bytes_seen()
    assert b"s3cret-token-value" not in seen and b"Authorization" not in seen and len(seen) > 200


@pytest.mark.parametrize("host, why", [("169.254.169.254", "cloud metadata"), ("127.0.0.9", "loopback")])
async def test_a_target_the_policy_refuses_is_refused_before_the_proxy_hears_of_it(
        proxy, cluster, tmp_path, monkeypatch, host, why):
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    for scheme in ("http", "https"):
        spec = {"name": "app.sab", "http": {"url": f"{scheme}://{host}:8080/app.sab"}, "pullPolicy": "Always"}
        with pytest.raises(FetchError, match=why):
            await fetch(spec, cluster, tmp_path)
    assert proxy.requests() == [] and proxy.bytes_seen() == b""


async def test_a_proxy_that_is_not_http_is_one_line_naming_the_variable(proxy, http_server, cluster, tmp_path,
                                                                      monkeypatch):
    port, _ = http_server
    monkeypatch.setenv("HTTP_PROXY", "socks5://127.0.0.1:1080")
    with pytest.raises(FetchError, match=r"^HTTP_PROXY='socks5://127.0.0.1:1080': only an http://host\[:port\] proxy"):
        await fetch(plain_spec(port), cluster, tmp_path)
