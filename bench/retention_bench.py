"""`ykshm bench retention`: memory of finished applications the engine keeps visible.

Finished applications stay in the engine (and its snapshot) for the retention time
(`service.applicationRetentionSeconds`, YuniKorn's 3 days), so their cost bounds the engine's
memory on a busy cluster: N applications each run one pod to completion through the real
scheduler (SI messages, a cycle, the release), pass Completing -> Completed, and the Python
heap growth (tracemalloc) and snapshot bytes per retained application are printed. At most
`service.maxRetainedApplications` (default 10,000) are retained: more apps than that show the bound.

    ykshm bench retention [--apps N]
"""

from __future__ import annotations

import dataclasses
import sys
import tracemalloc
from collections.abc import Sequence
from typing import Any

from common.cliutil import Parser, UsageError, run_main

PROG = "ykshm bench retention"


class FinishingCluster:
    """A real scheduler with one huge node, and applications run to Completed through SI messages
    (also what tests/web/test_web_snapshot_overflow fills a snapshot with)."""

    def __init__(self, config: Any = None) -> None:
        from engine.config import parse_config
        from engine.events_out import MemoryEventSink
        from si.resources import to_si
        from engine.scheduler import Scheduler

        self.clock = [0]
        self.sched = Scheduler(config or parse_config({}), MemoryEventSink(tracking=False),
                               instance_uuid="bench", ring_name="bench", clock=lambda: self.clock[0])
        self.sched.handle({"type": "RegisterResourceManager", "rmID": "bench"}, None)
        self.sched.handle({"type": "NodeRequest", "rmID": "bench", "nodes": [
            {"nodeID": "node-0", "action": "CREATE", "attributes": {"ready": "true"},
             "schedulableResource": to_si({"memory": 1 << 50, "vcore": 1 << 40, "pods": 1 << 30})}]},
            "bench")
        self.ask = to_si({"memory": 1 << 30, "vcore": 1000, "pods": 1})
        self.sched.take_outgoing()

    def finish(self, first: int, count: int, name: str = "app-{:07d}") -> None:
        """Applications `first..first+count-1` each run one pod, release it and reach Completed."""
        sched = self.sched
        for i in range(first, first + count):
            app = name.format(i)
            sched.handle({"type": "ApplicationRequest", "rmID": "bench", "new": [
                {"applicationID": app, "queueName": "", "ugi": {"user": "alice"},
                 "tags": {"namespace": "default"}}]}, "bench")
            sched.handle({"type": "AllocationRequest", "rmID": "bench", "asks": [
                {"allocationKey": f"{app}-pod", "applicationID": app, "resourceAsk": self.ask}]}, "bench")
            sched.cycle(1.0)
            sched.handle({"type": "AllocationRequest", "rmID": "bench", "releases": {"allocationsToRelease": [
                {"applicationID": app, "allocationKey": f"{app}-pod", "terminationType": "STOPPED_BY_RM"}]}},
                "bench")
            sched.take_outgoing()
        self.clock[0] += 31 * 10**9  # past the completing timeout: every app is Completed
        sched.cycle(1.0)
        sched.take_outgoing()


def _measure(apps: int) -> "Measured":
    import orjson

    from engine.snapshot import build

    cluster = FinishingCluster()
    sched = cluster.sched
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    cluster.finish(0, apps)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    retained = [a for p in sched.partitions.values() for a in p.all_apps()]
    states = {a.fsm.state.value for a in retained}
    snapshot = len(orjson.dumps(build(sched, fragments=True)))
    return Measured(len(retained), (after - before) // max(1, len(retained)), snapshot,
                    ", ".join(sorted(states)))


@dataclasses.dataclass(frozen=True)
class Measured:
    retained: int
    heap_per_app: int
    snapshot_bytes: int
    states: str


def _body(argv: Sequence[str]) -> int:
    parser = Parser(prog=PROG, description="bytes per finished application kept for the retention time")
    parser.add_argument("--apps", type=int, default=20_000, help="applications (default 20,000)")
    args = parser.parse_args(list(argv))
    if args.apps < 1:
        raise UsageError("--apps must be at least 1")
    m = _measure(args.apps)
    print(f"finished applications: {args.apps:,}; retained: {m.retained:,} ({m.states}; "
          f"service.maxRetainedApplications bounds it); {m.heap_per_app:,} bytes per retained app "
          f"(engine heap growth, tracemalloc), {m.heap_per_app * m.retained / 2**20:.1f} MiB in all; "
          f"snapshot document {m.snapshot_bytes / 2**20:.1f} MiB "
          f"({m.snapshot_bytes // max(1, m.retained):,} bytes per retained app)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(PROG, _body, list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
