"""`ykshm bench sched`: the scheduler core alone (no shim, no socket), events into a real ring.

Registers N nodes, submits A applications x P pods through the same `Scheduler.handle` the SI
server uses, then runs scheduling cycles until every pod is allocated. Reports allocations/s and
events/s over the cycles only (setup is reported apart), allocations per CPU second of the
process (what a loaded machine disturbs least: compare builds with it there, quote
allocations/s from a quiet one), and the share of cycle time spent publishing events into the
ring (estimated by timing one publish call in 8, so that the clock's own cost stays small).
`--no-ring` uses an in-memory sink instead of shared memory.
`--anti-affinity`: every pod carries its app's label and a required anti-affinity to it on
`kubernetes.io/hostname` (one pod of an app per node: kube-scheduler's InterPodAffinity in the
node choice), to see what inter-pod terms cost against the same run without them.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

import orjson

from common.cliutil import Failure, Parser, run_main
from engine.config import parse_config
from engine.events_out import MemoryEventSink, RingEventSink
from engine.scheduler import Scheduler
from si.resources import to_si


class _TimedWriter:
    """Wraps RingWriter.publish to measure the time spent publishing: one call in 8 is timed
    (`ns` over `timed` calls, `count` all calls), so the clock's own cost stays out of the
    cycle time the allocation rate is measured over (timing every call cost ~5 % of it). 8 is
    prime to the 3 events an allocation emits: every kind of event is sampled alike."""

    def __init__(self, writer: Any) -> None:
        self.writer = writer
        self.ns = 0
        self.count = 0
        self.timed = 0
        self.publish_request = writer.publish_request
        self.take_requests = writer.take_requests
        self._publish = writer.publish

    def publish(self, *args: Any) -> int:
        self.count += 1
        if self.count & 7:
            return self._publish(*args)
        t = time.perf_counter_ns()
        result = self._publish(*args)
        self.ns += time.perf_counter_ns() - t
        self.timed += 1
        return result

    def mark(self) -> tuple[int, int, int]:
        return self.ns, self.timed, self.count

    def seconds_since(self, mark: tuple[int, int, int]) -> float:
        """The estimated time spent publishing since `mark` (mean of the timed calls x all)."""
        ns, timed = self.ns - mark[0], self.timed - mark[1]
        return ns * (self.count - mark[2]) / timed / 1e9 if timed else 0.0


def _pod_tags(app: str, anti_affinity: bool) -> dict[str, str]:
    """The tags the shim sends for a pod of `app` (with the spreading term if asked for)."""
    tags = {"kubernetes.io/meta/namespace": "bench", "kubernetes.io/label/app": app}
    if anti_affinity:
        tags["ykshm.io/placement"] = orjson.dumps({"podAntiAffinity": [
            {"topologyKey": "kubernetes.io/hostname",
             "labelSelector": {"matchLabels": {"app": app}, "matchExpressions": []}}]}).decode()
    return tags


def run(nodes: int, apps: int, pods: int, *, ring: bool = True,
        policy: str = "fifo", anti_affinity: bool = False) -> dict[str, Any]:
    writer = None
    name = f"bench-sched-{uuid.uuid4().hex[:8]}"
    timed = None
    if ring:
        from shm import RingWriter
        writer = RingWriter.create(name, 1_000_000, 1000)
        timed = _TimedWriter(writer)
        sink: Any = RingEventSink(timed, tracking=True, requests_enabled=False)
    else:
        sink = MemoryEventSink(requests_enabled=False, keep=False)
    try:
        config = parse_config({"partitions": [{"name": "default", "queues": [
            {"name": "root", "queues": [{"name": "bench", "properties":
                                         {"application.sort.policy": policy}}]}]}]})
        sched = Scheduler(config, sink, instance_uuid=getattr(writer, "instance_uuid", ""),
                          ring_name=name if ring else "")
        t0 = time.perf_counter()
        sched.handle({"type": "RegisterResourceManager", "rmID": "bench"}, None)
        node_res = to_si({"memory": 64 << 30, "vcore": 32_000, "pods": 110})
        sched.handle({"type": "NodeRequest", "rmID": "bench", "nodes": [
            {"nodeID": f"node-{i:05d}", "action": "CREATE", "schedulableResource": node_res,
             "attributes": {"ready": "true", "kubernetes.io/hostname": f"node-{i:05d}"}}
            for i in range(nodes)]}, "bench")
        sched.handle({"type": "ApplicationRequest", "rmID": "bench", "new": [
            {"applicationID": f"app-{a:04d}", "queueName": "root.bench",
             "ugi": {"user": f"user-{a % 10}", "groups": ["bench"]}} for a in range(apps)]},
            "bench")
        ask_res = to_si({"memory": 512 << 20, "vcore": 250, "pods": 1})
        for a in range(apps):
            tags = _pod_tags(f"app-{a:04d}", anti_affinity)
            sched.handle({"type": "AllocationRequest", "rmID": "bench", "asks": [
                {"allocationKey": f"app-{a:04d}-pod-{p:05d}", "applicationID": f"app-{a:04d}",
                 "resourceAsk": ask_res, "priority": 0, "allocationTags": tags}
                for p in range(pods)]}, "bench")
        sched.take_outgoing()
        setup = time.perf_counter() - t0
        events_before = sink.count
        publish_mark = timed.mark() if timed else None
        made = 0
        cycles = 0
        t1, cpu1 = time.perf_counter(), time.process_time()
        while True:
            n = sched.cycle(0.05)
            sched.take_outgoing()
            if writer is not None:
                writer.heartbeat()
            cycles += 1
            made += n
            if not n or not sched.pending():
                break
        elapsed = time.perf_counter() - t1
        cpu = time.process_time() - cpu1
        events = sink.count - events_before
        publish_s = timed.seconds_since(publish_mark) if timed else 0.0
        return {"nodes": nodes, "apps": apps, "pods": apps * pods, "allocations": made,
                "cycles": cycles, "seconds": round(elapsed, 4), "setup_seconds": round(setup, 4),
                "allocations_per_s": round(made / elapsed, 1) if elapsed else 0.0,
                "cpu_seconds": round(cpu, 4),
                "allocations_per_cpu_s": round(made / cpu, 1) if cpu else 0.0,
                "events": events, "events_per_s": round(events / elapsed, 1) if elapsed else 0.0,
                "publish_share": round(publish_s / elapsed, 4) if elapsed else 0.0,
                "publish_ns_per_event": round(publish_s * 1e9 / events, 1) if events else 0.0,
                "ring": ring, "policy": policy, "anti_affinity": anti_affinity}
    finally:
        if writer is not None:
            writer.close()
            writer.unlink()


def _body(argv: Sequence[str]) -> int:
    p = Parser(prog="ykshm bench sched", description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--apps", type=int, default=100)
    p.add_argument("--pods", type=int, default=100, help="pods per application")
    p.add_argument("--policy", choices=("fifo", "fair"), default="fifo")
    p.add_argument("--no-ring", action="store_true", help="in-memory events, no shared memory")
    p.add_argument("--anti-affinity", action="store_true",
                   help="pods spread per app by a required hostname anti-affinity")
    p.add_argument("--json", action="store_true", help="one JSON object")
    args = p.parse_args(list(argv))
    if args.nodes < 1 or args.apps < 1 or args.pods < 1:
        p.error("--nodes, --apps and --pods must be at least 1")
    try:
        result = run(args.nodes, args.apps, args.pods, ring=not args.no_ring, policy=args.policy,
                     anti_affinity=args.anti_affinity)
    except OSError as exc:
        raise Failure(str(exc)) from None
    if args.json:
        sys.stdout.write(orjson.dumps(result).decode() + "\n")
    else:
        print(f"nodes {result['nodes']}  pods {result['pods']}  allocated "
              f"{result['allocations']} in {result['seconds']} s ({result['cycles']} cycles, "
              f"setup {result['setup_seconds']} s)")
        print(f"allocations/s   {result['allocations_per_s']:,.0f}  "
              f"({result['allocations_per_cpu_s']:,.0f} per CPU second)")
        print(f"events/s        {result['events_per_s']:,.0f}  ({result['events']} events)")
        print(f"publish share   {result['publish_share'] * 100:.1f} % of cycle time "
              f"({result['publish_ns_per_event']} ns/event)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main("ykshm bench sched", _body, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
