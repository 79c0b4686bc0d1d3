"""Bad input for `ykshm export`: one line and exit 2 at start-up; once running, retries with the
reason in the log and the status, and no event the ring still holds is lost."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from exportharness import ROOT, ExportProcess, stream_entries, wait_for

from bench.redis_server import RedisServer, free_port
from export.keys import Keys
from export.status import read_file
from shm import RingWriter
from shm.bench_support import seed_mix


def run_export(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.cli", "export", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=30,
                          env={**os.environ, **(env or {})})


def one_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


@pytest.mark.parametrize("url", ["http://127.0.0.1:6379", "redis://", "redis://127.0.0.1:99999", "nonsense"])
def test_wrong_url(url, ring_name):
    line = one_line(run_export("--redis", url, "--name", ring_name))
    assert line.startswith("ykshm export: error: bad Redis URL")


def test_nobody_listening(ring_name):
    port = free_port()
    line = one_line(run_export("--redis", f"redis://127.0.0.1:{port}", "--name", ring_name))
    assert f"127.0.0.1:{port}" in line and "cannot connect to Redis" in line


def test_refused_auth_and_password_not_printed(ring_name):
    server = RedisServer(password="s3cret-pw")
    url = f"redis://127.0.0.1:{server.port}"
    try:
        for env in ({}, {"REDISCLI_AUTH": "wrong-pw"}, {"YKSHM_REDIS_URL": f"redis://:wrong-pw@127.0.0.1:{server.port}"}):
            args = ("--redis", url) if "YKSHM_REDIS_URL" not in env else ()
            line = one_line(run_export(*args, "--name", ring_name, env=env))
            assert "authentication refused" in line and "wrong-pw" not in line
        ok = ExportProcess(ring_name, url, env={"REDISCLI_AUTH": "s3cret-pw"})
        writer = RingWriter.create(ring_name, capacity=100)
        writer.publish(2, 2, 201, "app-1", "", "", None)
        client = server.client()
        wait_for(lambda: client.exists(Keys.for_instance(ring_name).events), what="export with the right password")
        assert ok.stop() == 0
        writer.close()
    finally:
        server.close()


def test_key_of_another_type(ring_name, redis_server):
    client = redis_server.client()
    key = Keys.for_instance(ring_name).events
    client.set(key, "not a stream")
    line = one_line(run_export("--redis", redis_server.url, "--name", ring_name))
    assert f"key {key} holds a string, not a stream" in line


@pytest.mark.parametrize("args,expected", [
    (["--max-age", "soon"], "--max-age 'soon'"),
    (["--maxlen", "-1"], "--maxlen -1"),
    (["--maxlen", "10", "--max-age", "1h"], "choose one"),
    (["--name", "a/b"], "--name 'a/b'"),
    (["--redis-name", "x}:{other"], "--redis-name 'x}:{other': no '{' or '}'"),  # its hash tag whole
    (["--name", "}x"], "--name '}x': no '{' or '}'"),
])
def test_bad_options(args, expected, redis_server):
    assert expected in one_line(run_export("--redis", redis_server.url, *args))


def test_running_key_replaced_retries_with_reason_and_loses_nothing(ring_name, redis_server):
    writer = RingWriter.create(ring_name, capacity=10_000)
    client = redis_server.client()
    key = Keys.for_instance(ring_name).events
    exporter = ExportProcess(ring_name, redis_server.url)
    for args in seed_mix(100):
        writer.publish(*args)
    wait_for(lambda: client.exists(key) and client.xlen(key) == 100, what="first events")
    client.delete(key)
    client.rpush(key, "someone else's list")
    for args in seed_mix(100, 3):
        writer.publish(*args)

    def reason():
        doc = read_file(ring_name) or {}
        return doc.get("state") == "retrying" and "WRONGTYPE" in doc.get("last_error", "")

    wait_for(reason, what="WRONGTYPE reported")
    status = subprocess.run([sys.executable, "-m", "tools.cli", "status", "--name", ring_name], cwd=ROOT,
                            capture_output=True, text=True, timeout=30)
    assert "export:" in status.stdout and "WRONGTYPE" in status.stdout
    client.delete(key)          # the user clears it: the ring still holds all 200, all come back
    wait_for(lambda: client.exists(key) and client.xlen(key) == 200, what="everything re-exported")
    assert exporter.stop() == 0
    assert [sid for sid, _ in stream_entries(client, ring_name)] == [(1, i) for i in range(200)]
    assert "WRONGTYPE" in exporter.log() and "Traceback" not in exporter.log()
    writer.close()
