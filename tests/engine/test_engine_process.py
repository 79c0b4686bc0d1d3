"""`ykshm engine` as a real process: READY over sd_notify, SIGTERM, config errors, snapshot."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from si import protocol as P

ROOT = Path(__file__).resolve().parents[2]


def spawn(args, env=None):
    return subprocess.Popen([sys.executable, "-m", "tools.cli", "engine", *args], cwd=ROOT,
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def stop(proc):
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=10)


@pytest.fixture
def notify_socket():
    path = f"/tmp/ykshm-notify-{uuid.uuid4().hex[:8]}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(20)
    yield path, sock
    sock.close()
    os.unlink(path)


def wait_for(sock, prefix: bytes) -> list[bytes]:
    seen = []
    while True:
        data = sock.recv(4096)
        seen.append(data)
        if any(line.startswith(prefix) for line in data.split(b"\n")):
            return seen


def test_ready_then_sigterm_exits_cleanly(ring_name, notify_socket, tmp_path):
    path, nsock = notify_socket
    sock_path = P.default_socket_path(ring_name)
    cfg = tmp_path / "queues.yaml"
    cfg.write_text("partitions:\n  - name: default\n    queues:\n      - name: root\n"
                   "        queues:\n          - name: a\n")
    proc = spawn(["--config", str(cfg), "--name", ring_name], env={"NOTIFY_SOCKET": path})
    try:
        wait_for(nsock, b"READY=1")
        assert os.path.exists(sock_path)
        assert (os.stat(sock_path).st_mode & 0o777) == 0o600
        assert os.path.exists(f"/dev/shm/{ring_name}.events")
        # speak SI to it
        c = socket.socket(socket.AF_UNIX)
        c.settimeout(10)
        c.connect(sock_path)
        c.sendall(P.encode({"type": "RegisterResourceManager", "rmID": "rm", "id": 1}))
        dec = P.FrameDecoder()
        msgs = []
        while not any(m.get("type") == "Ack" for m in msgs):
            dec.feed(c.recv(65536))
            while (m := dec.next_message()) is not None:
                msgs.append(m)
        assert msgs[0]["ringName"] == ring_name
        c.close()
        from shm import SnapshotReader
        deadline = time.time() + 10
        doc = None
        while time.time() < deadline:
            reader = SnapshotReader.attach(ring_name)
            doc = reader.read()
            reader.close()
            if doc and doc["engine"]["rmIDs"] == ["rm"]:
                break
            time.sleep(0.1)
        assert doc["engine"]["pid"] == proc.pid
        assert doc["queues"]["default"]["children"][0]["queuename"] == "root.a"
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=15)
        assert proc.returncode == 0, err
        assert not os.path.exists(sock_path)
        assert os.path.exists(f"/dev/shm/{ring_name}.events")  # kept for readers
    finally:
        stop(proc)


def test_abstract_notify_socket_and_unlink_on_exit(ring_name):
    name = f"ykshm-test-{uuid.uuid4().hex[:8]}"
    nsock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    nsock.bind("\0" + name)
    nsock.settimeout(20)
    sock_path = f"/tmp/ykshm-{ring_name}.sock"
    proc = spawn(["--name", ring_name, "--socket", sock_path, "--unlink-on-exit"],
                 env={"NOTIFY_SOCKET": "@" + name, "WATCHDOG_USEC": "400000"})
    try:
        wait_for(nsock, b"READY=1")
        wait_for(nsock, b"WATCHDOG=1")  # pinged from the scheduling loop
        os.kill(proc.pid, signal.SIGINT)
        proc.communicate(timeout=15)
        assert proc.returncode == 0
        assert not os.path.exists(f"/dev/shm/{ring_name}.events")
        assert not os.path.exists(sock_path)
    finally:
        nsock.close()
        stop(proc)


@pytest.mark.parametrize("text,key", [
    ("partitions:\n  - name: default\n    queues:\n      - name: root\n        queues:\n"
     "          - name: a\n          - name: b\n            resources:\n              max:\n"
     "                memory: lots\n", "partitions[0].queues[0].queues[1].resources.max.memory"),
    ("service:\n  event:\n    trackingEventsEnabled: maybe\n",
     "service.event.trackingEventsEnabled"),
])
def test_bad_config_exits_2_with_one_line(tmp_path, ring_name, text, key):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    proc = spawn(["--config", str(cfg), "--name", ring_name])
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert key in lines[0] and lines[0].startswith("ykshm engine: error:")
    assert not os.path.exists(f"/dev/shm/{ring_name}.events")


def test_socket_in_use_fails_with_one_line(ring_name, tmp_path):
    sock_path = str(tmp_path / "busy.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(sock_path)
    listener.listen(1)
    try:
        proc = spawn(["--name", ring_name, "--socket", sock_path])
        out, err = proc.communicate(timeout=20)
        assert proc.returncode == 1
        assert len(err.strip().splitlines()) == 1 and "listening" in err
    finally:
        listener.close()


def test_sighup_reloads_queues(ring_name, notify_socket, tmp_path):
    path, nsock = notify_socket
    cfg = tmp_path / "queues.yaml"
    cfg.write_text("partitions:\n  - name: default\n    queues:\n      - name: root\n"
                   "        queues:\n          - name: a\n")
    proc = spawn(["--config", str(cfg), "--name", ring_name,
                  "--socket", str(tmp_path / "e.sock")], env={"NOTIFY_SOCKET": path})
    try:
        wait_for(nsock, b"READY=1")
        cfg.write_text("partitions:\n  - name: default\n    queues:\n      - name: root\n"
                       "        queues:\n          - name: a\n          - name: b\n")
        os.kill(proc.pid, signal.SIGHUP)
        from shm import SnapshotReader
        deadline = time.time() + 10
        names = []
        while time.time() < deadline:
            reader = SnapshotReader.attach(ring_name)
            doc = reader.read()
            reader.close()
            names = [q["queuename"] for q in doc["queues"]["default"]["children"]]
            if "root.b" in names:
                break
            time.sleep(0.1)
        assert names == ["root.a", "root.b"]

        # a bad file on the next SIGHUP: refused, the old queues stay, and `ykshm status` says so
        cfg.write_text("partitions:\n  - name: default\n    bogus: 1\n    queues:\n      - name: root\n")
        os.kill(proc.pid, signal.SIGHUP)

        def refused():
            reader = SnapshotReader.attach(ring_name)
            try:
                return reader.read()["engine"].get("reloadError")
            finally:
                reader.close()

        deadline = time.time() + 10
        while time.time() < deadline and not refused():
            time.sleep(0.1)
        assert "bogus" in refused()["message"]
        status = subprocess.run([sys.executable, "-m", "tools.cli", "status", "--name", ring_name],
                                capture_output=True, text=True, timeout=30)
        assert "config reload refused" in status.stdout and "bogus" in status.stdout, status.stdout
        reader = SnapshotReader.attach(ring_name)
        assert [q["queuename"] for q in reader.read()["queues"]["default"]["children"]] == names
        reader.close()
        os.kill(proc.pid, signal.SIGTERM)
        proc.communicate(timeout=15)
        assert proc.returncode == 0
    finally:
        stop(proc)
