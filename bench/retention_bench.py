"""`ykshm bench retention`: memory of finished applications the engine keeps visible.

Finished applications stay in the engine (and its snapshot) for the retention time
(`service.applicationRetentionSeconds`, YuniKorn's 3 days), so their cost bounds the engine's
memory on a busy cluster: N applications each run one pod to completion through the real
scheduler (SI messages, a cycle, the release), pass Completing -> Completed, and the Python
heap growth (tracemalloc) per retained application is printed.

    ykshm bench retention [--apps N]
"""

from __future__ import annotations

import sys
import tracemalloc
from collections.abc import Sequence

from common.cliutil import Parser, UsageError, run_main

PROG = "ykshm bench retention"


def _measure(apps: int) -> tuple[int, str]:
    from engine.config import parse_config
    from engine.events_out import MemoryEventSink
    from si.resources import to_si
    from engine.scheduler import Scheduler

    clock = [0]
    sched = Scheduler(parse_config({}), MemoryEventSink(tracking=False), instance_uuid="bench",
                      ring_name="bench", clock=lambda: clock[0])
    sched.handle({"type": "RegisterResourceManager", "rmID": "bench"}, None)
    sched.handle({"type": "NodeRequest", "rmID": "bench", "nodes": [
        {"nodeID": "node-0", "action": "CREATE", "attributes": {"ready": "true"},
         "schedulableResource": to_si({"memory": 1 << 50, "vcore": 1 << 40, "pods": 1 << 30})}]}, "bench")
    ask = to_si({"memory": 1 << 30, "vcore": 1000, "pods": 1})
    sched.take_outgoing()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(apps):
        app = f"app-{i:07d}"
        sched.handle({"type": "ApplicationRequest", "rmID": "bench", "new": [
            {"applicationID": app, "queueName": "", "ugi": {"user": "alice"},
             "tags": {"namespace": "default"}}]}, "bench")
        sched.handle({"type": "AllocationRequest", "rmID": "bench", "asks": [
            {"allocationKey": f"{app}-pod", "applicationID": app, "resourceAsk": ask}]}, "bench")
        sched.cycle(1.0)
        sched.handle({"type": "AllocationRequest", "rmID": "bench", "releases": {"allocationsToRelease": [
            {"applicationID": app, "allocationKey": f"{app}-pod", "terminationType": "STOPPED_BY_RM"}]}},
            "bench")
        sched.take_outgoing()
    clock[0] += 31 * 10**9  # past the completing timeout: every app is Completed
    sched.cycle(1.0)
    sched.take_outgoing()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    states = {a.fsm.state.value for p in sched.partitions.values() for a in p.all_apps()}
    return (after - before) // apps, ", ".join(sorted(states))


def _body(argv: Sequence[str]) -> int:
    parser = Parser(prog=PROG, description="bytes per finished application kept for the retention time")
    parser.add_argument("--apps", type=int, default=20_000, help="applications (default 20,000)")
    args = parser.parse_args(list(argv))
    if args.apps < 1:
        raise UsageError("--apps must be at least 1")
    per_app, states = _measure(args.apps)
    print(f"retained applications: {args.apps:,} ({states}); {per_app:,} bytes per retained app "
          f"(engine heap growth, tracemalloc), {per_app * args.apps / 2**20:.1f} MiB in all")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(PROG, _body, list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
