"""`ykshm admission` as a user starts it: bad flags and a missing Secret are one line on stderr
(exit 2 and exit 1), never a traceback; SIGTERM stops it with exit 0."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid

import pytest

from tools.harness import ROOT, Cluster

from admission_harness import AdmissionWorld


def ykshm(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.cli", "admission", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("argv, text", [
    (["--api-server", "http://127.0.0.1:1", "--webhook-url", "http://x"], "must be an https:// URL"),
    (["--api-server", "http://127.0.0.1:1", "--bind", "9089"], "expected HOST:PORT or fd://N"),
    (["--api-server", "http://127.0.0.1:1", "--key-bits", "1024"], "invalid choice"),
    (["--api-server", "http://127.0.0.1:1", "--rotation-grace", "-1"], "must be 0 or more seconds"),
])
def test_bad_flags_are_one_line_exit_2(argv, text):
    done = ykshm(*argv)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ykshm admission: error:") and text in lines[0]


def test_a_missing_secret_is_exit_1_with_the_fix():
    with Cluster(f"t-admx-{uuid.uuid4().hex[:8]}") as cluster:
        cluster.start_sim()
        done = ykshm("--api-server", cluster.url, "--namespace", "nowhere", "--bind", "127.0.0.1:0",
                     "--key-bits", "2048")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last == ("ykshm admission: error: Secret nowhere/admission-controller-secrets does not "
                    "exist; create it (kubectl -n nowhere create secret generic "
                    "admission-controller-secrets)")
    assert "Traceback" not in done.stderr


def test_sigterm_stops_it_cleanly():
    world = AdmissionWorld(f"t-admt-{uuid.uuid4().hex[:8]}")
    try:
        world.start()
        assert world.proc is not None
        assert world.proc.stop(signal.SIGTERM, timeout=15) == 0
        assert "Traceback" not in world.proc.tail(200)
    finally:
        world.close()
