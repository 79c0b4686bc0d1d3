"""`ykshm bench preempt`: how long one preemption decision takes in a full, large cluster.

N nodes are filled with P running pods of a `batch` queue (no guarantee, so every pod is a
candidate victim); then, R times, a high-priority pod of the `prod` queue (guaranteed, below
its guarantee) waits past its preemption delay (a fake monotonic clock) and the cycle that
preempts for it is timed. The time is the whole cycle, so it includes finding the candidates
(every running pod), the queue-guarantee gate, the per-node victim search and the release. Each
round then confirms its victim's release as the shim would, and the ask is allocated, so every
round starts from a full cluster again. Default: 5,000 nodes, 50,000 running pods.
`--worst`: every running pod carries `yunikorn.apache.org/allow-preemption: "false"`, so no
node ends the search early and every node's victims are computed.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import orjson

from common.cliutil import Parser, run_main
from engine.config import parse_config
from engine.events_out import MemoryEventSink
from engine.scheduler import Scheduler
from si.resources import to_si

RM = "bench"
POD = {"memory": 512 << 20, "vcore": 250, "pods": 1}
POLICY = {"allowPreemptSelf": True, "allowPreemptOther": True}


class _Clock:
    """The engine's monotonic clock, moved by hand past the preemption delay."""

    def __init__(self) -> None:
        self.now = time.monotonic_ns()

    def __call__(self) -> int:
        return self.now


def _config() -> Any:
    return parse_config({"partitions": [{"name": "default", "queues": [{"name": "root", "queues": [
        {"name": "batch"},
        {"name": "prod", "resources": {"guaranteed": {"memory": "1Ti", "vcore": 1000}}}]}]}]})


def _fill(sched: Scheduler, nodes: int, pods: int, apps: int, policy: dict) -> None:
    """Nodes that hold pods/nodes pods each, all of them running batch pods."""
    per_node = -(-pods // nodes)
    cap = to_si({name: value * per_node for name, value in POD.items()})
    sched.handle({"type": "RegisterResourceManager", "rmID": RM}, None)
    sched.handle({"type": "NodeRequest", "rmID": RM, "nodes": [
        {"nodeID": f"node-{i:05d}", "action": "CREATE", "schedulableResource": cap}
        for i in range(nodes)]}, RM)
    sched.handle({"type": "ApplicationRequest", "rmID": RM, "new": [
        {"applicationID": f"batch-{a:04d}", "queueName": "root.batch",
         "ugi": {"user": "batch"}} for a in range(apps)]}, RM)
    ask = to_si(POD)
    for a in range(apps):
        sched.handle({"type": "AllocationRequest", "rmID": RM, "asks": [
            {"allocationKey": f"batch-{a:04d}-{p:06d}", "applicationID": f"batch-{a:04d}",
             "resourceAsk": ask, "priority": 0, "preemptionPolicy": policy}
            for p in range(a, pods, apps)]}, RM)
    while sched.cycle(5.0):
        sched.take_outgoing()
    sched.take_outgoing()


def run(nodes: int, pods: int, rounds: int, apps: int = 100, worst: bool = False
        ) -> dict[str, Any]:
    clock = _Clock()
    sched = Scheduler(_config(), MemoryEventSink(requests_enabled=True, keep=False), clock=clock)
    t0 = time.perf_counter()
    _fill(sched, nodes, pods, apps,
          {**POLICY, "allowPreemptSelf": False} if worst else POLICY)
    setup = time.perf_counter() - t0
    part = sched.partitions["default"]
    running = sum(len(n.allocations) for n in part.nodes.values())
    sched.handle({"type": "ApplicationRequest", "rmID": RM, "new": [
        {"applicationID": "prod", "queueName": "root.prod", "ugi": {"user": "prod"}}]}, RM)
    times: list[float] = []
    victims = 0
    for r in range(rounds):
        sched.handle({"type": "AllocationRequest", "rmID": RM, "asks": [
            {"allocationKey": f"prod-{r:04d}", "applicationID": "prod", "resourceAsk": to_si(POD),
             "priority": 1000, "preemptionPolicy": POLICY}]}, RM)
        sched.cycle(5.0)  # no node has room: the ask waits (and reserves a node)
        sched.take_outgoing()
        clock.now += 31 * 1_000_000_000
        before = part.preemptions
        t = time.perf_counter()
        sched.cycle(5.0)
        times.append(time.perf_counter() - t)
        if part.preemptions != before + 1:
            raise RuntimeError(f"round {r}: no preemption happened")
        released = [rel for msg in sched.take_outgoing().get(RM, [])
                    if msg["type"] == "AllocationResponse" for rel in msg["released"]]
        victims += len(released)
        sched.handle({"type": "AllocationRequest", "rmID": RM, "releases": {
            "allocationsToRelease": [
                {"applicationID": rel["applicationID"], "allocationKey": rel["allocationKey"],
                 "terminationType": "PREEMPTED_BY_SCHEDULER"} for rel in released]}}, RM)
        sched.cycle(5.0)  # the ask takes the freed room on its reserved node
        sched.take_outgoing()
    return {"nodes": nodes, "running_pods": running, "rounds": rounds, "victims": victims,
            "worst": worst,
            "setup_seconds": round(setup, 2),
            "decision_ms_median": round(statistics.median(times) * 1000, 1),
            "decision_ms_max": round(max(times) * 1000, 1),
            "decision_ms_min": round(min(times) * 1000, 1)}


def _body(argv: Sequence[str]) -> int:
    p = Parser(prog="ykshm bench preempt", description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--pods", type=int, default=50_000, help="running pods")
    p.add_argument("--rounds", type=int, default=5, help="preemption decisions timed")
    p.add_argument("--worst", action="store_true",
                   help="every running pod refuses preemption: every node is searched")
    p.add_argument("--json", action="store_true", help="one JSON object")
    args = p.parse_args(list(argv))
    if args.nodes < 1 or args.pods < args.nodes or args.rounds < 1:
        p.error("--nodes and --rounds must be at least 1, --pods at least --nodes")
    result = run(args.nodes, args.pods, args.rounds, worst=args.worst)
    if args.json:
        sys.stdout.write(orjson.dumps(result).decode() + "\n")
    else:
        print(f"nodes {result['nodes']}  running pods {result['running_pods']}  "
              f"(setup {result['setup_seconds']} s){'  worst case' if args.worst else ''}")
        print(f"preemption decision  median {result['decision_ms_median']} ms  "
              f"min {result['decision_ms_min']} ms  max {result['decision_ms_max']} ms  "
              f"({result['rounds']} decisions, {result['victims']} victims)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main("ykshm bench preempt", _body, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
