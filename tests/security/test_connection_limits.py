"""Connections and bodies are bounded (issue 26 item 6): thousands of idle and trickling
connections to a real `ykshm web` and to a real cr-operator API do not keep a normal client out,
a trickling body is cut off, and sim-cluster closes idle connections.

The servers run with RLIMIT_NOFILE 1024, a common default: without the per-peer and per-worker caps
the attackers' connections take every file descriptor and a normal client waits for as long as the
attack lasts (try it with `--max-connections 100000 --max-connections-per-peer 100000`). The normal
client connects from 127.0.0.2, another loopback address, as a neighbour would.
"""

from __future__ import annotations

import errno
import os
import resource
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import trio

from simcluster.httpserver import HttpServer, Response, open_listeners
from webharness import Ring, WebServer, cleanup, unique_name
from ykcli import stop

ATTACKERS = 2000
FD_LIMIT = 1024
PROMPT = 2.0
"""Seconds within which a normal client is answered while the attack goes on."""
HERE = Path(__file__).resolve().parent


class Attack:
    """ATTACKERS connections, some idle, some trickling a request head a byte at a time."""

    def __init__(self, port: int, sources: list[str]) -> None:
        self.port = port
        self.sources = sources
        self.socks: list[socket.socket] = []

    def open(self) -> None:
        for i in range(ATTACKERS):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((self.sources[i % len(self.sources)], 0))
            sock.setblocking(False)
            code = sock.connect_ex(("127.0.0.1", self.port))
            assert code in (0, errno.EINPROGRESS), os.strerror(code)
            self.socks.append(sock)

    async def trickle(self) -> None:
        """Every other connection sends one more byte of a head every 0.3 s, forever."""
        head = b"GET /ws/v1/scheduler/healthcheck HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 4000
        for step in range(len(head)):
            for sock in self.socks[::2]:
                try:
                    sock.send(head[step:step + 1])
                except OSError:
                    pass
            await trio.sleep(0.3)

    def close(self) -> None:
        for sock in self.socks:
            sock.close()


@contextmanager
def attacked(port: int, sources: list[str]):
    attack = Attack(port, sources)
    try:
        attack.open()
        yield attack
    finally:
        attack.close()


async def normal_get(port: int, target: bytes) -> tuple[bytes, float]:
    """A normal client from 127.0.0.2: its answer and how long it took."""
    t0 = trio.current_time()
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        await sock.bind(("127.0.0.2", 0))
        await sock.connect(("127.0.0.1", port))
        await sock.send(b"GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % target)
        answer = b""
        while data := await sock.recv(65536):
            answer += data
    finally:
        sock.close()
    return answer, trio.current_time() - t0


async def served_promptly_during(attack: Attack, port: int, target: bytes) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(attack.trickle)
        await trio.sleep(1.0)  # the attack is in place
        for _ in range(3):
            with trio.fail_after(10):
                answer, took = await normal_get(port, target)
            assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
            assert took < PROMPT, f"a normal client waited {took:.2f} s"
            await trio.sleep(0.5)
        nursery.cancel_scope.cancel()


def limit_fds(pid: int) -> None:
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


@contextmanager
def web_server(*extra: str):
    name = unique_name()
    ring = Ring(name, 100)
    server = WebServer(name, workers=1, extra=["--head-timeout", "3", *extra])
    try:
        for pid in server.worker_pids():
            limit_fds(pid)
        yield server
    finally:
        server.stop()
        ring.close()
        cleanup(name)


@contextmanager
def operator_server(max_connections: int = 4096, max_per_peer: int = 256, body_timeout: float = 30):
    proc = subprocess.Popen([sys.executable, str(HERE / "operator_server.py"), str(max_connections),
                             str(max_per_peer), "3", str(body_timeout)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            preexec_fn=lambda: resource.setrlimit(
                                resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT)))
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        yield int(url.rsplit(":", 1)[1])
    finally:
        stop(proc)
        proc.stdout.close()


STATE = b"/api/consistentregion/region/0/state"
HEALTH = b"/ws/v1/scheduler/healthcheck"


async def test_web_serves_a_normal_client_while_one_address_holds_thousands_of_connections():
    with web_server() as web, attacked(web.port, ["127.0.0.1"]) as attack:
        await served_promptly_during(attack, web.port, HEALTH)


async def test_web_serves_a_normal_client_while_many_addresses_fill_the_worker():
    """Under the per-peer cap each, together over the worker's: the longest-waiting idle
    connections make room."""
    sources = [f"127.0.0.{i}" for i in range(10, 50)]
    with web_server("--max-connections", "500") as web, attacked(web.port, sources) as attack:
        await served_promptly_during(attack, web.port, HEALTH)


async def test_operator_serves_a_normal_client_while_one_address_holds_thousands_of_connections():
    with operator_server() as port, attacked(port, ["127.0.0.1"]) as attack:
        await served_promptly_during(attack, port, STATE)


async def test_operator_serves_a_normal_client_while_many_addresses_fill_it():
    sources = [f"127.0.0.{i}" for i in range(10, 50)]
    with operator_server(max_connections=500) as port, attacked(port, sources) as attack:
        await served_promptly_during(attack, port, STATE)


async def _trickled_answer(port: int, head: bytes) -> tuple[bytes, float]:
    """Send a head announcing a body, then a byte of it every 0.2 s: what comes back, and when."""
    t0 = trio.current_time()
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    answer = b""
    async with stream:
        await stream.send_all(head)
        with trio.fail_after(15):
            async with trio.open_nursery() as nursery:
                async def drip() -> None:
                    for _ in range(200):
                        try:
                            await stream.send_all(b"1")
                        except (trio.BrokenResourceError, trio.ClosedResourceError):
                            return
                        await trio.sleep(0.2)

                nursery.start_soon(drip)
                try:
                    while data := await stream.receive_some():
                        answer += data
                except trio.BrokenResourceError:
                    pass
                nursery.cancel_scope.cancel()
    return answer, trio.current_time() - t0


async def test_a_trickling_body_is_cut_off_at_the_body_deadline():
    body = b"PUT /api/consistentregion/region/0/pe/1/checkpoint HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
    with operator_server(body_timeout=1) as port:
        _answer, took = await _trickled_answer(port, body)
        assert took < 3  # the direct path closes it
    conf = b"POST /ws/v1/validate-conf HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
    with web_server("--body-timeout", "1") as web:
        answer, took = await _trickled_answer(web.port, conf)
        assert answer.startswith(b"HTTP/1.1 408 ") and b'"status_code":408' in answer
        assert took < 3


async def test_sim_cluster_closes_an_idle_connection():
    async def handler(request):
        return Response(200, b"{}")

    server = HttpServer(handler, idle_timeout=0.5)
    async with trio.open_nursery() as nursery:
        listeners = await open_listeners("127.0.0.1", 0)
        port = listeners[0].socket.getsockname()[1]
        await nursery.start(server.serve, listeners)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            t0 = trio.current_time()
            with trio.fail_after(5):
                answer = b""
                while data := await stream.receive_some():
                    answer += data
            assert answer.startswith(b"HTTP/1.1 200 ")  # answered, then closed once idle
            assert 0.4 < trio.current_time() - t0 < 3
        nursery.cancel_scope.cancel()


def test_a_limit_that_makes_no_sense_is_one_line_and_exit_2():
    cases = [(["web", "--max-connections-per-peer", "0"],
              "ykshm web: error: --max-connections-per-peer must be at least 1, not 0"),
             (["web", "--head-timeout", "-1"],
              "ykshm web: error: --head-timeout must be more than 0 seconds, not -1.0"),
             (["cr-operator", "--job", "ns/job", "--api-server", "http://127.0.0.1:9",
               "--body-timeout", "0"],
              "ykshm cr-operator: error: --body-timeout must be more than 0 seconds, not 0.0")]
    for args, message in cases:
        r = subprocess.run([sys.executable, "-m", "tools.cli", *args], capture_output=True,
                           text=True, timeout=60, cwd=HERE.parents[1])
        assert r.returncode == 2
        assert r.stderr.strip().splitlines() == [message]
