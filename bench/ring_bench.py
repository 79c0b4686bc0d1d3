"""`ykshm bench ring`: what one event costs the engine, in time and shared memory.

    ykshm bench ring [--events N] [--json]
    ykshm bench ring --stress [--seconds S] [--readers R] [--capacity C] [--write-rate W] [--json]

Default mode replays the event-history seed's "normal" job mix into a fresh ring of capacity N
(default 9,000,000, the seed's five-day worst case): apps of 100 pods; per app APP ADD
DETAILS_NONE and APP SET APP_NEW, APP_ACCEPTED, APP_STARTING, APP_RUNNING, APP_COMPLETING,
APP_COMPLETED; per pod APP ADD APP_REQUEST (referenceID = the pod's UUID) and APP ADD APP_ALLOC
(referenceID = a new allocation UUID), both with a memory/vcore/pods resource; objectID an app ID
like `spark-app-000123`. That is 207 events per app, as in the seed's table.

How it measures
- Inputs are generated in chunks of whole apps *before* the chunk is published, so generating
  UUIDs and tuples is never timed.
- publish: each chunk is published in batches of 100 events timed with `time.perf_counter_ns`
  (one clock read per batch, not per event, so the clock's own ~40 ns does not swamp a
  few-hundred-ns call). A batch's time / 100 is one sample; median and p99 are over those
  samples. p99 of batch means is lower than a per-call p99 would be: a single slow call is
  averaged with 99 others. The loop overhead (`for args in batch: publish(*args)`) is included,
  as the engine pays it too. The garbage collector stays on.
- host speed (`noop_loop_ns_median`): every 10th batch is also run through the same loop with a
  no-op function in place of publish. On a shared VM everything runs 1.5-2x slower for minutes
  at a time; this figure tells such a phase from a change in the code.
- shared memory: allocated blocks of the ring's segments (`st_blocks`, i.e. pages really touched
  in tmpfs), so bytes per event counts records, intern tables and resources together.
- read+encode: `RingReader.read_range_json` of 10,000 records (the C renderer `/ws/v1/events/batch`
  uses), median of 21 runs over different starts, divided by 10,000.

Stress mode: one writer process publishes records whose every field is derived from the id
(referenceID a UUID computed from the id; in alternate runs of 64 ids either the general path --
objectID "obj-<id % 251>", a message per run alone, with a resource (a pair entry) or none,
so message and pair entries are released and reused as the ring laps, resource memory=id % 241,
timestamp BASE+id -- or the engine's hot path -- one
pinned objectID and resource per run, no message, the ring's clock; type/detail from a table by
id) into a small ring it laps many times; R reader processes read random ranges, follow cursors
and read JSON, and check every record they get against its id.
A record that does not match is a torn read; the target is 0 in >= 10,000,000 checked reads.
Readers check in Python (~2-5 us a record), so on a 2-CPU host an uncapped writer starves them;
`--write-rate` caps the writer so the readers get the CPU (a 65,536 ring at 40,000/s is still
lapped every 1.6 s, and readers aim at the oldest, about-to-be-overwritten records half the time).

Every segment the benchmark creates is unlinked when it ends, also on Ctrl-C or SIGTERM; the stress
processes leave within a second of either (and by themselves if the benchmark is killed), so their
multiprocessing semaphores (/dev/shm/sem.mp-*) go with them.
"""

from __future__ import annotations

import argparse
import glob
import itertools
import multiprocessing as mp
import os
import random
import signal
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from shm.bench_support import EVENTS_PER_APP, PODS_PER_APP, seed_mix
from shm.events import EventChangeDetail, EventChangeType, EventRecordType
from tools import shmscan
from common.cliutil import Failure, Parser, UsageError, ranged, run_main

PROG = "ykshm bench ring"
BATCH = 100
APPS_PER_CHUNK = 1  # 207 events (one app) generated just before they are published
READ_COUNT = 10_000
READ_RUNS = 21
DEFAULT_EVENTS = 9_000_000


def _int(minimum: int, maximum: int = 2**40):
    return ranged(lambda text: int(text.replace("_", ""), 10), "an integer", minimum, maximum)


def _float(minimum: float, maximum: float):
    return ranged(float, "a number", minimum, maximum)


def _bench_name() -> str:
    return f"ykbench-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _segments(name: str) -> list[str]:
    """Every /dev/shm/NAME.* (temporary files of a create cut short too): the benchmark's name
    is its own, nothing of it exists when it starts."""
    return glob.glob(f"/dev/shm/{glob.escape(name)}.*")


def _cleanup(name: str) -> None:
    for path in _segments(name):
        try:
            os.unlink(path)
        except OSError:
            pass


def _segment_bytes(name: str) -> int:
    return sum(shmscan.resident_bytes(path) for path in _segments(name)
               if not path.endswith(".state"))


# -- the normal mix --------------------------------------------------------------------------------


def normal_mix(total: int, seed: int = 7) -> Iterator[list[tuple]]:
    """`shm.bench_support.seed_mix(total)` in chunks of APPS_PER_CHUNK whole apps (the last one
    cut at `total`), each generated before it is published.

    Tuple order = RingWriter.publish positional order: (type, change_type, change_detail,
    object_id, reference_id, message, resource). No timestamp: like the engine, the bench lets
    the ring stamp each event with the current time, so reading the clock is part of the cost.
    """
    events = seed_mix(total, seed)
    while chunk := list(itertools.islice(events, APPS_PER_CHUNK * EVENTS_PER_APP)):
        yield chunk


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, int(q * len(sorted_values)))
    return sorted_values[index]


def run_normal(events: int, name: str) -> dict[str, Any]:
    from shm import RingReader, RingWriter

    writer = RingWriter.create(name, events, 1000)
    try:
        publish = writer.publish
        perf = time.perf_counter_ns
        samples: list[float] = []
        noop_samples: list[float] = []
        total_ns = 0
        for chunk in normal_mix(events):
            for i in range(0, len(chunk), BATCH):
                batch = chunk[i : i + BATCH]
                t0 = perf()
                for args in batch:
                    publish(*args)
                dt = perf() - t0
                total_ns += dt
                samples.append(dt / len(batch))
                if len(samples) % 10 == 0:
                    noop_samples.append(_noop_loop_ns(batch))
        samples.sort()
        noop_samples.sort()
        shm_bytes = _segment_bytes(name)
        reader = RingReader.attach(name)
        try:
            bounds = reader.bounds()
            lowest, highest = bounds if bounds else (0, -1)
            count = min(READ_COUNT, highest - lowest + 1)
            read_samples = []
            read_n = 0
            rng = random.Random(11)
            for _ in range(READ_RUNS if count > 0 else 0):
                start = rng.randint(lowest, max(lowest, highest - count + 1))
                t0 = perf()
                _, n = reader.read_range_json(start, count)
                dt = perf() - t0
                read_samples.append(dt / max(n, 1))
                read_n = n
            read_samples.sort()
        finally:
            reader.close()
    finally:
        writer.close()
        writer.unlink()
    return {
        "events": events,
        "publish_ns_median": round(_percentile(samples, 0.5), 1),
        "publish_ns_p99": round(_percentile(samples, 0.99), 1),
        "publish_ns_mean": round(total_ns / events, 1) if events else 0.0,
        "shm_bytes": shm_bytes,
        "bytes_per_event": round(shm_bytes / events, 2) if events else 0.0,
        "read_encode_ns_per_event": round(_percentile(read_samples, 0.5), 1),
        "read_encode_records": read_n,
        "noop_loop_ns_median": round(_percentile(noop_samples, 0.5), 1),
    }


def _noop(type, change_type, change_detail, object_id="", reference_id="", message="",
          resource=None, timestamp_nano=0) -> int:
    return 0


def _noop_loop_ns(batch: list[tuple]) -> float:
    """ns/event of the publish loop with a no-op in place of publish: the host's speed right
    now. A shared VM's speed changes by 1.5-2x from one minute to the next, so a publish median
    means little without it."""
    noop = _noop
    t0 = time.perf_counter_ns()
    for args in batch:
        noop(*args)
    return (time.perf_counter_ns() - t0) / len(batch)


# -- stress ----------------------------------------------------------------------------------------

STRESS_TS0 = 1_600_000_000_000_000_000
_STRESS_KINDS = (
    (int(EventRecordType.APP), int(EventChangeType.ADD), int(EventChangeDetail.APP_ALLOC)),
    (int(EventRecordType.APP), int(EventChangeType.SET), int(EventChangeDetail.APP_RUNNING)),
    (int(EventRecordType.NODE), int(EventChangeType.ADD), int(EventChangeDetail.NODE_ALLOC)),
    (int(EventRecordType.QUEUE), int(EventChangeType.SET), int(EventChangeDetail.QUEUE_APP)),
    (int(EventRecordType.APP), int(EventChangeType.REMOVE), int(EventChangeDetail.ALLOC_CANCEL)),
    (int(EventRecordType.USERGROUP), int(EventChangeType.SET), int(EventChangeDetail.UG_USER_RESOURCE)),
)


def stress_reference(event_id: int) -> str:
    """A canonical UUID that encodes the id (the ring stores it as 16 raw bytes)."""
    return f"{event_id >> 48 & 0xffffffff:08x}-0000-4000-8000-{event_id & 0xffffffffffff:012x}"


def _stress_shape(event_id: int) -> tuple[str, str, dict[str, int] | None, int]:
    """objectID, message, resource and timestamp of record `event_id` (0 = the ring stamps it).

    Ids come in runs of 64. Even runs take the writer's general path: a new objectID (251
    values) each record, a timestamp derived from the id, and by id % 4: a message alone (0), a
    message and a resource (1: the ring keeps both in one pair entry, shared by the run's 16
    such records), a new resource (241 values) alone (2, 3). The message changes every run, so
    its intern entry (and its pair's) is released and reused as the writer laps the ring -- the
    race a reader must survive. Odd runs take the engine's hot path: one objectID and one
    resource for the whole run (pinned, see RingWriter.publish), every 4th record without a
    resource, no message, and the ring's own clock as the timestamp.
    """
    run = event_id >> 6
    if run & 1 == 0:
        kind = event_id % 4
        message = f"m{run}" if kind < 2 else ""
        if kind == 0:
            resource = None
        elif kind == 1:
            resource = {"memory": run % 241, "vcore": 3000 + run % 241}
        else:
            resource = {"memory": event_id % 241, "vcore": 1000 + event_id % 241}
        return f"obj-{event_id % 251}", message, resource, STRESS_TS0 + event_id
    resource = None if event_id % 4 == 0 else {"memory": run % 241, "vcore": 2000 + run % 241}
    return f"hot-{run % 251}", "", resource, 0


def stress_fields(event_id: int) -> tuple:
    """The publish() arguments of record `event_id` in stress mode: all derived from the id.

    The raw-UUID referenceID is unique per id; see `_stress_shape` for the rest. Together they
    stay far below the intern table's size for any capacity.
    """
    kind = _STRESS_KINDS[event_id % len(_STRESS_KINDS)]
    object_id, message, resource, ts = _stress_shape(event_id)
    return (*kind, object_id, stress_reference(event_id), message, resource, ts)


def _stamp_ok(got: int, want: int) -> bool:
    """A derived timestamp must match exactly; a ring-stamped one is a clock reading, which no
    derived timestamp (STRESS_TS0 + id, years in the past) can be mistaken for."""
    return got == want if want else got > STRESS_TS0 + (1 << 40)


def check_event(ev) -> bool:
    """Whether a record read back is exactly what the writer published under its id."""
    i = ev.id
    kind = _STRESS_KINDS[i % len(_STRESS_KINDS)]
    object_id, message, resource, ts = _stress_shape(i)
    return (
        _stamp_ok(ev.timestamp_nano, ts)
        and ev.object_id == object_id
        and ev.reference_id == stress_reference(i)
        and ev.message == message
        and ev.type == kind[0]
        and ev.change_type == kind[1]
        and ev.change_detail == kind[2]
        and ev.resource == resource
    )


def check_json(obj: dict) -> bool:
    i = obj["id"]
    kind = _STRESS_KINDS[i % len(_STRESS_KINDS)]
    object_id, message, resource, ts = _stress_shape(i)
    res = obj.get("resource", {}).get("resources", {})
    return (
        _stamp_ok(obj.get("timestampNano", 0), ts)
        and obj.get("objectID") == object_id
        and obj.get("referenceID") == stress_reference(i)
        and obj.get("message", "") == message
        and obj.get("type", 0) == kind[0]
        and obj.get("eventChangeType", 0) == kind[1]
        and obj.get("eventChangeDetail", 0) == kind[2]
        and {k: v.get("value", 0) for k, v in res.items()} == (resource or {})
    )


def _orphaned(parent: int) -> bool:
    """Whether the benchmark that started us is gone (killed -9): then we stop as if told to."""
    return os.getppid() != parent


def _stress_child() -> int:
    """A stress process ignores Ctrl-C (the benchmark stops it through `stop`); its parent's pid."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return os.getppid()


def _stress_writer(name: str, capacity: int, rate: int, ready, stop, out) -> None:
    parent = _stress_child()
    from shm import RingWriter

    writer = RingWriter.create(name, capacity, 16)
    published = 0
    mismatched = 0
    try:
        ready.set()
        publish = writer.publish
        next_id = 0
        t0 = time.monotonic()
        while not stop.is_set() and not _orphaned(parent):
            if rate:
                ahead = next_id / rate - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)
            for _ in range(1000):
                got = publish(*stress_fields(next_id))
                if got != next_id:
                    mismatched += 1
                    next_id = got
                next_id += 1
            published = next_id
            writer.heartbeat()
    finally:
        writer.close()
        out.put(("writer", {"published": published, "id_mismatches": mismatched}))


def _stress_reader(name: str, seed: int, stop, out, started) -> None:
    parent = _stress_child()
    from shm import RingReader

    reader = RingReader.attach(name)
    started.put(seed)
    rng = random.Random(seed)
    checked = torn = lost = order_errors = json_checked = 0
    first_bad: str | None = None
    cursor = None
    json_cursor = None

    def check_objs(objs: list, n: int) -> None:
        nonlocal torn, first_bad, checked, json_checked
        if len(objs) != n:
            torn += 1
            first_bad = first_bad or f"rendered count {n} but {len(objs)} records"
        for obj in objs:
            if not check_json(obj):
                torn += 1
                first_bad = first_bad or orjson.dumps(obj).decode()
        checked += len(objs)
        json_checked += len(objs)

    def check_events(events: list) -> None:
        nonlocal torn, first_bad, checked
        for ev in events:
            if not check_event(ev):
                torn += 1
                first_bad = first_bad or repr(ev)
        checked += len(events)

    def follow(cur):
        """`cur`, or now and then (and at first) a new cursor at the lowest retained id."""
        if cur is None or rng.random() < 0.01:
            bounds = reader.bounds()
            return reader.cursor(bounds[0] if bounds else 0)
        return cur

    def count_lost(batch) -> None:
        nonlocal lost
        if batch.lost:
            lost += batch.lost[1] - batch.lost[0] + 1

    try:
        while not stop.is_set() and not _orphaned(parent):
            mode = rng.random()
            if mode < 0.45:
                # a random range as REST JSON (what /ws/v1/events/batch sends)
                bounds = reader.bounds()
                if bounds is None:
                    continue
                lo, hi = bounds
                # often aim at the oldest records: the ones being overwritten right now
                start = lo + rng.randint(0, 100) if rng.random() < 0.5 else rng.randint(lo, hi)
                count = rng.randint(1, 2000)
                raw, n = reader.read_range_json(start, count)
                objs = orjson.loads(raw) or []
                prev = start - 1
                for obj in objs:
                    if not prev < obj["id"] < start + count:
                        order_errors += 1
                    prev = obj["id"]
                check_objs(objs, n)
            elif mode < 0.7:
                # a following cursor as NDJSON (what /ws/v1/events/stream sends)
                json_cursor = follow(json_cursor)
                batch = json_cursor.poll_json(rng.randint(1, 2000))
                count_lost(batch)
                check_objs([orjson.loads(x) for x in batch.lines.splitlines()], batch.count)
            elif mode < 0.85:
                # a random range as Event objects
                bounds = reader.bounds()
                if bounds is None:
                    continue
                lo, hi = bounds
                count = rng.randint(1, 1000)
                start = lo + rng.randint(0, 100) if rng.random() < 0.5 else rng.randint(lo, hi)
                events = reader.read_range(start, count)
                prev = start - 1
                for ev in events:
                    if not prev < ev.id < start + count:
                        order_errors += 1
                    prev = ev.id
                check_events(events)
            else:
                # a following cursor as Event objects
                cursor = follow(cursor)
                batch = cursor.poll(rng.randint(1, 1000))
                count_lost(batch)
                check_events(batch.events)
    finally:
        reader.close()
        out.put(("reader", {"checked": checked, "torn": torn, "lost": lost,
                            "order_errors": order_errors, "json_checked": json_checked,
                            "first_bad": first_bad}))


def _wait_started(started, readers: list) -> None:
    """Until every reader has attached (at most 60 s): on a busy host starting a process takes
    seconds, and `--seconds` is the time the readers check records, not the time they start."""
    deadline = time.monotonic() + 60
    for _ in readers:
        try:
            started.get(timeout=max(0.1, deadline - time.monotonic()))
        except Exception:  # queue.Empty: a reader died or the host is hopelessly slow
            if not all(p.is_alive() for p in readers) or time.monotonic() >= deadline:
                raise Failure("the stress readers did not start within 60 s") from None


def _collect(procs: list, out, results: list) -> None:
    """Each stress process's report, waiting at most 30 s (a busy host) for all of them."""
    deadline = time.monotonic() + 30
    while len(results) < len(procs) and time.monotonic() < deadline:
        try:
            results.append(out.get(timeout=max(0.1, deadline - time.monotonic())))
        except Exception:  # queue.Empty, or a child died without reporting
            if not any(p.is_alive() for p in procs):
                break


def _stop_all(procs: list) -> None:
    """Join the stress processes (told to stop), terminating any still there after a second;
    `active_children` also catches one whose start() a Ctrl-C interrupted."""
    everyone = list(dict.fromkeys([*procs, *mp.active_children()]))
    deadline = time.monotonic() + 1.0
    for p in everyone:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in everyone:
        if p.is_alive():
            p.terminate()
            p.join(5)


def run_stress(seconds: float, readers: int, capacity: int, name: str,
               rate: int = 0) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    ready, stop, out, started = ctx.Event(), ctx.Event(), ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=_stress_writer, args=(name, capacity, rate, ready, stop, out),
                         name="ring-bench-writer", daemon=True)]
    interrupted = False
    results: list[tuple[str, dict]] = []
    try:
        procs[0].start()
        if not ready.wait(30):
            raise Failure("the stress writer did not start within 30 s")
        for r in range(readers):
            p = ctx.Process(target=_stress_reader, args=(name, 1000 + r, stop, out, started),
                            name=f"ring-bench-reader-{r}", daemon=True)
            p.start()
            procs.append(p)
        _wait_started(started, procs[1:])
        t0 = time.monotonic()
        try:
            while time.monotonic() - t0 < seconds:
                if not all(p.is_alive() for p in procs):
                    break
                time.sleep(0.05)
        except KeyboardInterrupt:
            interrupted = True
        elapsed = time.monotonic() - t0
        stop.set()
        if not interrupted:
            _collect(procs, out, results)
    finally:
        stop.set()
        _stop_all(procs)
    if interrupted:
        raise KeyboardInterrupt
    writer = next((r for kind, r in results if kind == "writer"), None)
    reader_results = [r for kind, r in results if kind == "reader"]
    if writer is None or len(reader_results) < readers:
        codes = ", ".join(f"{p.name}={p.exitcode}" for p in procs)
        raise Failure(f"a stress process died without reporting ({codes})")
    doc = {
        "seconds": round(elapsed, 2),
        "readers": readers,
        "capacity": capacity,
        "write_rate_limit": rate,
        "published": writer["published"],
        "publish_per_second": round(writer["published"] / elapsed) if elapsed else 0,
        "id_mismatches": writer["id_mismatches"],
        "reads_checked": sum(r["checked"] for r in reader_results),
        "json_reads_checked": sum(r["json_checked"] for r in reader_results),
        "torn_reads": sum(r["torn"] for r in reader_results),
        "order_errors": sum(r["order_errors"] for r in reader_results),
        "lost_by_cursors": sum(r["lost"] for r in reader_results),
        "laps": round(writer["published"] / capacity, 1),
    }
    bad = next((r["first_bad"] for r in reader_results if r["first_bad"]), None)
    if bad:
        doc["first_torn"] = bad
    return doc


# -- CLI -------------------------------------------------------------------------------------------


def _print_normal(doc: dict[str, Any]) -> None:
    mib = doc["shm_bytes"] / (1 << 20)
    apps = -(-doc["events"] // EVENTS_PER_APP)
    print(f"ring bench: {doc['events']:,} events, normal mix ({apps:,} apps x {PODS_PER_APP} pods, "
          f"{EVENTS_PER_APP} events/app), ring capacity {doc['events']:,}")
    print(f"publish:       {doc['publish_ns_median']:.0f} ns/event median, "
          f"{doc['publish_ns_p99']:.0f} ns/event p99, {doc['publish_ns_mean']:.0f} mean "
          f"(batches of {BATCH}; target median <= 500)")
    print(f"shared memory: {mib:.1f} MiB in use ({doc['shm_bytes']:,} bytes), "
          f"{doc['bytes_per_event']:.1f} bytes/event"
          + (" (target for 9,000,000 events <= 450 MiB)" if doc["events"] == DEFAULT_EVENTS else ""))
    print(f"read+encode:   {doc['read_encode_ns_per_event']:.0f} ns/event "
          f"(read_range_json of {doc['read_encode_records']:,} records to REST JSON, "
          f"median of {READ_RUNS})")
    print(f"host speed:    {doc['noop_loop_ns_median']:.0f} ns/event for the same loop calling a "
          f"no-op (part of publish; higher means a busier host right now)")
    _print_host(doc)


def _print_host(doc: dict[str, Any]) -> None:
    load = doc.get("load_average")
    if load:
        print(f"host:          {doc['cpus']} CPUs, load average {load[0]} {load[1]} {load[2]} "
              f"(other work on the host inflates p99)")


def _print_stress(doc: dict[str, Any]) -> None:
    print(f"ring stress: {doc['seconds']} s, 1 writer + {doc['readers']} readers, "
          f"capacity {doc['capacity']:,}")
    limit = f", capped at {doc['write_rate_limit']:,}/s" if doc["write_rate_limit"] else ""
    print(f"writer:        {doc['published']:,} events published ({doc['publish_per_second']:,}/s"
          f"{limit}, {doc['laps']} laps of the ring)")
    print(f"reads checked: {doc['reads_checked']:,} ({doc['json_reads_checked']:,} as JSON), "
          f"cursor lost-range events {doc['lost_by_cursors']:,}")
    print(f"torn reads accepted: {doc['torn_reads']}  (order errors {doc['order_errors']}, "
          f"id mismatches {doc['id_mismatches']})")
    if "first_torn" in doc:
        print(f"first torn record: {doc['first_torn']}")
    _print_host(doc)


def _interrupt(signum, frame) -> None:  # noqa: ARG001 - signal handler signature
    raise KeyboardInterrupt


def _body(argv: Sequence[str]) -> int:
    parser = Parser(prog=PROG, description="Benchmark the shared-memory event ring.")
    parser.add_argument("--events", type=_int(1, 100_000_000), default=DEFAULT_EVENTS,
                        help="events to publish (= ring capacity; default 9,000,000)")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--stress", action="store_true",
                        help="writer + readers checking every record for tearing")
    parser.add_argument("--seconds", type=_float(0.1, 86400), default=10.0,
                        help="stress duration (default 10)")
    parser.add_argument("--readers", type=_int(1, 256), default=2,
                        help="stress reader processes (default 2)")
    parser.add_argument("--capacity", type=_int(16, 100_000_000), default=65_536,
                        help="stress ring capacity, small so the writer laps it (default 65536)")
    parser.add_argument("--name", default=None,
                        help="instance name of the benchmark's ring (default ykbench-PID-RANDOM); "
                             "its segments are removed at the end")
    parser.add_argument("--write-rate", type=_int(0, 10**9), default=0,
                        help="stress: cap the writer at this many events/s, leaving CPU to the "
                             "readers on a small host (default 0 = as fast as it can)")
    args = parser.parse_args(list(argv))
    try:
        import shm  # noqa: F401
    except ImportError as exc:
        raise Failure(f"the shared-memory ring is not available ({exc})") from None
    name = args.name or _bench_name()
    problem = shmscan.check_name(name)
    if problem:
        raise UsageError(problem)
    if _segments(name):
        raise Failure(f"ring {name!r} already exists; the benchmark makes (and removes) its own")
    previous = signal.signal(signal.SIGTERM, _interrupt)  # `kill PID`: as clean as Ctrl-C
    try:
        if args.stress:
            doc = run_stress(args.seconds, args.readers, args.capacity, name, args.write_rate)
            ok = doc["torn_reads"] == 0 and doc["order_errors"] == 0
        else:
            doc = run_normal(args.events, name)
            ok = True
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        raise Failure("out of memory") from None
    except OSError as exc:
        raise Failure(f"{exc.strerror or exc} (is /dev/shm large enough?)") from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        _cleanup(name)
    doc["load_average"] = [round(x, 2) for x in os.getloadavg()]
    doc["cpus"] = os.cpu_count()
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(doc) + b"\n")
    elif args.stress:
        _print_stress(doc)
    else:
        _print_normal(doc)
    sys.stdout.flush()
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(PROG, _body, list(sys.argv[1:] if argv is None else argv))


__all__ = ["main", "normal_mix", "stress_fields", "check_event", "check_json"]

if __name__ == "__main__":
    sys.exit(main())
