"""The Streams controller's bundle endpoint address against the real kube-apiserver (issue 31 item
4, last bullet): bound to loopback (the systemd default `--api-bind 127.0.0.1:0`), it would put
127.0.0.1 into every job's `streams-api` Endpoints, which a real kube-apiserver refuses (422), and
every Job would fail. The controller asks the API server at start (a dry-run create) and stops
with one line naming `--api-bind`; bound to an address of the run's pod range it starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from simcluster import pki
from tools import harness, run_identities


def streams_argv(plane, tmp: Path, bind: str) -> list[str]:
    plane.kubectl("apply", "-f", str(run_identities.write_policy(tmp / "policy.yaml")))
    config = pki.client_kubeconfig(plane.pki, "ykshm-streams", f"{run_identities.USER_PREFIX}streams",
                                   (run_identities.GROUP,), plane.server)
    return [*plane.enter(), sys.executable, "-m", "tools.cli", "streams", "--kubeconfig", str(config),
            "--install-crds", "--no-operators", "--bundle-dir", str(tmp), "--cache-dir", str(tmp / "cache"),
            "--api-bind", bind]


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=harness.ROOT)


def test_a_loopback_api_bind_is_one_line_at_start_not_a_failed_job(plane, tmp_path):
    done = subprocess.run(streams_argv(plane, tmp_path, "127.0.0.1:0"), capture_output=True, text=True,
                          env=env(), cwd=harness.ROOT, timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert lines[-1].startswith("ykshm streams: error: --api-bind 127.0.0.1:0: the API server refuses 127.0.0.1 "
                                "in the streams-api Endpoints"), lines
    assert "loopback" in lines[-1]
    # a dry run: nothing was written
    assert plane.kubectl("get", "endpoints", "streams-api", check=False).returncode != 0


def test_an_api_bind_in_the_pod_range_is_accepted(plane, tmp_path):
    log = tmp_path / "streams.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(streams_argv(plane, tmp_path, "10.244.1.5:0"), stdout=out, stderr=out,
                                env=env(), cwd=harness.ROOT, stdin=subprocess.DEVNULL)
    try:
        def accepted():
            assert proc.poll() is None, log.read_text()
            return "accepted by the API server for the streams-api Endpoints" in log.read_text()
        harness.wait_for(accepted, 90, "the controller past its address check", interval=0.2)
        assert "bundle endpoint 10.244.1.5:" in log.read_text()
    finally:
        proc.terminate()
        proc.wait(20)
