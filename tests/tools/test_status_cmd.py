"""`ykshm status`: finds an instance's processes by command line, reads ring and snapshot."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import orjson
import pytest

from tools.status_cmd import parse_cmdline
from ykcli import ROOT, env, one_line_error, stop, ykshm


@pytest.mark.parametrize("cmdline,expected", [
    (["/usr/local/bin/ykshm", "engine", "--config", "/etc/ykshm/ykshm.yaml", "--name", "prod"],
     ("engine", "prod")),
    (["/opt/venv/bin/python", "/opt/venv/bin/ykshm", "web", "--bind", "fd://3", "--name=x"],
     ("web", "x")),
    (["python3", "-m", "tools.cli", "shim", "--api-server", "http://a"], ("shim", "ykshm")),
    (["ykshm", "sim-cluster"], ("sim-cluster", "ykshm")),
    (["ykshm", "ring", "tail", "--name", "prod"], None),
    (["ykshm"], None),
    (["python3", "something.py", "engine"], None),
    ([], None),
])
def test_parse_cmdline(cmdline, expected):
    assert parse_cmdline(cmdline) == expected


FAKE = """
import os, subprocess, sys, time
sys.path.insert(0, {root!r})
role, name = sys.argv[1], sys.argv[sys.argv.index("--name") + 1]
if role == "engine":
    from shm import RingWriter, SnapshotWriter
    w = RingWriter.create(name, 100, 10)
    w.publish(2, 2, 200, object_id="app-1")
    s = SnapshotWriter.create(name, 1 << 20)
    s.publish({{"engine": {{"pid": os.getpid(), "instanceUUID": w.instance_uuid, "cycles": 7}},
               "partitions": [{{"name": "default"}}],
               "applications": {{"default": [{{"applicationID": "a"}}, {{"applicationID": "b"}}]}},
               "nodes": {{"default": [{{"nodeID": "n1"}}]}}}})
    print("ready", flush=True)
    while True:
        w.heartbeat()
        time.sleep(0.05)
else:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print("ready", child.pid, flush=True)
    try:
        time.sleep(600)
    finally:
        child.kill()
"""


@pytest.fixture
def fake_ykshm(tmp_path):
    path = tmp_path / "ykshm"
    path.write_text(FAKE.format(root=str(ROOT)))
    procs = []

    def start(*args):
        proc = subprocess.Popen([sys.executable, str(path), *args], stdout=subprocess.PIPE,
                                cwd=ROOT, env=env())
        procs.append(proc)
        line = proc.stdout.readline().split()
        assert line[0] == b"ready"
        return proc, [int(x) for x in line[1:]]

    yield start
    for proc in procs:     # its child first, by pid: a SIGTERM ends the fake before its `finally`
        for pid in psutil_descendants(proc.pid):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        stop(proc)


def test_status_of_a_running_instance(ring_name, fake_ykshm):
    engine, _ = fake_ykshm("engine", "--name", ring_name)
    web, (worker,) = fake_ykshm("web", "--bind", "fd://3", "--workers", "1", "--name", ring_name)
    other, _ = fake_ykshm("web", "--name", ring_name + "-other")
    r = ykshm("status", "--name", ring_name, "--json")
    assert r.returncode == 0, r.stderr
    doc = orjson.loads(r.stdout)
    by_pid = {p["pid"]: p for p in doc["processes"]}
    assert set(by_pid) == {engine.pid, web.pid, worker}
    assert by_pid[engine.pid]["role"] == "engine"
    assert by_pid[engine.pid]["health"] == "ok"
    assert by_pid[engine.pid]["heartbeatAgeSeconds"] < 5
    assert by_pid[web.pid]["role"] == "web"
    assert by_pid[worker]["role"] == "web-worker"
    assert all(p["rssBytes"] > 0 and p["uptimeSeconds"] >= 0 for p in by_pid.values())
    ring = doc["ring"]
    assert ring["writerPID"] == engine.pid and ring["writerAlive"] is True
    assert (ring["lowestID"], ring["highestID"]) == (0, 0)
    snap = doc["engine"]
    assert (snap["partitions"], snap["applications"], snap["nodes"]) == (1, 2, 1)
    assert snap["cycles"] == 7
    r = ykshm("status", "--name", ring_name)
    out = r.stdout.decode()
    assert r.returncode == 0
    assert "PID" in out and "engine" in out and "web-worker" in out
    assert f"writer {engine.pid} alive" in out
    assert str(other.pid) not in out


def test_status_of_nothing(ring_name):
    r = ykshm("status", "--name", ring_name)
    assert r.returncode == 1
    assert ring_name in one_line_error(r)


def test_status_bad_name():
    r = ykshm("status", "--name", "../etc")
    assert r.returncode == 2
    one_line_error(r)


def test_status_of_a_real_engine(ring_name, tmp_path):
    """`ykshm engine` itself: found by its command line, heartbeat fresh, snapshot counted."""
    from ykcli import spawn, wait_for

    sock = str(tmp_path / "si.sock")
    proc = spawn("engine", "--name", ring_name, "--socket", sock, "--unlink-on-exit",
                 "--config", str(ROOT / "deploy" / "ykshm.yaml"),
                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def ready():
            if proc.poll() is not None:
                pytest.fail(f"ykshm engine exited: {proc.stderr.read().decode()[-300:]}")
            r = ykshm("status", "--name", ring_name, "--json")
            if r.returncode != 0:
                return None
            doc = orjson.loads(r.stdout)
            return doc if doc["ring"] and doc["engine"] and doc["engine"].get("published") else None

        doc = wait_for(ready, timeout=30, interval=0.3)
        (engine,) = [p for p in doc["processes"] if p["role"] == "engine"]
        assert engine["pid"] == proc.pid
        assert engine["health"] == "ok", engine
        assert doc["ring"]["writerPID"] == proc.pid and doc["ring"]["writerAlive"]
        assert doc["engine"]["partitions"] >= 1
        assert doc["engine"]["enginePID"] == proc.pid
    finally:
        stop(proc)


def test_status_shows_a_failed_shim_and_why(ring_name):
    """The shim's Failed state (issue 12's recovery deadline) is visible in `ykshm status`."""
    from common.shimstatus import status_path

    path = status_path(ring_name, create=True)
    with open(path, "w") as fh:
        json.dump({"state": "Failed", "failure": "recovery did not complete within 30 s", "registrations": 1,
                   "recoveries": 1, "stopped": True, "pid": 0}, fh)
    try:
        r = ykshm("status", "--name", ring_name)
    finally:
        os.unlink(path)
    assert r.returncode == 0, r.stderr
    assert "shim: Failed (recovery did not complete within 30 s), 1 registration, 1 recovery, stopped" \
        in r.stdout.decode()


CHAIN = """
import subprocess, sys, time
role = sys.argv[1]
if role == "run":          # a `ykshm run --name OTHER` whose process pod hangs off a non-role fork server
    server = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               "p = subprocess.Popen([sys.executable, sys.argv[1], 'pe-sim']); "
                               "print('ready', p.pid, flush=True); time.sleep(600)", __file__])
    time.sleep(600)
else:
    time.sleep(600)
"""


def test_a_process_pod_belongs_to_its_runs_instance_not_the_default(ring_name, tmp_path):
    """A PE pod's `ykshm pe-sim` (no --name) under another run's sim-cluster fork server is that
    run's, not listed under the default instance nor under ours (newcomer-2 row 22a)."""
    path = tmp_path / "ykshm"
    path.write_text(CHAIN)
    other = ring_name + "o"
    run = subprocess.Popen([sys.executable, str(path), "run", "--name", other], stdout=subprocess.PIPE, cwd=ROOT)
    try:
        line = run.stdout.readline().split()
        assert line[0] == b"ready"
        pe_sim = int(line[1])
        mine = orjson.loads(ykshm("status", "--name", ring_name, "--json").stdout)
        assert pe_sim not in {p["pid"] for p in mine["processes"]}
        default = ykshm("status", "--json")     # the default instance "ykshm"
        assert pe_sim not in {p["pid"] for p in orjson.loads(default.stdout)["processes"]}
        theirs = orjson.loads(ykshm("status", "--name", other, "--json").stdout)
        assert {p["pid"]: p["role"] for p in theirs["processes"]} == {run.pid: "run", pe_sim: "pe-sim"}
    finally:
        for pid in psutil_descendants(run.pid):
            os.kill(pid, 9)
        stop(run)


def psutil_descendants(pid: int) -> list[int]:
    import psutil

    return [p.pid for p in psutil.Process(pid).children(recursive=True)]
