"""`ykshm run --export URL`: the exporter is one more supervised role; a bad URL stops the run
before anything starts (the exporter's own line, exit 2)."""

from __future__ import annotations

import glob
import signal
import subprocess

from runharness import ROOT, children, cmdline, free_port, pids_naming, ykshm
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


def test_two_replicas_export_one_history_the_standby_waiting(make_run, ring_name):
    """`--replicas 2 --export`: an exporter per replica under one name in Redis; only the
    leader's engine is exported (generation 1 is its instance), the standby's exporter waits."""
    from export.status import read_file
    from shm import RingReader

    server = RedisServer()
    try:
        inst = make_run(extra=("--replicas", "2", "--export", server.url))
        exporters = [cmdline(pid) for pid in children(inst.pid) if "ykshm export " in cmdline(pid)]
        assert len(exporters) == 2 and all("--leader-only" in cmd for cmd in exporters), exporters
        client = server.client()
        keys = Keys.for_instance(ring_name)
        wait_for(lambda: client.exists(keys.events) and client.xlen(keys.events) > 0, 30, "events in Redis")
        uuids = {}
        for name in (ring_name, f"{ring_name}-2"):
            reader = RingReader.attach(name)
            try:
                uuids[name] = reader.instance_uuid
            finally:
                reader.close()
        first = client.hget(keys.instances, "gen:1").decode()       # whichever replica won the Lease
        assert first in uuids.values()
        standby = next(name for name, uuid in uuids.items() if uuid != first)
        wait_for(lambda: (read_file(standby) or {}).get("state") == "waiting_for_leader", 30,
                 "the standby's exporter waiting")
        assert client.hget(keys.instances, "gen:2") is None
        assert inst.stop(signal.SIGTERM) == 0, inst.stderr()
        assert inst.leftovers() == {"shm": [], "pids": [], "status_file": False}
    finally:
        server.close()
