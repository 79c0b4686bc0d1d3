"""`ykshm bench report`: the quick form of every benchmark in one go, one table of targets.

    ykshm bench report [--only NAME,...] [--json]

What a user runs to check a new machine or a release: each benchmark runs as its own process
(`ykshm bench NAME ...`, the same code as its full form), its figures are read from its `--json`
object (or, for the three that print only text, from the line that carries the figure), and every
figure is judged against two targets: `floor`, the number DESIGN.md holds us to, and `next`, the
next target (issue 25). A row is `ok` when it meets every target it has, `next short` when it meets
the floor (or has none) but not `next`, `short` when it misses the floor, and `error` when the
benchmark failed or printed no figure (its last stderr line is shown). The exit code is 1 when any
row is `short` or `error`.

Quick forms (a few minutes on 2 cores): the sizes of each target's definition where they are cheap
(9M-event ring, 5,000 nodes, 1,000 nodes), shorter phases where a benchmark has a duration. Every
benchmark keeps its full form; this replaces none of them. Absolute figures vary by up to 2x between
machines: the host line (cpus, load average) is printed with the table.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from common.cliutil import Parser, UsageError, run_main

PROG = "ykshm bench report"
TIMEOUT_S = 600

Extract = Callable[[dict[str, Any]], float]


@dataclasses.dataclass(frozen=True)
class Figure:
    """One figure a run yields, and what it is held to (`higher` = more is better)."""

    label: str
    extract: Extract
    floor: float | None
    next: float | None
    unit: str
    higher: bool = False


@dataclasses.dataclass(frozen=True)
class Run:
    """One benchmark invocation (its quick form) and the figures read from it."""

    name: str
    argv: tuple[str, ...]
    figures: tuple[Figure, ...]
    text: bool = False  # the benchmark prints only text: parse it with `TEXT_FIGURES`


def _key(*path: str) -> Extract:
    def get(doc: dict[str, Any]) -> float:
        value: Any = doc
        for part in path:
            value = value[part]
        return float(value)
    return get


MIB = 1024 * 1024

RUNS: tuple[Run, ...] = (
    Run("ring", ("ring", "--events", "9000000", "--json"), (
        Figure("ring memory, 9M seed-mix events", lambda d: d["shm_bytes"] / MIB, 450, 360, "MiB"),
        Figure("publish per event (median)", _key("publish_ns_median"), 500, 250, "ns"),
    )),
    Run("sched", ("sched", "--json"), (
        Figure("allocations/s, 5,000 nodes", _key("allocations_per_s"), None, 50_000, "/s", True),
        Figure("engine publish per event", _key("publish_ns_per_event"), None, 400, "ns"),
    )),
    Run("sched-anti", ("sched", "--anti-affinity", "--json"), (
        Figure("allocations/s with anti-affinity", _key("allocations_per_s"), None, 35_000, "/s", True),
    )),
    Run("web", ("web", "--seconds", "2", "--json"), (
        Figure("batch count=10000 p50", _key("batch_p50_ms"), 15, 6, "ms"),
        Figure("batch count=10000 p99", _key("batch_p99_ms"), None, 10, "ms"),
        Figure("stream p99, 100 streams", _key("stream_p99_ms"), 50, None, "ms"),
        Figure("isolation ratio", _key("isolation_ratio"), 0.95, None, "x", True),
    )),
    Run("web-routes", ("web", "--routes", "--json"), (
        Figure("fullstatedump, 1,000 apps + 1,000 nodes p50", _key("fullstatedump", "p50_ms"), 100, 15, "ms"),
    )),
    Run("e2e", ("e2e", "--nodes", "1000", "--pods", "5000", "--recovery-pods", "10000", "--json"), (
        Figure("end-to-end pods/s, 1,000 nodes", _key("pods_per_s"), 833, 1500, "/s", True),
        Figure("recovery of 10,000 pods", _key("recovery_s"), 5, 1, "s"),
    )),
    Run("vs-yunikorn", ("vs-yunikorn", "--scale", "0.05", "--nodes", "100", "--json"), (
        Figure("vs YuniKorn: pods/s ratio, worst workload", _key("worst", "pods_per_s"), 1, None, "x", True),
        Figure("vs YuniKorn: p99 create->bound ratio", _key("worst", "p99"), 1, None, "x"),
        Figure("vs YuniKorn: CPU-s per 1,000 pods ratio", _key("worst", "cpu"), 1, None, "x"),
        Figure("vs YuniKorn: peak RSS ratio", _key("worst", "rss"), 0.5, None, "x"),
        Figure("vs YuniKorn: events batch p50 ratio", _key("worst", "events"), 0.5, None, "x"),
        Figure("vs YuniKorn: recovery ratio", _key("worst", "recovery"), 0.5, None, "x"),
    )),
    Run("streams", ("streams",), (
        Figure("Streams job 100 PEs -> Running", _key("submission_ms"), 3000, None, "ms"),
        Figure("PE restart p50", _key("restart_p50_ms"), 1000, None, "ms"),
        Figure("fusion, 10,000 operators", _key("fusion_ms"), 1000, None, "ms"),
        Figure("100 PE pods -> every PE connected", _key("pods_connected_ms"), 10_000, None, "ms"),
        Figure("drain via the operator's Service p99", _key("pods_drain_p99_ms"), 50, None, "ms"),
    ), text=True),
    Run("regions", ("regions", "--no-baseline"), (
        Figure("drain round trip p50", _key("round_trip_p50_ms"), 20, None, "ms"),
        Figure("drain round trip p99", _key("round_trip_p99_ms"), 50, None, "ms"),
    ), text=True),
    Run("export", ("export", "--json"), (
        Figure("export events/s into Redis", _key("throughput", "events_per_second"), 200_000, None, "/s", True),
        Figure("export lag p99 at 10,000 events/s", _key("lag", "lag_ms_p99"), 20, None, "ms"),
        Figure("engine rate, exporter at nice 10", _key("publish", "ratio_median"), 0.95, None, "x", True),
        Figure("engine rate, exporter SCHED_IDLE", _key("publish_idle", "ratio_median"), 0.95, None, "x", True),
    )),
)

# Figures of the benchmarks that print only text: name -> regex over stdout with one group.
TEXT_FIGURES: dict[str, str] = {
    "submission_ms": r"all PE pods Running in ([0-9.,]+) ms",
    "restart_p50_ms": r"replacement Running p50 ([0-9.,]+) ms",
    "fusion_ms": r"parse \+ fuse \+ AADLs \+ content ids ([0-9.,]+) ms",
    "pods_connected_ms": r"every PE connected to its peers in ([0-9.,]+) ms",
    "pods_drain_p99_ms": r"the operator's own timestamps .* p50 [0-9.,]+ ms, p99 ([0-9.,]+) ms",
    "round_trip_p50_ms": r"round trip p50 ([0-9.,]+) ms",
    "round_trip_p99_ms": r"round trip p50 [0-9.,]+ ms \(target <= [0-9]+\), p99 ([0-9.,]+) ms",
}


def parse_text(stdout: str) -> dict[str, float]:
    """The figures a text-only benchmark printed (missing ones are absent)."""
    found = {}
    for key, pattern in TEXT_FIGURES.items():
        match = re.search(pattern, stdout)
        if match:
            found[key] = float(match.group(1).replace(",", ""))
    return found


def parse_json(stdout: str) -> dict[str, Any]:
    """The last JSON object line a `--json` benchmark printed."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return orjson.loads(line)
    raise ValueError("no JSON object in its output")


def verdict(figure: Figure, value: float) -> str:
    """ok / next short / short (see the module docstring); a missing target is met."""
    def meets(target: float | None) -> bool:
        return target is None or (value >= target if figure.higher else value <= target)
    if not meets(figure.floor):
        return "short"
    return "ok" if meets(figure.next) else "next short"


def run_one(run: Run) -> tuple[dict[str, Any] | None, str, float]:
    """(figures, error, seconds) of one benchmark process."""
    started = time.monotonic()
    cmd = [sys.executable, "-m", "tools.cli", "bench", *run.argv]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, f"did not finish within {TIMEOUT_S} s", time.monotonic() - started
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return None, last, seconds
    try:
        doc = parse_text(proc.stdout) if run.text else parse_json(proc.stdout)
    except ValueError as exc:
        return None, str(exc), seconds
    return doc, "", seconds


def rows_of(run: Run, doc: dict[str, Any] | None, error: str) -> list[dict[str, Any]]:
    rows = []
    for fig in run.figures:
        row: dict[str, Any] = {"benchmark": run.name, "figure": fig.label, "unit": fig.unit,
                               "floor": fig.floor, "next": fig.next,
                               "higher_is_better": fig.higher}
        try:
            value = fig.extract(doc) if doc is not None else None
        except (KeyError, TypeError, ValueError):
            value = None
        if value is None:
            row.update(value=None, verdict="error", note=error or "the benchmark printed no such figure")
        else:
            row.update(value=round(value, 3), verdict=verdict(fig, value))
        rows.append(row)
    return rows


def _fmt(value: float | None, higher: bool = False, target: bool = False) -> str:
    if value is None:
        return "-"
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
    return (">= " if higher else "<= ") + text if target else text


def table(rows: list[dict[str, Any]]) -> list[str]:
    head = f"{'benchmark':<11} {'figure':<44} {'value':>12} {'floor':>11} {'next':>11}  verdict"
    lines = [head, "-" * len(head)]
    for r in rows:
        value = _fmt(r["value"]) + " " + r["unit"] if r["value"] is not None else "-"
        lines.append(f"{r['benchmark']:<11} {r['figure']:<44} {value:>12} "
                     f"{_fmt(r['floor'], r['higher_is_better'], True):>11} "
                     f"{_fmt(r['next'], r['higher_is_better'], True):>11}  {r['verdict']}"
                     + (f"  ({r['note']})" if r.get("note") else ""))
    return lines


def host() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()]}


def _body(argv: Sequence[str]) -> int:
    parser = Parser(prog=PROG, description="Run the quick form of every benchmark; one table of targets.")
    parser.add_argument("--only", default="", help="comma-separated benchmark names ("
                        + ", ".join(r.name for r in RUNS) + "); default all")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = parser.parse_args(list(argv))
    names = [n for n in args.only.split(",") if n]
    unknown = sorted(set(names) - {r.name for r in RUNS})
    if unknown:
        raise UsageError(f"unknown benchmark {unknown[0]!r} in --only (choose from "
                         f"{', '.join(r.name for r in RUNS)})")
    before = host()
    rows, seconds = [], {}
    for run in RUNS:
        if names and run.name not in names:
            continue
        if not args.json:
            print(f"running ykshm bench {' '.join(run.argv)} ...", file=sys.stderr, flush=True)
        doc, error, took = run_one(run)
        seconds[run.name] = round(took, 1)
        rows.extend(rows_of(run, doc, error))
    bad = any(r["verdict"] in ("short", "error") for r in rows)
    if args.json:
        print(orjson.dumps({"host_before": before, "host_after": host(), "seconds": seconds,
                            "rows": rows}).decode())
    else:
        for line in table(rows):
            print(line)
        after = host()
        print(f"host: {before['cpus']} cpus, load average {before['load_average']} before, "
              f"{after['load_average']} after; {sum(seconds.values()):.0f} s in all")
    return 1 if bad else 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(PROG, _body, list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
