"""`ykshm run` fails loudly and at once (issue 35.1): bad values are one line and exit 2 before
anything starts, a role that exits during start ends the run within seconds with that role's own
error line and exit 1, and Ctrl-C stops everything at any moment of start-up.

Real `ykshm run` processes on free 127.0.0.1 ports under a unique --name, stopped by pid.
"""

from __future__ import annotations

import glob
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from runharness import RunInstance, cmdline, free_port, pids_naming
from test_run_cli import one_error_line, run_cli

from common.runtimedir import runtime_dir


@pytest.mark.parametrize("args,message", [
    (["--port", "99999"], "argument --port: 99999 is out of range (1 to 65535)"),
    (["--api-port", "0"], "argument --api-port: 0 is out of range (1 to 65535)"),
    (["--admission-port", "-1"], "argument --admission-port: -1 is out of range (1 to 65535)"),
    (["--nodes", "-3"], "argument --nodes: -3 is out of range (0 to 100000)"),
    (["--nodes", "100001"], "argument --nodes: 100001 is out of range (0 to 100000)"),
    (["--log-level", "loud"], "argument --log-level: invalid level 'loud'"),
    (["--log-format", "xml"], "argument --log-format: invalid choice: 'xml'"),
    (["--ui-dir", "/nonexistent"], "--ui-dir '/nonexistent' is not a directory"),
])
def test_a_bad_value_is_one_line_exit_2_and_starts_nothing(args, message, ring_name):
    res, took = run_cli(*args, "--name", ring_name, "--no-demo")
    assert res.returncode == 2, res.stderr
    assert message in one_error_line(res)
    assert took < 10
    assert not pids_naming(ring_name)
    assert glob.glob(f"/dev/shm/{ring_name}*") == []


def test_a_role_that_exits_during_start_ends_the_run_with_its_line(ring_name):
    """The engine refuses to replace a stale non-file /dev/shm/NAME.state and exits 1: the run
    says so at once (not after a 60 s wait and a restart loop) and leaves nothing behind."""
    blocker = Path(f"/dev/shm/{ring_name}.state")
    blocker.mkdir()
    inst = RunInstance(ring_name, nodes=1)
    try:
        began = time.monotonic()
        code = inst.proc.wait(timeout=30)
        took = time.monotonic() - began
        assert code == 1, inst.stderr()
        lines = inst.stderr().strip().splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith("ykshm run: error: engine exited with 1 during start: "
                                   "ykshm engine: error: cannot create the snapshot"), lines[0]
        assert f"refusing to replace {blocker}" in lines[0]
        assert took < 20, took
        assert inst.proc.stdout.read() == b""           # no banner
        assert inst.leftovers()["pids"] == []
        assert not pids_naming(ring_name)
        assert not (runtime_dir() / f"{ring_name}.kubeconfig").exists()
    finally:
        blocker.rmdir()
        inst.close()
    assert glob.glob(f"/dev/shm/{ring_name}*") == []


@pytest.mark.parametrize("delay", [0.1, 0.4, 1.0, 2.0, 3.5])
def test_ctrl_c_at_any_moment_of_start_up_stops_everything(delay, ring_name):
    """SIGINT while the subcommand loads, the PKI is made, sim-cluster comes up, the roles start or
    the run waits for the web: the run exits within seconds with 0 (Ctrl-C is how a user stops
    `ykshm run`, whenever it comes: not the shell's 130 while the modules load or the flags are
    checked), without a traceback, and no process, segment or file of it is left. (The first ~40 ms
    are the interpreter and pip's console script importing `re` before any ykshm code runs: a
    Ctrl-C there is Python's own traceback.)"""
    before = set(os.listdir(runtime_dir()))
    inst = RunInstance(ring_name, nodes=2)
    try:
        time.sleep(delay)
        inst.remember()
        os.kill(inst.pid, signal.SIGINT)
        began = time.monotonic()
        code = inst.proc.wait(timeout=20)
        assert time.monotonic() - began < 12
        assert code == 0, inst.stderr()
        assert "Traceback" not in inst.stderr()
        left = inst.leftovers()
        assert left["pids"] == [] and left["shm"] == [], left
        assert not pids_naming(ring_name)
        after = {n for n in set(os.listdir(runtime_dir())) - before    # this run's, not another's
                 if n.startswith(ring_name) and not n.endswith(".log")}
        assert after == set(), after
    finally:
        inst.close()


def test_ctrl_c_while_the_flags_are_checked_is_a_clean_stop_exit_0(ring_name):
    """Ctrl-C before the run has started anything: here while its preflight waits on a Redis
    (`--export`, a listener that accepts and never answers, so the moment is certain). Exit 0 as
    at any later moment, not the shell's 130: it is how a user stops `ykshm run`."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        inst = RunInstance(ring_name, nodes=1, extra=("--export", f"redis://127.0.0.1:{silent.getsockname()[1]}"))
        try:
            silent.settimeout(20)
            conn, _ = silent.accept()     # the run's preflight is connected and waiting for the reply
            with conn:
                os.kill(inst.pid, signal.SIGINT)
                code = inst.proc.wait(timeout=10)
            assert code == 0, inst.stderr()
            assert inst.stderr() == "" and inst.proc.stdout.read() == b""   # no traceback, no banner
            assert not pids_naming(ring_name)
            assert glob.glob(f"/dev/shm/{ring_name}*") == []
        finally:
            inst.close()


def test_port_in_use_names_the_flag_that_moves_it(ring_name):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        for flag in ("--port", "--api-port", "--admission-port"):
            ports = {"--port": free_port(), "--api-port": free_port(), "--admission-port": free_port(), flag: port}
            res, _ = run_cli(*[str(x) for kv in ports.items() for x in kv], "--name", ring_name, "--no-demo")
            assert res.returncode == 1
            assert one_error_line(res).endswith(f"choose another with {flag} PORT"), res.stderr


def test_log_flags_reach_every_role(make_run, ring_name):
    """`ykshm run --log-format json`: every role's lines in the log are JSON objects with a time,
    and each line is written once (the admission controller's start line: one handler, not two)."""
    import json

    inst = make_run(extra=("--log-format", "json", "--log-level", "info"))
    roles = inst.roles()
    for role, pid in roles.items():
        assert "--log-format json" in cmdline(pid), role
    inst.stop()
    text = inst.log_file.read_text()
    run_lines = text[text.rindex("==== "):].splitlines()[1:]
    records = []
    for line in run_lines:
        if line.startswith(("ykshm ", "Traceback", " ")):
            continue    # a role's one-line exit message, not a log record
        records.append(json.loads(line))
    assert {r["role"] for r in records} >= {"engine", "web", "shim", "admission", "streams"}, \
        {r["role"] for r in records}
    assert all(r["ts"].endswith("Z") and r["level"] and r["msg"] for r in records)
    running = [r["msg"] for r in records if r["role"] == "admission" and r["msg"].startswith("Running on")]
    assert len(running) == len(set(running)) == 1, running


def test_ui_dir_is_served_at_the_banners_url(make_run, tmp_path):
    """`ykshm run --ui-dir DIR` (newcomer-2 row 31: only `ykshm web` had it, and a second web
    beside the run is refused): DIR's index.html at /, deep links too, the API beside it."""
    import httpx

    (tmp_path / "index.html").write_text("<html>probe-ui</html>")
    inst = make_run(extra=("--ui-dir", str(tmp_path)))
    for path in ("/", "/queues/root.default"):
        r = httpx.get(inst.url + path, timeout=5)
        assert r.status_code == 200 and "probe-ui" in r.text, (path, r.status_code)
    assert httpx.get(inst.url + "/ws/v1/partitions", timeout=5).status_code == 200


def test_a_yaml_syntax_error_names_its_line_and_column(tmp_path, ring_name):
    bad = tmp_path / "syntax.yaml"
    bad.write_text("partitions:\n  - name: default\n    queues: [\n")
    res, _ = run_cli("--config", str(bad), "--name", ring_name, "--no-demo")
    assert res.returncode == 2
    assert one_error_line(res).endswith(
        "not valid YAML (ParserError, line 4 column 1: did not find expected node content)")
