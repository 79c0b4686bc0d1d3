"""`ykshm web` as a process: CLI errors, no ring yet, kill -9 of a worker, HOST:PORT bind."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time

import httpx
import trio

from rawhttp import Closed, open_stream
from webharness import ROOT, Ring, WebServer


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.cli", "web", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=30)


def test_usage_errors_are_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("service:\n  event:\n    maxStreams: lots\n")
    for args in (["--bind", "nonsense"], ["--bind", "127.0.0.1:99999"], ["--bind", "fd://x"],
                 ["--workers", "0"], ["--config", str(bad)], ["--bogus"],
                 ["--config", str(tmp_path / "missing.yaml")]):
        res = run_cli(*args)
        assert res.returncode == 2, (args, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ykshm web: error: "), res.stderr
    res = run_cli("--help")
    assert res.returncode == 0 and "--bind" in res.stdout


def test_port_in_use_is_exit_1(name_factory):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        res = run_cli("--name", name_factory(), "--bind", f"127.0.0.1:{s.getsockname()[1]}")
    assert res.returncode == 1 and "cannot listen" in res.stderr


def test_host_port_bind_and_sigterm(name_factory):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    name = name_factory()
    proc = subprocess.Popen([sys.executable, "-m", "tools.cli", "web", "--name", name, "--bind",
                             f"127.0.0.1:{port}", "--workers", "1"], cwd=ROOT,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/ws/v1/events/batch", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.05)
        else:
            raise AssertionError(f"ykshm web never answered on port {port}")
        assert r.status_code == 503 and "not found" in r.json()["message"]
        assert os.path.exists(f"/dev/shm/{name}.web")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        assert not os.path.exists(f"/dev/shm/{name}.web")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def stream_owners(name: str) -> dict[int, int]:
    """pid -> open stream slots, read from the shared segment /dev/shm/NAME.web."""
    from web.segment import WebSegment

    with WebSegment.open_or_create(name, 1) as seg:
        return seg.stream_owners()


async def test_no_ring_then_ring_then_kill_9_worker(name_factory):
    name = name_factory()
    server = WebServer(name, workers=2)
    ring = None
    try:
        r = httpx.get(server.url + "/ws/v1/events/batch", timeout=5)
        assert r.status_code == 503 and f"{name!r} not found" in r.json()["message"]
        ring = Ring(name, 10_000)
        await trio.sleep(0.25)
        assert httpx.get(server.url + "/ws/v1/events/batch", timeout=5).status_code == 200

        # 8 streams on both workers. Which worker accepts is up to the kernel and often lopsided,
        # so the worker holding most of the first 4 is stopped (it cannot accept) for the next 4.
        streams = [await open_stream(server.port, "/ws/v1/events/stream") for _ in range(4)]
        first = stream_owners(name)
        busy = max(first, key=first.get)
        os.kill(busy, signal.SIGSTOP)
        try:
            streams += [await open_stream(server.port, "/ws/v1/events/stream") for _ in range(4)]
        finally:
            os.kill(busy, signal.SIGCONT)
        for s in streams:
            await s.obj()
        owners = stream_owners(name)
        assert sum(owners.values()) == 8 and set(owners) == set(server.worker_pids()), owners
        # kill the worker holding the fewest streams: some die with it, some survive
        victim = min(owners, key=owners.get)
        os.kill(victim, signal.SIGKILL)
        ring.publish(5)
        alive, dead = [], 0
        for s in streams:
            try:
                with trio.fail_after(5):
                    got = [e["id"] for e in await s.objs(5)]
                assert got == [0, 1, 2, 3, 4]
                alive.append(s)
            except Closed:
                dead += 1
        assert len(alive) == 8 - owners.get(victim, 0) and dead == owners.get(victim, 0)
        # new connections are still served, streams on the survivor keep going
        for _ in range(10):
            assert httpx.get(server.url + "/ws/v1/events/batch", timeout=5).status_code == 200
        ring.publish(1, start=5)
        for s in alive:
            with trio.fail_after(5):
                assert (await s.obj())["id"] == 5
        # the supervisor replaced the worker and freed the dead worker's stream slots
        with trio.fail_after(15):
            while True:
                pids = server.worker_pids()
                text = httpx.get(server.url + "/ws/v1/metrics", timeout=5).text
                m = re.search(r"^ykshm_web_streams_open (\S+)$", text, re.M)
                if len(pids) == 2 and victim not in pids and float(m.group(1)) == len(alive):
                    break
                await trio.sleep(0.1)
        assert "exited with -9" in server.log()
        for s in streams:
            s.close()
    finally:
        server.stop()
        if ring is not None:
            ring.close()
