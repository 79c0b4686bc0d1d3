"""`ykshm bench e2e`: end-to-end scheduling throughput and restart recovery, real processes.

    ykshm bench e2e [--nodes 1000] [--pods 5000] [--backlog N] [--recovery-pods 10000]
                    [--no-recovery]
                    [--concurrency 4] [--bind-workers 8] [--json]

Starts `ykshm sim-cluster --nodes N --no-kubelet-events`, `ykshm engine` and `ykshm shim` as
subprocesses under a unique instance name (tools.harness), then (the simulated kubelet's
Pulled/Created/Started events are off, as KWOK's default stages post none, so the number compares
with YuniKorn-on-KWOK; its node leases stay on, as KWOK's):

1. throughput: creates P pods of one application through the API (`--concurrency` parallel
   POSTs) and follows them with a list/watch; `pods_per_s` = P / (first create -> last pod bound
   as seen by the watch). YuniKorn's published reference: 833 pods/s on KWOK.
2. backlog: kills the engine, creates `--backlog` pods (default P) while it is down (the shim
   caches them), starts a new engine; `backlog_pods_per_s` = pods / (shim Running -> last bound):
   the scheduling pipeline (asks, cycle, bindings) without the API's create rate.
3. recovery: tops the cluster up to `--recovery-pods` running pods, waits until the engine's
   published usage shows them all, kills the engine with SIGKILL, starts a new one and measures
   `recovery_s` = kill -> the shim is Running again (second registration) *and* the new engine's
   UGM usage equals the usage before the kill (target <= 5 s). `running_s` is kill -> Running.

`--json` prints one JSON object; otherwise one line per number. Processes are stopped by pid when
the benchmark ends, however it ends.
"""

from __future__ import annotations

import math
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

import orjson

from common.cliutil import Failure, Parser, UsageError, run_main

PROG = "ykshm bench e2e"
YUNIKORN_PODS_PER_S = 833.0
RECOVERY_TARGET_S = 5.0
PODS = "/api/v1/namespaces/default/pods"


async def _create(url: str, names: list[str], app: str, concurrency: int,
                  errors: list[str]) -> None:
    """Create pods `names` over `concurrency` connections; the first refused pod is added to
    `errors` and stops the creation. Errors are collected, not raised: an exception inside a
    trio nursery leaves it as an ExceptionGroup, which `run_main` would show as a traceback."""
    import trio

    from tools.harness import pod_body
    from kube.client import RawConnection
    from kube.config import KubeConfig

    it = iter(names)

    async def creator() -> None:
        conn = RawConnection(KubeConfig(server=url))
        try:
            for n in it:
                if errors:
                    return
                status, data = await conn.post(PODS, orjson.dumps(pod_body(n, app=app)))
                if status >= 300:
                    errors.append(f"{n}: {status} {data[:200]!r}")
                    return
        finally:
            await conn.aclose()

    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(creator)


def _creation_failed(errors: list[str]) -> None:
    if errors:
        raise Failure(f"pod creation failed: {errors[0]}")


async def _create_and_follow(url: str, names: list[str], app: str, concurrency: int,
                             timeout: float, create: bool = True) -> dict[str, float]:
    """Create pods `names` (unless `create` is false: they exist) and follow them until all are
    bound; returns timing: create start/end, when the last one was bound (monotonic and wall)."""
    import httpx
    import trio

    from kube.client import Informer

    want = set(names)
    bound: set[str] = set()
    result: dict[str, float] = {}
    errors: list[str] = []
    async with httpx.AsyncClient(base_url=url, timeout=60,
                                 limits=httpx.Limits(max_connections=concurrency + 4)) as client:
        send, recv = trio.open_memory_channel[Any](math.inf)
        informer = Informer(client, PODS, "pods")
        async with trio.open_nursery() as nursery:
            # the informer reports its first list, then its changes
            await nursery.start(informer.run, send)
            result["create_start"] = time.monotonic()

            async def creators() -> None:
                await _create(url, names, app, concurrency, errors)
                result["create_end"] = time.monotonic()

            if create:
                nursery.start_soon(creators)
            with trio.move_on_after(timeout) as scope:
                async for kind, events in recv:
                    if events is None:
                        continue
                    for etype, obj in events:
                        name = obj["metadata"]["name"]
                        if name in want and etype != "DELETED" and obj["spec"].get("nodeName"):
                            bound.add(name)
                    if errors:
                        break
                    if len(bound) == len(want):
                        result["bound_end"] = time.monotonic()
                        result["bound_wall"] = time.time()
                        break
            nursery.cancel_scope.cancel()
    _creation_failed(errors)
    if scope.cancelled_caught:
        raise Failure(f"only {len(bound)} of {len(want)} pods bound within {timeout:.0f}s")
    return result


async def _create_only(url: str, names: list[str], app: str, concurrency: int) -> None:
    errors: list[str] = []
    await _create(url, names, app, concurrency, errors)
    _creation_failed(errors)


def _total_pods(usage: dict[str, Any]) -> int:
    return sum(u["queues"].get("resourceUsage", {}).get("pods", 0) for u in usage.get("users", []))


def _body(argv: Sequence[str]) -> int:
    p = Parser(prog=PROG, description="End-to-end pods/s and restart recovery time.")
    p.add_argument("--nodes", type=int, default=1000, help="simulated nodes (default 1000)")
    p.add_argument("--pods", type=int, default=5000, help="pods for the throughput run (5000)")
    p.add_argument("--recovery-pods", type=int, default=10_000,
                   help="running pods when the engine is killed (default 10000)")
    p.add_argument("--no-recovery", action="store_true", help="skip the recovery measurement")
    p.add_argument("--backlog", type=int, default=None,
                   help="pods created while the engine is down, then scheduled at once "
                        "(default: --pods; 0 = skip)")
    p.add_argument("--concurrency", type=int, default=4, help="parallel pod creations (4)")
    p.add_argument("--bind-workers", type=int, default=8,
                   help="the shim's parallel bindings (8)")
    p.add_argument("--timeout", type=float, default=600, help="per phase, seconds (600)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(list(argv))
    if args.nodes < 1 or args.pods < 1 or args.recovery_pods < 0 or args.concurrency < 1:
        raise UsageError("--nodes, --pods and --concurrency must be positive")
    import trio

    from common import gcfreeze
    from tools.harness import Cluster, HarnessError, wait_for

    gcfreeze.install()   # the watcher's store of every pod: as the shim's (kube.args.run_role)

    name = f"bench-{uuid.uuid4().hex[:8]}"
    out: dict[str, Any] = {"nodes": args.nodes, "pods": args.pods,
                           "yunikorn_pods_per_s": YUNIKORN_PODS_PER_S}
    log = (lambda *a: None) if args.json else (lambda *a: print(*a, file=sys.stderr, flush=True))
    cluster = Cluster(name, nodes=args.nodes, kubelet_delay=0.05, request_events=False,
                      sim_args=["--no-kubelet-events"])
    try:
        t = time.monotonic()
        cluster.start_sim(timeout=120)
        cluster.start_engine()
        cluster.start_shim(timeout=120, extra=["--bind-workers", str(args.bind_workers)])
        out["startup_s"] = round(time.monotonic() - t, 3)
        log(f"# {args.nodes} nodes up, shim Running after {out['startup_s']} s")
        names = [f"tp-{i}" for i in range(args.pods)]
        timing = trio.run(_create_and_follow, cluster.url, names, "bench-throughput",
                          args.concurrency, args.timeout)
        elapsed = timing["bound_end"] - timing["create_start"]
        out["pods_per_s"] = round(args.pods / elapsed, 1)
        out["throughput_s"] = round(elapsed, 3)
        out["create_per_s"] = round(args.pods / (timing.get("create_end", timing["bound_end"])
                                                 - timing["create_start"]), 1)
        backlog = args.pods if args.backlog is None else args.backlog
        if backlog > 0:
            # the scheduling pipeline without the API's create rate: pods wait in the shim's
            # cache while the engine is down, then go out as asks the moment it is Running
            log(f"# backlog: {backlog} pods created while the engine is down")
            regs = cluster.shim_status()["registrations"]
            cluster.kill_engine()
            cluster.wait_shim("New", 30)
            bl_names = [f"bl-{i}" for i in range(backlog)]
            trio.run(_create_only, cluster.url, bl_names, "bench-backlog", args.concurrency)
            wait_for(lambda: cluster.shim_status()["cluster"]["pods"] >= args.pods + backlog,
                     60, "the shim to cache the backlog")
            cluster.start_engine()
            timing = trio.run(_create_and_follow, cluster.url, bl_names, "bench-backlog",
                              args.concurrency, args.timeout, False)
            status = cluster.wait_shim("Running", 30, registrations=regs + 1)
            running_at = [t["time"] for t in status["history"] if t["to"] == "Running"][-1]
            span = max(1e-6, timing["bound_wall"] - running_at)
            out["backlog"] = backlog
            out["backlog_pods_per_s"] = round(backlog / span, 1)
        if not args.no_recovery and args.recovery_pods > 0:
            extra = max(0, args.recovery_pods - args.pods - max(0, backlog))
            if extra:
                log(f"# topping up to {args.recovery_pods} running pods")
                trio.run(_create_and_follow, cluster.url, [f"rp-{i}" for i in range(extra)],
                         "bench-recovery", args.concurrency, args.timeout)
            total = max(args.recovery_pods, args.pods + max(0, backlog))
            before = wait_for(lambda: (u := cluster.usage()) and _total_pods(u) == total and u,
                              60, f"engine usage of {total} pods")
            status = wait_for(lambda: (s := cluster.shim_status())["bindings"]["done"] >= total
                              and s, 30, "the shim's status to show every binding")
            regs = status["registrations"]
            done_before = status["bindings"]["done"]
            out["recovery_pods"] = total
            cluster.kill_engine()
            t0 = time.monotonic()
            cluster.start_engine()
            out["engine_start_s"] = round(time.monotonic() - t0, 3)
            cluster.wait_shim("Running", args.timeout, registrations=regs + 1)
            out["running_s"] = round(time.monotonic() - t0, 3)
            wait_for(lambda: cluster.usage() == before, args.timeout, "usage equal to before",
                     interval=0.02)
            out["recovery_s"] = round(time.monotonic() - t0, 3)
            out["usage_equal"] = True
            after = cluster.shim_status()
            out["rebinds"] = after["bindings"]["done"] - done_before
            out["bind_conflicts"] = after["bindings"]["conflicts"]
    except HarnessError as exc:
        raise Failure(str(exc)) from None
    finally:
        cluster.close()
    if args.json:
        print(orjson.dumps(out).decode())
    else:
        print(f"pods_per_s {out['pods_per_s']} ({args.pods} pods on {args.nodes} nodes in "
              f"{out['throughput_s']} s; pod creation {out['create_per_s']}/s)")
        print(f"yunikorn_reference_pods_per_s {YUNIKORN_PODS_PER_S} (YuniKorn on KWOK)")
        if "backlog_pods_per_s" in out:
            print(f"backlog_pods_per_s {out['backlog_pods_per_s']} ({out['backlog']} pods "
                  f"waiting when the engine came up: Running -> all bound)")
        if "recovery_s" in out:
            verdict = "ok" if out["recovery_s"] <= RECOVERY_TARGET_S else "over target"
            print(f"recovery_s {out['recovery_s']} (engine killed with {out['recovery_pods']} "
                  f"running pods; shim Running after {out['running_s']} s, engine start "
                  f"{out['engine_start_s']} s; usage identical; target <= {RECOVERY_TARGET_S} s: "
                  f"{verdict})")
            print(f"rebinds_after_recovery {out['rebinds']} (bind conflicts "
                  f"{out['bind_conflicts']})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(PROG, _body, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
