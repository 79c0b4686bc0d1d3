"""`ykshm bench failover`: its bad input, and one short run whose lines report the faults."""

from __future__ import annotations

import re
import signal
import subprocess

import pytest

from ykcli import spawn, stop, ykshm


@pytest.mark.parametrize("args, message", [
    (["--kinds", "kill,nap"], "--kinds 'kill,nap': a comma-separated list of kill, stop, cut"),
    (["--faults", "0"], "--faults must be at least 1"),
    (["--lease-duration", "1", "--renew-deadline", "2", "--retry-period", "0.5"],
     "lease duration 1s must be more than the renew deadline (2s)"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    r = ykshm("bench", "failover", *args)
    assert r.returncode == 2
    assert r.stderr.decode().strip().splitlines() == [f"ykshm bench failover: error: {message}"]


def test_two_faults_with_short_timings():
    proc = spawn("bench", "failover", "--faults", "2", "--kinds", "stop,cut", "--rate", "10",
                 "--nodes", "3", "--lease-duration", "2", "--renew-deadline", "1.5",
                 "--retry-period", "0.25", "--settle", "0.5",
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stdout, stderr = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:   # SIGINT: the bench stops its processes by pid itself
        stop(proc, signal.SIGINT, timeout=60)
        raise
    out = stdout.decode()
    assert proc.returncode == 0, stderr.decode()[-2000:]
    lines = out.splitlines()
    faults = [line for line in lines if line.startswith("fault ")]
    assert [line.split()[2].rstrip(":") for line in faults] == ["stop", "cut"]
    for line in faults:
        assert re.search(r"takeover \d+\.\d{3} s", line)
        assert "old leader's writes after takeover 0, bound twice 0, lost 0 of" in line
        assert re.search(r"old shim exit 1; history: generation \d, \d+ events in Redis, holes 0, "
                         r"differing 0, tail refused \d+$", line), line
    summary = next(line for line in lines if line.startswith("summary:"))
    assert re.search(r"2 faults, takeover p50 \d+\.\d{3} s, p99 \d+\.\d{3} s; \d+ pods "
                     r"\(\d+ deleted once 20 s old\), "
                     r"bound twice 0, lost 0, late writes 0$", summary)
    assert any(re.fullmatch(r"history in Redis: 3 generations, one per leader in the order they led; "
                            r"holes 0, differing 0; events of deposed leaders refused after their "
                            r"successor's first: \d+", line) for line in lines), out
    for kind in ("stop", "cut"):
        assert any(re.fullmatch(rf"  {kind}: 1 faults, takeover p50 \d+\.\d{{3}} s, p99 \d+\.\d{{3}} s",
                                line) for line in lines), out
    assert any(line.startswith("UG usage of the leader's engine equals the truth recomputed from "
                               "the API: {") for line in lines), out
