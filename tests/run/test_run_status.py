"""`ykshm status --name NAME` against a real `ykshm run` (issue 35.5): the instance's own roles,
its web's real worker count, `--json`, and exit 1 with the reason when a role is missing."""

from __future__ import annotations

import os
import signal
import subprocess

import orjson

from runharness import ROOT, alive, ykshm

from tools.harness import wait_for


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
        wait_for(lambda: not alive(shim), 10, "the shim gone (a zombie of the paused supervisor)")
        res = subprocess.run([*ykshm(), "status", "--name", ring_name], cwd=ROOT, capture_output=True,
                             text=True, timeout=60)
        assert res.returncode == 1, res.stdout
        assert "problems: shim is not running" in res.stdout
        assert res.stderr.strip() == f"ykshm status: error: instance '{ring_name}' is degraded: shim is not running"
    finally:
        os.kill(inst.pid, signal.SIGCONT)


def test_every_role_logs_one_timestamped_line_format(make_run):
    """The default text format (issue 35.6): in the run's part of the log every record is
    `TIME LEVEL ROLE[PID] LOGGER: MESSAGE`, from each role, and no line is written twice."""
    import re

    inst = make_run(extra=("--log-level", "info"))
    inst.stop()
    text = inst.log_file.read_text()
    lines = text[text.rindex("==== "):].splitlines()[1:]
    record = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR|CRITICAL) "
                        r"([a-z-]+)\[(\d+)\] \S+: ")
    roles = set()
    for line in lines:
        m = record.match(line)
        if m:
            roles.add(m.group(2))
        else:   # only a traceback's lines (after its record) or a role's one-line exit message
            assert line.startswith((" ", "Traceback", "ykshm ")) or re.match(r"^[\w.]+(Error|Exception|Group)\b", line), line
    assert {"engine", "web", "shim", "admission", "streams", "sim-cluster"} <= roles, roles
    assert not [line for line in set(lines) if lines.count(line) > 1 and record.match(line)]
