"""`ykshm bench report`: one table of figures against their targets, from real benchmark runs."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from bench import report


def _ykshm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tools.cli", *args], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)


# (higher is better, floor, next, value) -> verdict, written from the module's rule, not its code
VERDICTS = [
    (False, 15, 6, 5.0, "ok"),
    (False, 15, 6, 6.0, "ok"),
    (False, 15, 6, 9.8, "next short"),
    (False, 15, 6, 15.1, "short"),
    (True, 833, 1500, 1600, "ok"),
    (True, 833, 1500, 1217, "next short"),
    (True, 833, 1500, 800, "short"),
    (True, None, 50_000, 40_000, "next short"),
    (True, 0.95, None, 0.97, "ok"),
    (True, 0.95, None, 0.90, "short"),
]


@pytest.mark.parametrize("higher,floor,next_,value,expected", VERDICTS)
def test_verdict_against_floor_and_next(higher, floor, next_, value, expected):
    fig = report.Figure("x", lambda d: 0.0, floor, next_, "u", higher)
    assert report.verdict(fig, value) == expected


def test_report_runs_the_scheduler_benchmarks_and_judges_their_figures():
    out = _ykshm("bench", "report", "--only", "sched,sched-anti", "--json")
    doc = orjson.loads(out.stdout)
    rows = {r["figure"]: r for r in doc["rows"]}
    assert set(rows) == {"allocations/s, 5,000 nodes", "engine publish per event",
                         "allocations/s with anti-affinity"}
    alloc = rows["allocations/s, 5,000 nodes"]
    assert alloc["value"] > 1000
    assert alloc["verdict"] == ("ok" if alloc["value"] >= 50_000 else "next short")
    assert rows["allocations/s with anti-affinity"]["verdict"] == (
        "ok" if rows["allocations/s with anti-affinity"]["value"] >= 35_000 else "next short")
    assert out.returncode == 0  # no floor here, so nothing can be short
    assert doc["host_before"]["cpus"] >= 1 and set(doc["seconds"]) == {"sched", "sched-anti"}


def test_report_table_names_every_figure_and_the_host():
    out = _ykshm("bench", "report", "--only", "sched")
    lines = out.stdout.splitlines()
    assert lines[0].split()[:2] == ["benchmark", "figure"]
    assert any(line.startswith("sched ") and "allocations/s, 5,000 nodes" in line for line in lines)
    assert lines[-1].startswith("host: ")


def test_a_benchmark_that_fails_is_an_error_row_and_exit_1(monkeypatch):
    broken = report.Run("broken", ("sched", "--nodes", "0", "--json"),
                        (report.Figure("allocations/s", report._key("allocations_per_s"), 1, None, "/s", True),))
    doc, error, _ = report.run_one(broken)
    rows = report.rows_of(broken, doc, error)
    assert rows[0]["verdict"] == "error" and "--nodes" in rows[0]["note"]


def test_text_figures_are_read_from_the_lines_the_benchmarks_print():
    stdout = ("submission: 100 PEs on 200 nodes, job created -> all PE pods Running in 1,088 ms (target <= 3000 ms)\n"
              "restart: failed PE pod -> replacement Running p50 61 ms, p90 80 ms, max 371 ms over 50 failures\n"
              "fusion: 10,000 operators -> 100 PEs, parse + fuse + AADLs + content ids 598 ms (cpu 598 ms)\n"
              "  round trip p50 13.3 ms (target <= 20), p99 27.1 ms (target <= 50), max 29.7 ms  -> OK\n"
              "pe pods: 100 PEs as process pods, job created -> every PE connected to its peers in 5,552 ms "
              "(target <= 10000 ms)\n"
              "pe pods: drain round trip through the operator's Service (100 PEs), the operator's own timestamps "
              "(trigger -> the last PE's checkpoint) p50 32.4 ms, p99 38.1 ms, max 38.4 ms over 50 rounds\n"
              "pe pods: the same rounds from the ConsistentRegion's watch (DRAINING -> PROCESSING, two status "
              "writes and the watch included: an upper bound) p50 32.7 ms, p99 39.0 ms, max 39.2 ms\n")
    assert report.parse_text(stdout) == {"submission_ms": 1088, "restart_p50_ms": 61, "fusion_ms": 598,
                                         "round_trip_p50_ms": 13.3, "round_trip_p99_ms": 27.1,
                                         "pods_connected_ms": 5552, "pods_drain_p99_ms": 38.1}


def test_unknown_benchmark_in_only_is_a_usage_error():
    out = _ykshm("bench", "report", "--only", "nope")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "ykshm bench report: error: unknown benchmark 'nope' in --only (choose from "
        + ", ".join(r.name for r in report.RUNS) + ")"]
