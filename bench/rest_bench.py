"""`ykshm bench web --routes`: YuniKorn's state routes with 1,000 applications and 1,000 nodes.

    ykshm bench web --routes [--apps N] [--nodes N] [--requests N] [--pollers N] [--seconds S] [--json]

1. Builds the state with the real engine (`Scheduler.handle` + cycles, as `bench sched`): N nodes,
   N applications with 2 allocations each, then publishes the snapshot as the engine does
   (`SnapshotPublisher`) into a fresh instance; its size is printed (the "state view").
2. Starts a real `ykshm web` (2 workers) on 127.0.0.1 and times every state route over one
   keep-alive connection, `--requests` each after 10 warm-ups (request sent -> whole body read;
   the client asks for gzip, as browsers and httpx do): p50 and p99 per route, and the full
   `/debug/fullstatedump`.
3. Publish rate with pollers: a publisher process writes events as fast as it can for
   `--seconds`, first alone, then with `--pollers` client threads (default 20, in one process at
   nice 19, standing in for clients elsewhere) fetching every state route in turn as fast as they
   can; ratio = loaded / alone, the median of 3 back-to-back pairs (all printed).

Targets (issue 15): every route p50 <= 5 ms; fullstatedump <= 100 ms; ratio >= 0.95.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

import orjson

from common.cliutil import Failure, Parser, run_main

PROG = "ykshm bench web --routes"


def build_state(name: str, apps: int, nodes: int) -> int:
    """Fill a ring and a snapshot named `name` from a real Scheduler; returns the snapshot bytes."""
    from engine.config import parse_config
    from engine.events_out import RingEventSink
    from si.resources import to_si
    from engine.scheduler import Scheduler
    from engine.snapshot import SnapshotPublisher, build
    from shm import RingWriter, SnapshotWriter

    ring = RingWriter.create(name, 200_000, 1000)
    snap = SnapshotWriter.create(name, 256 << 20)
    try:
        config = parse_config({"partitions": [{"name": "default", "queues": [
            {"name": "root", "queues": [{"name": f"team-{t}"} for t in range(10)]}]}]})
        sched = Scheduler(config, RingEventSink(ring, tracking=True, requests_enabled=False),
                          instance_uuid=ring.instance_uuid, ring_name=name)
        sched.handle({"type": "RegisterResourceManager", "rmID": "bench"}, None)
        node_res = to_si({"memory": 64 << 30, "vcore": 32_000, "pods": 110})
        sched.handle({"type": "NodeRequest", "rmID": "bench", "nodes": [
            {"nodeID": f"node-{i:05d}", "action": "CREATE", "schedulableResource": node_res,
             "attributes": {"ready": "true"}} for i in range(nodes)]}, "bench")
        sched.handle({"type": "ApplicationRequest", "rmID": "bench", "new": [
            {"applicationID": f"app-{a:05d}", "queueName": f"root.team-{a % 10}",
             "ugi": {"user": f"user-{a % 10}", "groups": ["bench"]}} for a in range(apps)]}, "bench")
        ask = to_si({"memory": 512 << 20, "vcore": 250, "pods": 1})
        for a in range(apps):
            sched.handle({"type": "AllocationRequest", "rmID": "bench", "asks": [
                {"allocationKey": f"app-{a:05d}-pod-{p}", "applicationID": f"app-{a:05d}",
                 "resourceAsk": ask, "allocationTags": {
                     "kubernetes.io/meta/namespace": "default",
                     "kubernetes.io/meta/podName": f"app-{a:05d}-pod-{p}"}} for p in range(2)]},
                "bench")
        while sched.cycle(0.5) and sched.pending():
            sched.take_outgoing()
        sched.sample_history()
        SnapshotPublisher(sched, snap).maybe_publish(force=True)
        ring.heartbeat()
        return len(orjson.dumps(build(sched)))
    finally:
        snap.close()
        ring.close()


def routes(apps: int, nodes: int) -> list[str]:
    p = "/ws/v1/partition/default"
    return ["/ws/v1/clusters", "/ws/v1/partitions", f"{p}/queues", f"{p}/queue/root.team-3",
            f"{p}/queue/root?subtree", f"{p}/queue/root.team-3/applications",
            f"{p}/applications/active", f"{p}/applications/active?status=running",
            f"{p}/application/app-{apps // 2:05d}", f"{p}/queue/root.team-3/application/app-00003",
            f"{p}/nodes", f"{p}/node/node-{nodes // 2:05d}", "/ws/v1/scheduler/node-utilizations",
            "/ws/v1/history/apps", "/ws/v1/history/containers", "/ws/v1/config",
            f"{p}/usage/users"]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def time_routes(url: str, paths: list[str], requests: int) -> dict[str, tuple[float, float, int]]:
    """path -> (p50 ms, p99 ms, body bytes as sent)."""
    import httpx

    result = {}
    with httpx.Client(base_url=url, timeout=30, headers={"Accept-Encoding": "gzip"}) as client:
        for path in paths:
            samples = []
            size = 0
            for i in range(10 + requests):
                t0 = time.perf_counter()
                r = client.get(path)
                body = r.read()
                dt = time.perf_counter() - t0
                if r.status_code != 200:
                    raise Failure(f"{path}: HTTP {r.status_code} {body[:200]!r}")
                if i >= 10:
                    samples.append(dt * 1000)
                size = int(r.headers.get("content-length", len(body)))
            result[path] = (_pct(samples, 0.5), _pct(samples, 0.99), size)
    return result


def _pollers(url: str, paths: list[str], threads: int, ready, stop) -> None:
    """Child process: `threads` clients fetching every state route in turn until `stop`."""
    import httpx

    os.nice(19)
    counts = [0] * threads

    def poll(i: int) -> None:
        with httpx.Client(base_url=url, timeout=30, headers={"Accept-Encoding": "gzip"}) as client:
            k = i
            while not stop.is_set():
                client.get(paths[k % len(paths)]).read()
                counts[i] += 1
                k += 1

    workers = [threading.Thread(target=poll, args=(i,), daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    ready.set()
    for w in workers:
        w.join()


def publish_ratio(name: str, url: str, paths: list[str], pollers: int, seconds: float) -> list[float]:
    from bench.web_bench import _run_publisher

    ratios = []
    ctx = mp.get_context("spawn")
    for _ in range(3):
        alone, t_alone = _run_publisher(name, "max", 0, seconds)
        ready, stop = ctx.Event(), ctx.Event()
        proc = ctx.Process(target=_pollers, args=(url, paths, pollers, ready, stop), daemon=True)
        proc.start()
        try:
            if not ready.wait(30):
                raise Failure("pollers did not start")
            time.sleep(0.5)
            loaded, t_loaded = _run_publisher(name, "max", 0, seconds)
        finally:
            stop.set()
            proc.join(30)
            if proc.is_alive():
                proc.kill()
        ratios.append((loaded / t_loaded) / (alone / t_alone))
    return ratios


def run(apps: int, nodes: int, requests: int, pollers: int, seconds: float) -> dict[str, Any]:
    from bench.web_bench import _Server

    name = f"bench-rest-{uuid.uuid4().hex[:8]}"
    server = None
    try:
        t0 = time.perf_counter()
        size = build_state(name, apps, nodes)
        setup = time.perf_counter() - t0
        server = _Server(name, 2, 10)
        paths = routes(apps, nodes)
        timed = time_routes(server.url, paths, requests)
        dump = time_routes(server.url, ["/debug/fullstatedump"], max(10, requests // 10))
        ratios = publish_ratio(name, server.url, paths, pollers, seconds) if pollers else []
        return {"apps": apps, "nodes": nodes, "snapshot_bytes": size, "setup_s": round(setup, 2),
                "routes": {p: {"p50_ms": round(a, 3), "p99_ms": round(b, 3), "bytes": n}
                           for p, (a, b, n) in timed.items()},
                "fullstatedump": {"p50_ms": round(dump["/debug/fullstatedump"][0], 2),
                                  "p99_ms": round(dump["/debug/fullstatedump"][1], 2),
                                  "bytes": dump["/debug/fullstatedump"][2]},
                "publish_ratios": [round(r, 3) for r in ratios],
                "publish_ratio": round(statistics.median(ratios), 3) if ratios else None}
    finally:
        if server is not None:
            server.stop()
        for suffix in (".events", ".requests", ".web", ".state"):
            try:
                os.unlink(f"/dev/shm/{name}{suffix}")
            except FileNotFoundError:
                pass


def add_arguments(p: Parser) -> None:
    p.add_argument("--apps", type=int, default=1000, help="applications (default 1000)")
    p.add_argument("--nodes", type=int, default=1000, help="nodes (default 1000)")
    p.add_argument("--requests", type=int, default=200, help="timed requests per route (default 200)")
    p.add_argument("--pollers", type=int, default=20, help="polling clients in the publish-rate run (default 20)")


def report(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        sys.stdout.write(orjson.dumps(result).decode() + "\n")
        return
    print(f"state view: {result['apps']} applications, {result['nodes']} nodes, snapshot "
          f"{result['snapshot_bytes'] / 1e6:.1f} MB of JSON (built in {result['setup_s']} s)")
    worst = max(v["p50_ms"] for v in result["routes"].values())
    for path, v in result["routes"].items():
        print(f"  {v['p50_ms']:7.2f} ms p50 {v['p99_ms']:7.2f} ms p99 {v['bytes']:>9,} B  {path}")
    print(f"routes p50:     worst {worst:.2f} ms (target <= 5 ms: {'ok' if worst <= 5 else 'MISSED'})")
    d = result["fullstatedump"]
    print(f"fullstatedump:  {d['p50_ms']:.1f} ms p50, {d['p99_ms']:.1f} ms p99, {d['bytes']:,} B gzip "
          f"(target <= 100 ms: {'ok' if d['p50_ms'] <= 100 else 'MISSED'})")
    if result["publish_ratio"] is not None:
        print(f"publish rate with pollers / alone: {result['publish_ratio']:.3f} median of "
              f"{result['publish_ratios']} (target >= 0.95)")


def _body(argv: Sequence[str]) -> int:
    p = Parser(prog=PROG, description=__doc__.splitlines()[0])
    add_arguments(p)
    p.add_argument("--seconds", type=float, default=3.0, help="length of each publish window (default 3)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    args = p.parse_args(list(argv))
    if min(args.apps, args.nodes, args.requests) < 1 or args.pollers < 0:
        p.error("--apps, --nodes and --requests must be at least 1, --pollers at least 0")
    report(run(args.apps, args.nodes, args.requests, args.pollers, args.seconds), args.json)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(PROG, _body, sys.argv[1:] if argv is None else argv)
