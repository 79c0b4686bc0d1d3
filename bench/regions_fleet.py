"""`ykshm bench regions --jobs 50 --regions 4`: many jobs' regions driven at once, one failure.

One process serves J operators (one RegionOperator + API listener per job, as J cr-operator
processes would, but sharing a CPU budget we can measure), another plays every job's PEs (pesim,
UDP). Every region drains periodically; at --fail-at seconds every region becomes unhealthy (its
pods "fail") for --fail-for seconds, then healthy again, so each one resets and resumes. At the end
the operator side reports, per region, its state and how many drains and resets completed after
the failure; the run passes when every region is back in PROCESSING/DRAINING with drains after
the recovery, no PE report went unanswered, and prints the operator CPU per completed drain.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time


def serve_fleet(jobs: int, regions: int, pes: int, period: float, fail_at: float, fail_for: float,
                duration: float, ports: dict) -> None:
    """The operators' side: print {job: url}, run the schedule, print the summary, exit."""
    import trio

    from streams.regions.fsm import Region, RegionSpec
    from streams.regions.health import Health
    from streams.regions.operator import RegionOperator
    from streams.regions.rest import serve

    health = {"value": Health(True)}
    counts: dict[tuple[int, int], dict] = {}
    phase = {"recovered": False}

    def writer_for(job: int):
        async def write(index: int, doc: dict) -> None:
            c = counts.setdefault((job, index), {"last": 0, "drains": 0, "resets": 0,
                                                 "drains_after": 0, "state": ""})
            if doc["lastCompletedSeqID"] > c["last"]:
                c["drains"] += 1
                c["drains_after"] += phase["recovered"]
            if doc["state"] == "PROCESSING" and c["state"] == "RESETTING":
                c["resets"] += 1
            c["last"], c["state"] = doc["lastCompletedSeqID"], doc["state"]
        return write

    async def healthy(index: int) -> Health:
        return health["value"]

    ops = []
    for job in range(jobs):
        addresses = {int(pe): ("127.0.0.1", port) for pe, port in ports[str(job)].items()}
        region_list = [Region(RegionSpec(r, period=period, drain_timeout=1.0, reset_timeout=1.0,
                                         max_attempts=5, pes=frozenset(_pes(r, pes))))
                       for r in range(regions)]
        ops.append(RegionOperator(f"bench/job-{job}", region_list, status_writer=writer_for(job),
                                  health_source=healthy, addresses=addresses.get))

    async def main():
        async with trio.open_nursery() as nursery:
            urls = {}
            for job, op in enumerate(ops):
                urls[job] = await nursery.start(serve, op)
            print(json.dumps(urls), flush=True)
            cpu0 = _cpu()
            start = trio.current_time()
            await trio.sleep_until(start + fail_at)
            health["value"] = Health(False)
            for op in ops:
                op.recheck_all(range(regions))
            await trio.sleep_until(start + fail_at + fail_for)
            health["value"] = Health(True)
            phase["recovered"] = True
            for op in ops:
                op.recheck_all(range(regions))
            await trio.sleep_until(start + duration)
            cpu = _cpu() - cpu0
            states = {f"{j}/{r.index}": r.state.name for j, op in enumerate(ops)
                      for r in op.regions.values()}
            print(json.dumps({"cpu": cpu, "states": states,
                              "counts": {f"{j}/{i}": c for (j, i), c in counts.items()}}), flush=True)
            nursery.cancel_scope.cancel()

    trio.run(main)


def _pes(region: int, pes: int) -> range:
    return range(region * 1000 + 1, region * 1000 + pes + 1)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _drive(args) -> tuple[dict, list, float]:
    import trio

    from streams.regions.pesim import PeSimulator

    sims = {}
    ports = {}
    for job in range(args.jobs):
        sim = PeSimulator("http://placeholder:0", {r: _pes(r, args.region_pes) for r in range(args.regions)},
                          raw=True)
        await sim.open_sockets()
        sims[job] = sim
        ports[str(job)] = {str(pe): addr[1] for pe, addr in sim.addresses().items()}
    spec = json.dumps({"jobs": args.jobs, "regions": args.regions, "pes": args.region_pes,
                       "period": args.period, "fail_at": args.fail_at, "fail_for": args.fail_for,
                       "duration": args.duration, "ports": ports})
    child = subprocess.Popen([sys.executable, "-m", "bench.regions_bench", "--serve-fleet", "-"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    child.stdin.write(spec + "\n")
    child.stdin.flush()
    t0 = time.perf_counter()
    try:
        urls = json.loads(await trio.to_thread.run_sync(child.stdout.readline))
        async with trio.open_nursery() as nursery:
            for job, sim in sims.items():
                sim.base_url = urls[str(job)]
                await nursery.start(sim.run)
            summary = json.loads(await trio.to_thread.run_sync(child.stdout.readline))
            nursery.cancel_scope.cancel()
    finally:
        stop_server(child)
    errors = [e for sim in sims.values() for e in sim.errors]
    return summary, errors, time.perf_counter() - t0


def stop_server(child: subprocess.Popen) -> None:
    """Stop a benchmark's server process the way it expects (its stdin closes), by pid after 10 s."""
    child.stdin.close()
    try:
        child.wait(timeout=10)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def run(args) -> int:
    import trio

    summary, errors, wall = trio.run(_drive, args)
    counts = summary["counts"]
    n = args.jobs * args.regions
    drains = sum(c["drains"] for c in counts.values())
    stuck = sorted(k for k, s in summary["states"].items() if s not in ("PROCESSING", "DRAINING"))
    no_progress = sorted(k for k, c in counts.items() if c["drains_after"] == 0)
    unexpected = [e for e in errors if e[2] not in (409,)]
    print(f"regions fleet: {args.jobs} jobs x {args.regions} regions x {args.region_pes} PEs, "
          f"period {args.period * 1000:.0f} ms, all unhealthy at {args.fail_at:.1f} s for "
          f"{args.fail_for:.1f} s, {args.duration:.1f} s in all (wall {wall:.1f} s)")
    print(f"  drains completed {drains} ({drains / n:.1f} per region), resets completed "
          f"{sum(c['resets'] for c in counts.values())}; operator CPU {summary['cpu']:.2f} s = "
          f"{summary['cpu'] / max(drains, 1) * 1000:.2f} ms per drain")
    print(f"  regions not back in PROCESSING/DRAINING: {len(stuck)}{' ' + str(stuck[:5]) if stuck else ''}; "
          f"without a drain after recovery: {len(no_progress) + n - len(counts)}; PE reports refused "
          f"409 (late, around the failure): {len(errors) - len(unexpected)}, otherwise: {len(unexpected)}")
    ok = not stuck and not no_progress and len(counts) == n and not unexpected
    print(f"  -> {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1
