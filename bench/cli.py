"""`ykshm bench <ring|sched|web|export|retention|preempt|e2e|failover|streams|regions|report>`: dispatch to one benchmark module's `main(argv) -> int`.

Benchmarks measure the numbers DESIGN.md holds us to; they are never timed unit tests. Each
module is imported only when asked for, so a missing one is a one-line error (exit 1), not a
traceback.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

BENCHMARKS: dict[str, tuple[str, str]] = {
    "ring": ("bench.ring_bench", "shared-memory ring: publish ns/event, bytes/event, read+encode, stress"),
    "sched": ("bench.sched_bench", "scheduling cycle throughput of the engine"),
    "web": ("bench.web_bench", "REST batch latency, streams, isolation from stalled clients"),
    "export": ("bench.export_bench", "Redis Streams export: throughput, lag, engine cost, replica reads, memory"),
    "retention": ("bench.retention_bench", "memory per finished application kept for the retention time"),
    "streams": ("bench.streams_bench", "Streams controller: job -> PE pods Running, PE restart, fusion"),
    "preempt": ("bench.preempt_bench", "one preemption decision in a full cluster (5,000 nodes, 50,000 pods)"),
    "e2e": ("bench.e2e_bench", "end-to-end pods/s and recovery with sim-cluster, shim and engine"),
    "failover": ("bench.failover_bench", "active/standby: leader killed, paused, cut under a pod stream"),
    "regions": ("bench.regions_bench", "consistent-region drain round trip of a 100-PE region"),
    "vs-yunikorn": ("bench.vs_yunikorn", "Apache YuniKorn and ykshm side by side on a real control plane + KWOK"),
    "report": ("bench.report", "the quick form of every benchmark, one table: figure, target, ok/short"),
}

USAGE = "usage: ykshm bench <benchmark> [options]   (ykshm bench <benchmark> --help)\n\nbenchmarks:\n" + "".join(
    f"  {name:<8} {help_}\n" for name, (_, help_) in BENCHMARKS.items()
)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:        # as `ykshm ring` without a subcommand: one line on stderr, exit 2
        print(f"ykshm bench: error: which benchmark? choose from {', '.join(BENCHMARKS)} "
              f"(ykshm bench --help)", file=sys.stderr)
        return 2
    if args[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0
    name, rest = args[0], args[1:]
    if name not in BENCHMARKS:
        print(f"ykshm bench: error: unknown benchmark {name!r} (choose from "
              f"{', '.join(BENCHMARKS)})", file=sys.stderr)
        return 2
    module_name = BENCHMARKS[name][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name == module_name or module_name.startswith(exc.name + ".")):
            print(f"ykshm bench: error: benchmark {name!r} is not available "
                  f"(module {module_name} is not installed)", file=sys.stderr)
        else:
            print(f"ykshm bench: error: benchmark {name!r} cannot load: {exc}", file=sys.stderr)
        return 1
    main_fn = getattr(module, "main", None)
    if main_fn is None:
        print(f"ykshm bench: error: {module_name} has no main(argv)", file=sys.stderr)
        return 1
    return int(main_fn(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
