"""`ykshm bench regions`: drain round trip of a 100-PE periodic consistent region over loopback.

`--jobs N` runs the fleet benchmark instead (bench/regions_fleet.py): N jobs x 4 regions at once.

One process serves the operator (its REST API on the listener, which answers the PEs' requests
itself and hands the rest to hypercorn; `--hypercorn-only`: hypercorn answers all, as before;
status writes to memory, UDP notifications), another plays the 100 PEs (pesim: one UDP socket per
PE, checkpoint PUTs over HTTP/1.1 keep-alive). A round is timed from the moment the first PE
receives triggerDrain to the moment the last PE receives the resumeSubmission of that round:
trigger -> 100 checkpoints (each answered once the region's status is written) ->
resumeSubmission. Printed: p50 / p99 / max against the targets (p50 <= 20 ms, p99 <= 50 ms), the
operator's own average drain time, and two floors under it with the same client, 100 concurrent
requests a round: the operator's API answering GET /pe/{pe} (the transport and routing, no FSM),
and hypercorn with a no-op app (what every request cost before the listener).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

from bench.regions_fleet import stop_server
from common.http1.lifespan import nothing_to_start

TARGET_P50_MS = 20.0
TARGET_P99_MS = 50.0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ykshm bench regions", description=__doc__.splitlines()[0])
    p.add_argument("--pes", type=int, default=100, help="PEs in the region (default 100)")
    p.add_argument("--rounds", type=int, default=100, help="timed drain rounds (default 100)")
    p.add_argument("--period", type=float, default=None,
                   help="drain period in seconds (0.05; 0.2 with --jobs)")
    p.add_argument("--warmup", type=int, default=5, help="untimed rounds first (default 5)")
    p.add_argument("--serve", help=argparse.SUPPRESS)  # internal: JSON {pe: port} of the PEs
    p.add_argument("--serve-noop", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--no-baseline", action="store_true",
                   help="skip the floor measurement (hypercorn with a no-op app)")
    p.add_argument("--hypercorn-only", action="store_true",
                   help="the operator's API on hypercorn alone, without the listener's direct path")
    fleet = p.add_argument_group("many jobs at once (bench/regions_fleet.py)")
    fleet.add_argument("--jobs", type=int, default=0, help="run the fleet benchmark with N jobs")
    fleet.add_argument("--regions", type=int, default=4, help="regions per job (default 4)")
    fleet.add_argument("--region-pes", type=int, default=2, help="PEs per region (default 2)")
    fleet.add_argument("--fail-at", type=float, default=2.0, help="seconds before the failure (2)")
    fleet.add_argument("--fail-for", type=float, default=1.0, help="seconds unhealthy (1)")
    fleet.add_argument("--duration", type=float, default=6.0, help="seconds in all (6)")
    p.add_argument("--serve-fleet", help=argparse.SUPPRESS)  # internal: the spec on stdin
    return p


# -- the operator side (a child process) ----------------------------------------------------------

def _serve(pes: int, period: float, ports: dict[str, int], direct: bool) -> None:
    from functools import partial

    import trio

    from streams.regions.fsm import Region, RegionSpec
    from streams.regions.health import Health
    from streams.regions.operator import RegionOperator
    from streams.regions.rest import serve

    async def write(index, doc):
        pass

    async def healthy(index):
        return Health(True)

    addresses = {int(pe): ("127.0.0.1", port) for pe, port in ports.items()}
    region = Region(RegionSpec(0, trigger="periodic", period=period, drain_timeout=30.0,
                               reset_timeout=30.0, pes=frozenset(range(1, pes + 1))))
    op = RegionOperator("bench/regions", [region], status_writer=write, health_source=healthy,
                        addresses=addresses.get)

    async def main():
        async with trio.open_nursery() as nursery:
            url = await nursery.start(partial(serve, op, direct=direct))
            print(url, flush=True)
            await trio.to_thread.run_sync(sys.stdin.read)  # until the parent closes our stdin
            nursery.cancel_scope.cancel()

    trio.run(main)


# -- the PE side (this process) --------------------------------------------------------------------

async def _measure(args) -> dict:
    import httpx
    import trio

    from streams.regions.pesim import BASE, PeSimulator, RawHttp

    pes = range(1, args.pes + 1)
    sim = PeSimulator("http://placeholder:0", {0: pes}, listen="udp", raw=True)
    await sim.open_sockets()
    ports = {str(pe): addr[1] for pe, addr in sim.addresses().items()}
    command = [sys.executable, "-m", "bench.regions_bench", "--serve", json.dumps(ports),
               "--pes", str(args.pes), "--period", str(args.period)]
    if args.hypercorn_only:
        command.append("--hypercorn-only")
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        url = (await trio.to_thread.run_sync(child.stdout.readline)).strip()
        if not url.startswith("http://"):
            raise SystemExit(f"ykshm bench regions: error: the operator did not start ({url!r})")
        sim.base_url = url
        rounds: list[float] = []
        clock = _Rounds(sim)
        async with trio.open_nursery() as nursery:
            await nursery.start(sim.run)
            total = args.warmup + args.rounds
            with trio.fail_after(60 + total * (args.period + 1.0)):
                for seq in range(1, total + 1):
                    await sim.wait_for("resumeSubmission", f"seqId={seq + 1};retId={seq - 1};pendCkpt=0")
                    if seq > args.warmup:
                        rounds.append(clock.ms(seq))
            async with httpx.AsyncClient() as client:
                metrics = (await client.get(url + "/metrics")).text
            nursery.cancel_scope.cancel()
        raw = RawHttp(url)
        api_floor = await _concurrent(raw, args, "GET", lambda pe: f"{BASE}/pe/{pe}")
        await raw.aclose()
    finally:
        stop_server(child)
    avg = next((float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                if line.startswith("average_drain_time_milliseconds{")), float("nan"))
    return {"rounds": rounds, "operator_avg_drain_ms": avg, "errors": len(sim.errors),
            "api_floor": api_floor}


# -- the floor: hypercorn with an app that does nothing, the same client -----------------------------

async def _noop_app(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        await nothing_to_start(receive, send)
        return
    await receive()
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def _serve_noop() -> None:
    import trio
    from hypercorn.trio import serve

    from streams.regions.rest import hypercorn_config

    async def main():
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(lambda task_status: serve(
                _noop_app, hypercorn_config("127.0.0.1:0"), shutdown_trigger=trio.sleep_forever,
                task_status=task_status))
            print(binds[0], flush=True)
            await trio.to_thread.run_sync(sys.stdin.read)
            nursery.cancel_scope.cancel()

    trio.run(main)


async def _baseline(args) -> list[float]:
    """100 concurrent PUTs (one per PE connection) answered 204 by a no-op app, per round."""
    import trio

    from streams.regions.pesim import RawHttp

    child = subprocess.Popen([sys.executable, "-m", "bench.regions_bench", "--serve-noop"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        url = (await trio.to_thread.run_sync(child.stdout.readline)).strip()
        raw = RawHttp(url)
        rounds = await _concurrent(raw, args, "PUT", lambda pe: "/checkpoint", b"1")
        await raw.aclose()
        return rounds
    finally:
        stop_server(child)


async def _concurrent(raw, args, method: str, path, body: bytes = b"") -> list[float]:
    """Per round (after the warm-up), the ms until every PE's connection has its answer."""
    import trio

    rounds = []
    for n in range(args.warmup + args.rounds):
        t0 = trio.current_time()
        async with trio.open_nursery() as nursery:
            for pe in range(1, args.pes + 1):
                nursery.start_soon(raw.request, pe, method, path(pe), body)
        if n >= args.warmup:
            rounds.append((trio.current_time() - t0) * 1000.0)
        await trio.sleep(args.period)
    return rounds


class _Rounds:
    """Each round's trigger -> resume time from the PEs' `seen` list, read once as it grows (a
    rescan per round would cost the PE side milliseconds of CPU by the end of a run)."""

    def __init__(self, sim) -> None:
        self.sim = sim
        self.scanned = 0
        self.first: dict[str, float] = {}
        self.last: dict[str, float] = {}

    def ms(self, seq: int) -> float:
        seen = self.sim.seen
        for i in range(self.scanned, len(seen)):
            s = seen[i]
            if s.type == "triggerDrain":
                self.first.setdefault(s.message, s.at)
            elif s.type == "resumeSubmission":
                self.last[s.message] = max(s.at, self.last.get(s.message, s.at))
        self.scanned = len(seen)
        start = self.first[f"seqId={seq}"]
        return (self.last[f"seqId={seq + 1};retId={seq - 1};pendCkpt=0"] - start) * 1000.0


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.serve_fleet is not None or args.jobs:
        from bench import regions_fleet

        if args.serve_fleet is None:
            args.period = 0.2 if args.period is None else args.period
            return regions_fleet.run(args)
        spec = json.loads(sys.stdin.readline())
        regions_fleet.serve_fleet(**spec)
        return 0
    args.period = 0.05 if args.period is None else args.period
    if args.serve_noop:
        _serve_noop()
        return 0
    if args.serve is not None:
        _serve(args.pes, args.period, json.loads(args.serve), not args.hypercorn_only)
        return 0
    import trio

    t0 = time.perf_counter()
    result = trio.run(_measure, args)
    rounds = result["rounds"]
    p50, p99 = statistics.median(rounds), _percentile(rounds, 0.99)
    ok = p50 <= TARGET_P50_MS and p99 <= TARGET_P99_MS
    api = "hypercorn alone" if args.hypercorn_only else "the listener's direct path"
    print(f"regions: {args.pes} PEs, {len(rounds)} drain rounds (period {args.period * 1000:.0f} ms), "
          f"trigger -> all checkpoints -> resumeSubmission over loopback ({api})")
    print(f"  round trip p50 {p50:.1f} ms (target <= {TARGET_P50_MS:.0f}), p99 {p99:.1f} ms "
          f"(target <= {TARGET_P99_MS:.0f}), max {max(rounds):.1f} ms  -> {'OK' if ok else 'MISSED'}")
    print(f"  operator's average drain time (last 10, DrainPeriod -> last checkpoint): "
          f"{result['operator_avg_drain_ms']:.1f} ms; refused reports: {result['errors']}; "
          f"wall {time.perf_counter() - t0:.1f} s")
    floor = result["api_floor"]
    print(f"  floor, the operator's API alone (GET /pe/{{pe}}, no FSM, {args.pes} concurrent): "
          f"p50 {statistics.median(floor):.1f} ms, p99 {_percentile(floor, 0.99):.1f} ms")
    if not args.no_baseline:
        floor = trio.run(_baseline, args)
        print(f"  floor, hypercorn alone (a no-op app, same client, {args.pes} concurrent PUTs): "
              f"p50 {statistics.median(floor):.1f} ms, p99 {_percentile(floor, 0.99):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
