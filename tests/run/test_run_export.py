"""`ykshm run --export URL`: the exporter is one more supervised role; a bad URL stops the run
before anything starts (the exporter's own line, exit 2)."""

from __future__ import annotations

import glob
import signal
import subprocess

from runharness import ROOT, free_port, pids_naming, ykshm
from tools.harness import wait_for

from bench.redis_server import RedisServer
from export.keys import Keys


def test_unreachable_export_url_is_one_line_exit_2_and_starts_nothing(ring_name):
    port = free_port()
    res = subprocess.run([*ykshm(), "run", "--port", str(free_port()), "--api-port", str(free_port()),
                          "--name", ring_name, "--no-demo", "--export", f"redis://127.0.0.1:{port}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ykshm run: error: redis://127.0.0.1:")
    assert "cannot connect to Redis" in lines[0]
    assert not pids_naming(ring_name) and glob.glob(f"/dev/shm/{ring_name}*") == []


def test_run_with_export_fills_the_stream_and_stops_clean(make_run, ring_name):
    server = RedisServer()
    try:
        inst = make_run(extra=("--export", server.url))
        roles = inst.roles()
        assert "export" in roles, roles
        client = server.client()
        key = Keys.for_instance(ring_name).events
        wait_for(lambda: client.exists(key) and client.xlen(key) > 0, 30, "events in Redis")
        # the engine's state too, with its generation
        wait_for(lambda: client.hget(Keys.for_instance(ring_name).state, "generation"), 30, "state in Redis")
        assert inst.stop(signal.SIGTERM) == 0, inst.stderr()
        assert inst.leftovers() == {"shm": [], "pids": [], "status_file": False}
    finally:
        server.close()
