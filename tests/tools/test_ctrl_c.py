"""Ctrl-C always stops a `ykshm` command, and a killed benchmark leaves no process or semaphore.

A shell without job control (a script's `ykshm ... &`, a CI runner) starts background commands
with SIGINT ignored; Python keeps it ignored, so before `run_main` took SIGINT back, `kill -INT`
did nothing to `ring tail -f` or `bench ring --stress` (issue 26.10). These tests start the commands
exactly that way.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from ykcli import spawn, stop, wait_for

ROOT = Path(__file__).resolve().parents[2]


def _sigint_ignored() -> None:
    """What a non-interactive shell does to a command it puts in the background."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stopped_within(proc: subprocess.Popen, sig: int) -> tuple[int, float]:
    t0 = time.monotonic()
    os.kill(proc.pid, sig)
    code = proc.wait(10)
    return code, time.monotonic() - t0


def _finish(proc: subprocess.Popen) -> None:
    """Stop it by pid if still there, and close our ends of its pipes."""
    stop(proc)
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def _segments(name: str) -> list[str]:
    return glob.glob(f"/dev/shm/{name}.*")


def _semaphores(pids: list[int]) -> set[str]:
    """The multiprocessing semaphores (/dev/shm/sem.*) these processes have mapped."""
    names = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8") as f:
                names |= {line.split()[-1] for line in f if "/dev/shm/sem." in line}
        except FileNotFoundError:
            pass
    return names


def test_tail_follow_stops_on_sigint_even_if_started_with_it_ignored(ring_name):
    spawn("ring", "create", "--name", ring_name, "--capacity", "64").wait(30)
    proc = spawn("ring", "tail", "--name", ring_name, "-f", stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE, preexec_fn=_sigint_ignored)
    try:
        # running and following: its ring reader is mapped
        wait_for(lambda: any(ring_name in m.path for m in psutil.Process(proc.pid).memory_maps()),
                 timeout=30)
        code, took = _stopped_within(proc, signal.SIGINT)
        assert code == 0 and took < 1.0, (code, took)
        assert b"Traceback" not in proc.stderr.read()
    finally:
        _finish(proc)


def _start_stress(ring_name: str, **kwargs) -> tuple[subprocess.Popen, list[int]]:
    proc = spawn("bench", "ring", "--stress", "--seconds", "60", "--capacity", "4096",
                 "--readers", "1", "--write-rate", "200000", "--name", ring_name,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)
    wait_for(lambda: _segments(ring_name), timeout=30)
    # the writer and the reader are up once both map the ring
    def children():
        kids = psutil.Process(proc.pid).children()
        mapping = [k.pid for k in kids if any(ring_name in m.path for m in _maps(k))]
        return mapping if len(mapping) >= 2 else None
    return proc, wait_for(children, timeout=30)


def _maps(p: psutil.Process) -> list:
    try:
        return p.memory_maps()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def test_bench_stress_stops_on_sigint_even_if_started_with_it_ignored(ring_name):
    proc, kids = _start_stress(ring_name, preexec_fn=_sigint_ignored)
    try:
        code, took = _stopped_within(proc, signal.SIGINT)
        assert code == 130 and took < 1.0, (code, took)
        assert "interrupted" in proc.stderr.read().decode()
        assert not [k for k in kids if psutil.pid_exists(k)]
    finally:
        _finish(proc)
    assert _segments(ring_name) == []


def test_bench_stress_sigterm_is_as_clean_as_ctrl_c(ring_name):
    proc, kids = _start_stress(ring_name)
    sems = _semaphores(kids)
    assert sems, "the stress processes share multiprocessing semaphores"
    try:
        code, took = _stopped_within(proc, signal.SIGTERM)
        assert code == 130 and took < 1.0, (code, took)
    finally:
        _finish(proc)
    assert _segments(ring_name) == []
    assert not [k for k in kids if psutil.pid_exists(k)]
    wait_for(lambda: not [s for s in sems if os.path.exists(s)], timeout=5)


def test_killed_bench_leaves_no_process_and_no_semaphore(ring_name):
    """kill -9 of the benchmark: its stress processes notice and leave, and with them gone
    multiprocessing's resource tracker unlinks the semaphores."""
    proc, kids = _start_stress(ring_name)
    sems = _semaphores(kids)
    assert sems
    try:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        wait_for(lambda: not [k for k in kids if psutil.pid_exists(k)], timeout=10)   # a loaded machine
        wait_for(lambda: not [s for s in sems if os.path.exists(s)], timeout=5)
    finally:
        for k in kids:   # only if the assertion above failed: the processes we started
            if psutil.pid_exists(k):
                os.kill(k, signal.SIGKILL)
        _finish(proc)


def test_a_ctrl_c_during_the_subcommands_imports_arrives_after_them(tmp_path):
    """A Ctrl-C while `ykshm` imports its subcommand waits for the import to finish: raised inside
    an extension module's initialisation it crashed the interpreter (orjson: SIGSEGV, the CI's
    `ykshm run` start-up failure). A module that is sent SIGINT while it loads plays the moment:
    it must load whole, and the interrupt come after, where `ykshm` turns it into its exit code."""
    (tmp_path / "loading_mod.py").write_text(
        "import os, signal\nos.kill(os.getpid(), signal.SIGINT)\nfinished = sum(range(100000)) > 0\n")
    script = ("import sys\nsys.path.insert(0, sys.argv[1])\nfrom tools import cli\n"
              "try:\n    cli._import_holding_sigint('loading_mod')\n"
              "except KeyboardInterrupt:\n    print('interrupted after the import:', sys.modules['loading_mod'].finished)\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert (done.returncode, done.stdout) == (0, "interrupted after the import: True\n"), done.stderr
