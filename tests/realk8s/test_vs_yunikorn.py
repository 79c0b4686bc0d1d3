"""`ykshm bench vs-yunikorn` end to end at a tiny scale (issue 32): a real control plane, 20 KWOK
nodes, Apache YuniKorn's scheduler and ykshm in alternating rounds on the same pods; both bind
every pod of every workload, and the table has a row per workload and scheduler.

YuniKorn and KWOK must be built (`ykshm realk8s build-peers`): a missing build fails the test with
that command, it is never skipped.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.realk8s import realplane
from tests.tools.ykcli import env as ykshm_env
from tests.tools.ykcli import ykshm_argv
from tools import harness, peers_build

WORKLOADS = ("2x5", "limits", "recovery")
PODS = {"2x5": 10, "limits": 40, "recovery": 10}


@pytest.mark.peers
def test_both_schedulers_bind_every_pod_and_every_row_is_there():
    realplane.require_binaries()
    assert peers_build.built() is not None, (f"YuniKorn and KWOK are not built ({peers_build.bin_dir()}): "
                                             f"run `{peers_build.BUILD_COMMAND}` before this test")
    done = subprocess.run([*ykshm_argv("bench", "vs-yunikorn"), "--shape", "2x5", "--nodes", "20", "--timeout", "60",
                           "--json"], capture_output=True, text=True, env=ykshm_env(), cwd=harness.ROOT, timeout=400)
    print(done.stderr)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout)
    rows = {(r["workload"], r["scheduler"]): r for r in figures["results"]}
    assert set(rows) == {(w, s) for w in WORKLOADS for s in ("yunikorn", "ykshm")}
    for (workload, _), row in rows.items():
        assert row["ok"] and row["pods"] == PODS[workload], row
        assert row["pods_per_s"] > 0 and row["p99_ms"] >= row["p50_ms"] > 0 and row["peak_rss_mb"] > 0, row
    assert rows[("recovery", "yunikorn")]["recovery_s"] > 0 and rows[("recovery", "ykshm")]["recovery_s"] > 0
    assert set(figures["parity"]) == set(WORKLOADS)
    for line in done.stderr.splitlines():
        assert "FAILED" not in line, line
