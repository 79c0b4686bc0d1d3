"""The web as an attacker meets it: validate-conf bombs and cross-origin requests (issue 26.1).

Every test runs against a real `ykshm web` (hypercorn workers, tests/web/webharness) on
127.0.0.1, stopped by pid. Each one fails on a server without the fix it names: the alias bomb
took 3 s and 136 MiB of a worker at 15 levels (doubling per level), and any page in a local
browser could send it as a preflight-less text/plain POST.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "web"))
from webharness import WebServer, cleanup, unique_name  # noqa: E402

VALIDATE = "/ws/v1/validate-conf"
HEALTH = "/ws/v1/scheduler/healthcheck"


def alias_bomb(levels: int) -> bytes:
    """Valid queues.yaml whose queue list `&Lk` holds `*L(k-1)` twice: 2**levels queues under
    `dk` from ~70 bytes a level (the anchors stand in sibling queues, every key is a real one)."""
    rows = ["    - {name: d0, queues: &L0 [{name: leaf}]}"]
    for i in range(1, levels + 1):
        rows.append(f"    - {{name: d{i}, queues: &L{i} [{{name: a, queues: *L{i - 1}}}, "
                    f"{{name: b, queues: *L{i - 1}}}]}}")
    return ("partitions:\n- name: default\n  queues:\n  - name: root\n    queues:\n"
            + "\n".join(rows) + "\n").encode()


def _server(tmp_path_factory, config: str | None):
    name = unique_name()
    path = None
    if config is not None:
        path = tmp_path_factory.mktemp("websec") / "ykshm.yaml"
        path.write_text(config)
    server = WebServer(name, workers=2, config=str(path) if path else None)
    return name, server


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    name, server = _server(tmp_path_factory, None)
    yield server
    server.stop()
    cleanup(name)


@pytest.fixture(scope="module")
def listed_web(tmp_path_factory):
    name, server = _server(tmp_path_factory,
                           "service:\n  cors:\n    allowedOrigins: [\"http://ui.example:8080\"]\n")
    yield server
    server.stop()
    cleanup(name)


def _error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["status_code"] == status and body["description"] == body["message"]
    return body["message"]


def test_alias_bomb_is_a_fast_400_naming_the_limit(web):
    bomb = alias_bomb(15)
    assert len(bomb) < 1500
    start = time.monotonic()
    response = httpx.post(web.url + VALIDATE, content=bomb, timeout=30)
    elapsed = time.monotonic() - start
    assert "max_nodes" in _error(response, 400)
    assert elapsed < 1.0
    # a self-referencing alias (a cycle) is refused the same way, not a RecursionError / 500
    cycle = httpx.post(web.url + VALIDATE, content=b"partitions: &p [{name: x, queues: *p}]", timeout=10)
    assert "max_depth" in _error(cycle, 400)


def test_deep_or_large_documents_are_refused_naming_the_limit(web):
    deep = b"partitions: " + b"[" * 100 + b"]" * 100
    assert "max_depth" in _error(httpx.post(web.url + VALIDATE, content=deep, timeout=10), 400)
    plain = b"partitions:\n" + b"".join(b"- name: p%d\n" % i for i in range(60_000))
    assert len(plain) > 600_000
    start = time.monotonic()
    too_big = httpx.post(web.url + VALIDATE, content=plain, timeout=30)
    assert "524288 bytes" in _error(too_big, 413)
    assert time.monotonic() - start < 1.0
    # a normal document still validates: both verdicts of YuniKorn's answer
    ok = httpx.post(web.url + VALIDATE, content=b"partitions:\n- name: default\n", timeout=10)
    assert ok.status_code == 200 and ok.json() == {"allowed": True, "reason": ""}
    dup = httpx.post(web.url + VALIDATE, timeout=10, content=b"partitions: [{name: default, queues: "
                     b"[{name: root, queues: [{name: a}, {name: A}]}]}]")
    assert dup.json()["allowed"] is False and "duplicate queue name" in dup.json()["reason"]


def test_a_normal_client_is_served_while_bombs_are_sent(web):
    bomb = alias_bomb(22)  # ~17 GiB of work for a loader that expands aliases
    stop = threading.Event()
    answers: list[int] = []

    def attacker() -> None:
        with httpx.Client(timeout=30) as client:
            while not stop.is_set():
                answers.append(client.post(web.url + VALIDATE, content=bomb).status_code)

    threads = [threading.Thread(target=attacker) for _ in range(6)]
    for t in threads:
        t.start()
    try:
        latencies = []
        with httpx.Client(timeout=10) as client:
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline:
                start = time.monotonic()
                assert client.get(web.url + HEALTH).status_code == 200
                latencies.append(time.monotonic() - start)
                time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert answers and set(answers) == {400}
    assert max(latencies) < 1.0, latencies


def test_a_cross_origin_post_is_refused(web):
    evil = {"origin": "http://evil.example", "content-type": "text/plain"}
    refused = httpx.post(web.url + VALIDATE, content=b"partitions: []\n", headers=evil, timeout=10)
    assert "service.cors.allowedOrigins" in _error(refused, 403)
    # the same request from a client that is not a browser, or from the server's own origin, runs
    assert httpx.post(web.url + VALIDATE, content=b"{}", timeout=10).status_code == 200
    own = httpx.post(web.url + VALIDATE, content=b"{}", timeout=10, headers={"origin": web.url})
    assert own.status_code == 200
    # reads keep YuniKorn's answer to any origin
    read = httpx.get(web.url + HEALTH, headers={"origin": "http://evil.example"}, timeout=10)
    assert read.status_code == 200 and read.headers["access-control-allow-origin"] == "*"


def test_a_dns_rebinding_post_is_refused(web):
    """A page of http://evil.example whose name was rebound to 127.0.0.1: Host and Origin agree,
    and the POST is still cross-origin (N14); the IP literal and localhost stay the server's own."""
    port = web.url.rsplit(":", 1)[1]
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.nip.io"):
        rebound = {"host": host, "origin": f"http://{host}", "content-type": "text/plain"}
        refused = httpx.post(web.url + VALIDATE, content=b"partitions: []\n", headers=rebound, timeout=10)
        assert "service.cors.allowedOrigins" in _error(refused, 403), host
    for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
        own = {"host": host, "origin": f"http://{host}", "content-type": "text/plain"}
        assert httpx.post(web.url + VALIDATE, content=b"{}", headers=own, timeout=10).status_code == 200


def test_only_a_listed_origin_may_post(listed_web):
    listed = {"origin": "http://ui.example:8080", "content-type": "text/plain"}
    ok = httpx.post(listed_web.url + VALIDATE, content=b"{}", headers=listed, timeout=10)
    assert ok.status_code == 200
    assert ok.headers["access-control-allow-origin"] == "http://ui.example:8080"
    other = {"origin": "http://evil.example", "content-type": "text/plain"}
    _error(httpx.post(listed_web.url + VALIDATE, content=b"{}", headers=other, timeout=10), 403)
    read = httpx.get(listed_web.url + HEALTH, headers={"origin": "http://evil.example"}, timeout=10)
    assert read.status_code == 200 and "access-control-allow-origin" not in read.headers
    preflight = httpx.options(listed_web.url + VALIDATE, headers=listed, timeout=10)
    assert preflight.headers["access-control-allow-origin"] == "http://ui.example:8080"


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def _stalled_body(url_port: int, body_bytes: int) -> socket.socket:
    """A validate-conf whose body stops one byte short of its Content-Length (N11)."""
    sock = socket.create_connection(("127.0.0.1", url_port), timeout=5)
    head = (f"POST {VALIDATE} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-yaml\r\n"
            f"Content-Length: {body_bytes + 1}\r\n\r\n").encode()
    try:
        sock.sendall(head + b"#" * body_bytes)
    except OSError:
        pass  # answered 503 and closed before the body was all sent: what the fix does
    return sock


def _answer_status(sock: socket.socket) -> int | None:
    """The status of what the server answered on `sock`, None if it answered nothing yet."""
    sock.setblocking(False)
    try:
        data = sock.recv(64)
    except (BlockingIOError, ConnectionResetError):
        return None
    return int(data.split()[1]) if data.startswith(b"HTTP/1.1 ") else None


def test_stalled_validate_bodies_hold_bounded_memory(tmp_path):
    """N11: 150 connections each stalling 512 KiB - 1 of validate-conf body. A worker reads at
    most VALIDATE_IN_FLIGHT (8) bodies, the rest get 503 before theirs is read; its RSS stays
    within a few MB of that (it grew ~0.6 MB per connection, 90 MB here, without the fix), and
    other requests and, once the stalls end, validate-conf itself are answered."""
    name = unique_name()
    server = WebServer(name, workers=1)
    sockets: list[socket.socket] = []
    try:
        (worker,) = server.worker_pids()
        before = _rss_bytes(worker)
        for _ in range(150):
            sockets.append(_stalled_body(server.port, (512 << 10) - 1))
        with httpx.Client(timeout=10) as client:
            assert client.get(server.url + HEALTH).status_code == 200
        grown = _rss_bytes(worker) - before
        statuses = [_answer_status(s) for s in sockets]
        assert statuses.count(503) >= 150 - 8, statuses
        assert grown < 30 << 20, f"worker RSS grew {grown >> 20} MiB"
        for sock in sockets:
            sock.close()
        sockets.clear()
        with httpx.Client(timeout=40) as client:
            r = client.post(server.url + VALIDATE, content=b"partitions:\n- name: default\n  queues:\n  - name: root\n")
        assert r.status_code == 200 and r.json()["allowed"] is True, r.text
    finally:
        for sock in sockets:
            sock.close()
        server.stop()
        cleanup(name)
