"""`ykshm export`: every event in order, exactly once across restarts and crashes, gaps named,
engine restarts as new generations, retention, the state snapshot, status and metrics."""

from __future__ import annotations

import time

import orjson
from exportharness import ExportProcess, events_of, ring_json, stream_entries, wait_for

from export.keys import Keys
from export.status import read_file
from shm import RingReader, RingWriter, SnapshotWriter
from shm.bench_support import seed_mix


def publish(writer: RingWriter, n: int, seed: int = 7) -> None:
    for args in seed_mix(n, seed):
        writer.publish(*args)


def exported_up_to(client, name: str, generation: int, last_id: int):
    key = Keys.for_instance(name).events

    def done():
        info = client.xinfo_stream(key) if client.exists(key) else None
        return info is not None and info["last-generated-id"] == f"{generation}-{last_id}".encode()

    return done


def test_stream_equals_ring_and_restart_resends_nothing(ring_name, redis_server):
    writer = RingWriter.create(ring_name, capacity=5000)
    publish(writer, 3000)
    client = redis_server.client()
    exporter = ExportProcess(ring_name, redis_server.url)
    wait_for(exported_up_to(client, ring_name, 1, 2999), what="3000 events in Redis")
    assert exporter.stop() == 0
    # a second run resumes after 1-2999: nothing twice, and the new events follow in order
    publish(writer, 1500, seed=8)
    exporter = ExportProcess(ring_name, redis_server.url)
    wait_for(exported_up_to(client, ring_name, 1, 4499), what="4500 events in Redis")
    assert exporter.stop() == 0
    entries = stream_entries(client, ring_name)
    assert [sid for sid, _ in entries] == [(1, i) for i in range(4500)]
    with RingReader.attach(ring_name) as reader:
        assert events_of(entries, 1) == ring_json(reader)      # same JSON bytes, id for id
    status = read_file(ring_name)
    assert status["exported"] == 1500 and status["duplicates"] == 0 and status["gaps"] == 0
    assert status["last_stream_id"] == "1-4499" and status["state"] == "stopped"
    assert "Traceback" not in exporter.log()
    writer.close()


def test_kill_9_mid_stream_then_restart_is_exactly_once(ring_name, redis_server):
    writer = RingWriter.create(ring_name, capacity=200_000)
    client = redis_server.client()
    exporter = ExportProcess(ring_name, redis_server.url, "--batch", "50")
    publish(writer, 20_000)
    wait_for(lambda: client.xlen(Keys.for_instance(ring_name).events) > 500, what="export under way")
    exporter.kill()
    publish(writer, 5000, seed=9)
    exporter = ExportProcess(ring_name, redis_server.url)
    wait_for(exported_up_to(client, ring_name, 1, 24_999), what="every event exported")
    exporter.stop()
    entries = stream_entries(client, ring_name)
    assert [sid for sid, _ in entries] == [(1, i) for i in range(25_000)]
    with RingReader.attach(ring_name) as reader:
        assert events_of(entries, 1) == ring_json(reader)
    writer.close()


def test_redis_down_retries_then_names_the_lost_range_in_one_gap(ring_name, durable_redis):
    writer = RingWriter.create(ring_name, capacity=1000)
    publish(writer, 800)
    client = durable_redis.client()
    exporter = ExportProcess(ring_name, durable_redis.url)
    wait_for(exported_up_to(client, ring_name, 1, 799), what="first 800 events")
    durable_redis.stop()
    def retrying():
        doc = read_file(ring_name)
        return doc and doc["state"] == "retrying" and doc["last_error"]
    wait_for(retrying, what="the exporter to report the outage")
    assert "cannot connect to Redis" in read_file(ring_name)["last_error"]
    publish(writer, 3000, seed=3)          # the 1000-event ring laps the exporter: 800..2799 lost
    lag = wait_for(lambda: (read_file(ring_name) or {}).get("lag_events", 0) >= 3000 and read_file(ring_name),
                   what="lag to show")
    assert lag["lag_ms"] > 0
    durable_redis.start()
    client = durable_redis.client()
    wait_for(exported_up_to(client, ring_name, 1, 3799), what="export to resume")
    exporter.stop()
    entries = stream_entries(client, ring_name)
    gaps = [(sid, fields) for sid, fields in entries if b"gap" in fields]
    assert len(gaps) == 1
    (gap_sid, gap_fields), = gaps
    assert gap_sid == (1, 800) and gap_fields[b"gap"] == b"800-2799"
    assert [sid[1] for sid, f in entries if b"j" in f] == list(range(800)) + list(range(2800, 3800))
    with RingReader.attach(ring_name) as reader:
        assert {k: v for k, v in events_of(entries, 1).items() if k >= 2800} == ring_json(reader)
    status = read_file(ring_name)
    assert status["gaps"] == 1 and status["events_lost"] == 2000 and status["redis_errors"] >= 1
    assert "gap record 1-800" in exporter.log() and "Traceback" not in exporter.log()
    writer.close()


def test_engine_restart_becomes_the_next_generation(ring_name, redis_server):
    first = RingWriter.create(ring_name, capacity=1000)
    publish(first, 100)
    client = redis_server.client()
    exporter = ExportProcess(ring_name, redis_server.url)
    wait_for(exported_up_to(client, ring_name, 1, 99), what="generation 1")
    publish(first, 20, seed=2)
    first.close()
    second = RingWriter.create(ring_name, capacity=1000)    # ids restart at 0: a new instance
    publish(second, 50, seed=4)
    wait_for(exported_up_to(client, ring_name, 2, 49), what="generation 2")
    exporter.stop()
    entries = stream_entries(client, ring_name)
    assert [sid for sid, _ in entries] == [(1, i) for i in range(120)] + [(2, i) for i in range(50)]
    instances = client.hgetall(Keys.for_instance(ring_name).instances)
    assert instances[b"gen:2"] == second.instance_uuid.encode()
    assert instances[b"uuid:" + first.instance_uuid.encode()] == b"1"
    second.close()


def test_maxlen_trims_approximately(ring_name, redis_server):
    writer = RingWriter.create(ring_name, capacity=20_000)
    publish(writer, 10_000)
    client = redis_server.client()
    exporter = ExportProcess(ring_name, redis_server.url, "--maxlen", "1000")
    wait_for(exported_up_to(client, ring_name, 1, 9999), what="export")
    exporter.stop()
    length = client.xlen(Keys.for_instance(ring_name).events)
    assert 1000 <= length < 1300
    writer.close()


def test_max_age_trims_by_event_time(ring_name, redis_server):
    writer = RingWriter.create(ring_name, capacity=20_000)
    old = time.time_ns() - 3600 * 10**9
    for i, args in enumerate(seed_mix(3000)):
        writer.publish(*args, timestamp_nano=old + i)
    publish(writer, 500, seed=5)
    client = redis_server.client()
    key = Keys.for_instance(ring_name).events
    exporter = ExportProcess(ring_name, redis_server.url, "--max-age", "10m")
    wait_for(exported_up_to(client, ring_name, 1, 3499), what="export")
    wait_for(lambda: client.xlen(key) < 700, what="entries older than 10 minutes trimmed")
    exporter.stop()
    first_kept = orjson.loads(client.xrange(key, count=1)[0][1][b"j"])
    assert first_kept["id"] <= 3000     # every recent event kept
    writer.close()


def test_state_snapshot_exported_on_change_with_its_generation(ring_name, redis_server):
    writer = RingWriter.create(ring_name, capacity=1000)
    snap = SnapshotWriter.create(ring_name, size=1 << 20)
    snap.publish({"partitions": [{"name": "default"}], "n": 1})
    client = redis_server.client()
    key = Keys.for_instance(ring_name).state
    exporter = ExportProcess(ring_name, redis_server.url, "--state-interval", "0.1")
    wait_for(lambda: client.hget(key, "generation") == b"2", what="first snapshot")
    assert orjson.loads(client.hget(key, "doc")) == {"partitions": [{"name": "default"}], "n": 1}
    assert client.hget(key, "instance") == writer.instance_uuid.encode()
    snap.publish({"partitions": [{"name": "default"}], "n": 2})
    wait_for(lambda: client.hget(key, "generation") == b"4", what="the changed snapshot")
    assert orjson.loads(client.hget(key, "doc"))["n"] == 2
    exporter.stop()
    snap.close()
    writer.close()


def test_status_and_prometheus_show_the_exporter(ring_name, redis_server):
    import subprocess
    import sys

    from exportharness import ROOT
    from web.app import create_app

    writer = RingWriter.create(ring_name, capacity=1000)
    publish(writer, 300)
    client = redis_server.client()
    exporter = ExportProcess(ring_name, redis_server.url)
    wait_for(exported_up_to(client, ring_name, 1, 299), what="export")
    wait_for(lambda: (read_file(ring_name) or {}).get("last_event_id") == 299
             and read_file(ring_name)["lag_events"] == 0, what="status caught up")
    out = subprocess.run([sys.executable, "-m", "tools.cli", "status", "--name", ring_name], cwd=ROOT,
                         capture_output=True, text=True, timeout=30).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("export:"))
    assert f"pid {exporter.proc.pid} running" in line and "last exported 1-299 (event 299)" in line
    assert "lag 0 events / 0.0 ms" in line and "0 gaps" in line
    assert any(ln.split()[1] == "export" for ln in out.splitlines()[2:] if len(ln.split()) > 1)
    app = create_app(name=ring_name)
    text = app.metrics_renderer.render().decode()
    assert "ykshm_export_up 1.0" in text
    assert "ykshm_export_last_event_id 299.0" in text and "ykshm_export_events_total 300.0" in text
    assert "ykshm_export_gaps_total 0.0" in text and "ykshm_export_lag_events 0.0" in text
    exporter.stop()
    assert "ykshm_export_up 0.0" in app.metrics_renderer.render().decode()
    app.segment.close()
    writer.close()


def test_state_exported_at_most_every_interval(ring_name, redis_server):
    writer = RingWriter.create(ring_name, capacity=1000)
    snap = SnapshotWriter.create(ring_name, size=1 << 20)
    client = redis_server.client()
    key = Keys.for_instance(ring_name).state
    exporter = ExportProcess(ring_name, redis_server.url, "--state-interval", "0.5")
    snap.publish({"n": 0})
    wait_for(lambda: client.hget(key, "generation"), what="first snapshot")
    seen = set()
    began = time.monotonic()
    n = 0
    while time.monotonic() - began < 2.0:          # the engine publishes every 10 ms
        n += 1
        snap.publish({"n": n})
        seen.add(client.hget(key, "exported_nano"))
        time.sleep(0.01)
    exporter.stop()
    assert 2 <= len(seen) <= 2.0 / 0.5 + 2          # ~4 exports for ~200 publishes
    assert orjson.loads(client.hget(key, "doc"))["n"] >= n - 60
    snap.close()
    writer.close()
    client.close()


def test_exporter_started_before_the_engine_waits_for_the_ring(ring_name, redis_server):
    exporter = ExportProcess(ring_name, redis_server.url)
    wait_for(lambda: (read_file(ring_name) or {}).get("state") == "waiting_for_ring", what="waiting state")
    writer = RingWriter.create(ring_name, capacity=1000)
    publish(writer, 10)
    client = redis_server.client()
    wait_for(exported_up_to(client, ring_name, 1, 9), what="export once the ring exists")
    exporter.stop()
    assert "waiting for the event ring" in exporter.log()
    writer.close()
    client.close()


def test_two_exporters_on_one_instance_still_write_each_event_once(ring_name, redis_server):
    """A second exporter by mistake (two hosts, a stale unit): Redis refuses whatever the other
    already wrote, so the stream still holds every event once, in order."""
    writer = RingWriter.create(ring_name, capacity=50_000)
    first = ExportProcess(ring_name, redis_server.url, "--batch", "100")
    second = ExportProcess(ring_name, redis_server.url, "--batch", "100")
    publish(writer, 20_000)
    client = redis_server.client()
    wait_for(exported_up_to(client, ring_name, 1, 19_999), what="every event exported")
    first.stop()
    second.stop()
    assert [sid for sid, _ in stream_entries(client, ring_name)] == [(1, i) for i in range(20_000)]
    writer.close()
    client.close()
