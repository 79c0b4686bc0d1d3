"""`ykshm status --name NAME` against a real `ykshm run` (issue 35.5): the instance's own roles,
its web's real worker count, `--json`, and exit 1 with the reason when a role is missing."""

from __future__ import annotations

import os
import signal
import subprocess

import orjson

from runharness import ROOT, ykshm


def status(name: str) -> subprocess.CompletedProcess:
    return subprocess.run([*ykshm(), "status", "--name", name, "--json"], cwd=ROOT, capture_output=True,
                          timeout=60)


def test_status_of_a_run_counts_its_roles_and_workers_and_fails_when_one_is_missing(make_run, ring_name):
    inst = make_run()
    res = status(ring_name)
    doc = orjson.loads(res.stdout)
    assert res.returncode == 0, (res.stderr, doc["problems"])
    roles = [p["role"] for p in doc["processes"]]
    assert sorted(r for r in roles if r != "web-worker") == sorted(
        ["run", "sim-cluster", "engine", "shim", "streams", "admission", "web"]), roles
    assert roles.count("web-worker") == 2          # --workers 2, not the resource tracker as well
    assert doc["problems"] == [] and doc["ring"]["writerAlive"]

    # the supervisor paused (it would restart the shim at once), the shim gone: degraded, exit 1
    shim = inst.roles()["shim"]
    os.kill(inst.pid, signal.SIGSTOP)
    try:
        os.kill(shim, signal.SIGKILL)
        res = subprocess.run([*ykshm(), "status", "--name", ring_name], cwd=ROOT, capture_output=True,
                             text=True, timeout=60)
        assert res.returncode == 1, res.stdout
        assert "problems: shim is not running" in res.stdout
        assert res.stderr.strip() == f"ykshm status: error: instance '{ring_name}' is degraded: shim is not running"
    finally:
        os.kill(inst.pid, signal.SIGCONT)
