"""Running `ykshm` as a subprocess, the way a user does, and stopping what we start by pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]


def ykshm_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "tools.cli", *args]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    e.pop("PYTHONWARNINGS", None)
    return e


def ykshm(*args: str, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(ykshm_argv(*args), input=input, capture_output=True, timeout=timeout,
                          cwd=ROOT, env=env())


def spawn(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(ykshm_argv(*args), cwd=ROOT, env=env(), **kwargs)


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 10) -> int:
    """Stop one process we started, by its pid; escalate to SIGKILL."""
    if proc.poll() is None:
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            return proc.wait(timeout)
    return proc.returncode


def ndjson(*events: dict) -> bytes:
    return b"".join(orjson.dumps(e) + b"\n" for e in events)


def one_line_error(result: subprocess.CompletedProcess) -> str:
    """The stderr of a failed command: exactly one line, no traceback."""
    err = result.stderr.decode()
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def wait_for(predicate, timeout: float = 10, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(interval)
