"""Exactly once when Redis forgets: the instances hash lost while the stream survives, everything
lost, and `--wait-replicas` with a real replica (issue 26.8). Real redis-servers throughout."""

from __future__ import annotations

import os
import signal

import pytest
from exportharness import ExportProcess, events_of, ring_json, stream_entries, wait_for
from test_export import exported_up_to, publish

from bench.redis_server import RedisServer
from export.keys import Keys
from export.status import read_file, status_path
from shm import RingReader, RingWriter


@pytest.fixture
def start_export():
    """ExportProcess, each stopped by pid at the end even if the test failed."""
    started: list[ExportProcess] = []

    def start(*args, **kwargs) -> ExportProcess:
        started.append(ExportProcess(*args, **kwargs))
        return started[-1]

    yield start
    for exporter in started:
        if exporter.proc.poll() is None:
            exporter.kill()


@pytest.mark.parametrize("status_file", ["kept", "deleted"])
def test_lost_instances_hash_does_not_re_export_the_ring(start_export, ring_name, redis_server, status_file):
    writer = RingWriter.create(ring_name, capacity=5000)
    publish(writer, 1000)
    client = redis_server.client()
    keys = Keys.for_instance(ring_name)
    exporter = start_export(ring_name, redis_server.url)
    wait_for(exported_up_to(client, ring_name, 1, 999), what="1000 events")
    assert exporter.stop() == 0
    client.delete(keys.instances)               # lost: a careless DEL, a partial restore
    if status_file == "deleted":                # the exporter's own memory of it gone too
        os.unlink(status_path(ring_name))
    publish(writer, 500, seed=8)
    exporter = start_export(ring_name, redis_server.url)
    wait_for(exported_up_to(client, ring_name, 1, 1499), what="the new events, same generation")
    assert exporter.stop() == 0
    entries = stream_entries(client, ring_name)
    assert [sid for sid, _ in entries] == [(1, i) for i in range(1500)]   # nothing twice
    assert client.hget(keys.instances, f"uuid:{writer.instance_uuid}") == b"1"   # rebuilt
    assert read_file(ring_name)["duplicates"] == 0
    writer.close()


def test_lost_hash_and_another_instance_in_the_stream_is_a_new_generation(start_export, ring_name, redis_server):
    """The stream's last generation is not this ring's (its events differ): a new generation,
    after the stream's, never a reuse that would mix two instances under one generation."""
    first = RingWriter.create(ring_name, capacity=1000)
    publish(first, 100)
    client = redis_server.client()
    exporter = start_export(ring_name, redis_server.url)
    wait_for(exported_up_to(client, ring_name, 1, 99), what="generation 1")
    assert exporter.stop() == 0
    first.close()
    client.delete(Keys.for_instance(ring_name).instances)
    os.unlink(status_path(ring_name))
    second = RingWriter.create(ring_name, capacity=1000)
    publish(second, 150, seed=5)
    exporter = start_export(ring_name, redis_server.url)
    wait_for(exported_up_to(client, ring_name, 2, 149), what="generation 2")
    assert exporter.stop() == 0
    second.close()


def test_redis_that_lost_everything_keeps_the_generation_and_consumers_going(start_export, ring_name):
    """Generations 1 and 2 exported; Redis restarts empty (no persistence). The exporter keeps
    generation 2 for the same engine instance: a consumer reading after `2-E` gets the new events
    (with generation 1 again, its cursor would stall until ids passed it). The ring no longer holds
    the oldest events: one gap record names them."""
    server = RedisServer()
    try:
        first = RingWriter.create(ring_name, capacity=1000)
        publish(first, 10)
        client = server.client()
        exporter = start_export(ring_name, server.url)
        wait_for(exported_up_to(client, ring_name, 1, 9), what="generation 1")
        first.close()
        second = RingWriter.create(ring_name, capacity=100)
        publish(second, 300, seed=3)
        wait_for(exported_up_to(client, ring_name, 2, 299), what="generation 2")
        consumer_cursor = "2-299"
        server.kill()
        server.start()                           # empty: no AOF, no RDB
        client = server.client()
        wait_for(exported_up_to(client, ring_name, 2, 299), what="re-export as generation 2")
        publish(second, 5, seed=4)
        wait_for(exported_up_to(client, ring_name, 2, 304), what="new events")
        key = Keys.for_instance(ring_name).events
        got = client.xread({key: consumer_cursor}, count=100)
        assert [sid for sid, _ in got[0][1]] == [b"2-%d" % i for i in range(300, 305)]
        assert exporter.stop() == 0
        entries = stream_entries(client, ring_name)
        gaps = [(sid, f[b"gap"]) for sid, f in entries if b"gap" in f]
        assert gaps == [((2, 0), b"0-199")]
        exported = events_of(entries, 2)
        assert sorted(exported) == list(range(200, 305))
        with RingReader.attach(ring_name) as reader:
            ring = ring_json(reader)             # 205..304 by now (capacity 100)
        assert {i: exported[i] for i in ring} == ring
        assert {sid[0] for sid, _ in entries} == {2}
        second.close()
    finally:
        server.close()


def test_wait_replicas_counts_a_batch_only_once_a_replica_has_it(start_export, ring_name):
    master = RedisServer()
    replica = RedisServer(extra=("--replicaof", "127.0.0.1", str(master.port)))
    try:
        rclient = replica.client()
        wait_for(lambda: rclient.info("replication")["master_link_status"] == "up",
                 what="the replica in sync")
        writer = RingWriter.create(ring_name, capacity=5000)
        publish(writer, 500)
        exporter = start_export(ring_name, master.url, "--wait-replicas", "1",
                                 "--wait-timeout", "200")
        wait_for(lambda: (read_file(ring_name) or {}).get("last_event_id") == 499,
                 what="500 events counted")
        # counted means on the replica
        assert rclient.xlen(Keys.for_instance(ring_name).events) == 500
        os.kill(replica.proc.pid, signal.SIGSTOP)
        try:
            publish(writer, 100, seed=2)
            doc = wait_for(lambda: (d := read_file(ring_name)) and d["state"] == "retrying" and d,
                           what="the exporter to wait for the replica")
            assert "0 of 1 replicas acknowledged" in doc["last_error"]
            assert doc["last_event_id"] == 499       # not counted while no replica has them
        finally:
            os.kill(replica.proc.pid, signal.SIGCONT)
        wait_for(lambda: (read_file(ring_name) or {}).get("last_event_id") == 599,
                 what="counted once the replica is back")
        assert exporter.stop() == 0
        assert [sid for sid, _ in stream_entries(rclient, ring_name)] == [(1, i) for i in range(600)]
        writer.close()
    finally:
        replica.close()
        master.close()
