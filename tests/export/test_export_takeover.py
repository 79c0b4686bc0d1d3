"""Issue 36 item 3: the history of an active/standby pair in Redis across a takeover. Each
replica's exporter runs with `--redis-name NAME --leader-only`: the standby's idle engine writes
nothing, the leader's events are generation 1 under its InstanceUUID, and after the leader is
killed, its successor's are generation 2 under its own, in the same stream: a reader of the
stream sees every event of both, each exactly as its ring holds it, the old leader's first."""

from __future__ import annotations

import signal

import orjson
import redis

from export.keys import Keys
from export.status import read_file
from shm import RingReader
from tests.export.exportharness import ExportProcess, events_of, ring_json, stream_entries, wait_for
from tools.harness import Cluster

TIMINGS = (2.0, 1.5, 0.25)


def _ring(name: str) -> tuple[str, dict[int, bytes]]:
    reader = RingReader.attach(name)
    try:
        return reader.instance_uuid, ring_json(reader)
    finally:
        reader.close()


def test_a_takeover_continues_the_pairs_history_in_one_stream(ring_name, redis_server):
    client = redis.Redis.from_url(redis_server.url)
    with Cluster(ring_name, nodes=2) as c:
        c.start_sim()
        leader = c.start_replica(timings=TIMINGS)
        leader.wait_role("leader")
        standby = c.start_replica(timings=TIMINGS)
        standby.wait_role("standby")
        exporters = [ExportProcess(r.name, redis_server.url, "--redis-name", ring_name, "--leader-only")
                     for r in (leader, standby)]
        try:
            for i in range(3):
                c.create_pod(f"before-{i}")
            c.wait_bound([f"before-{i}" for i in range(3)], timeout=20)
            old_uuid, _ = _ring(leader.name)
            wait_for(lambda: len(events_of(stream_entries(client, ring_name), 1)) ==
                     len(_ring(leader.name)[1]), what="the leader's ring in the stream")
            assert {sid[0] for sid, _ in stream_entries(client, ring_name)} == {1}
            wait_for(lambda: (read_file(standby.name) or {}).get("state") == "waiting_for_leader",
                     what="the standby's exporter waiting")

            leader.shim.stop(signal.SIGKILL)
            leader.engine.stop(signal.SIGKILL)
            standby.wait_role("leader", timeout=20)
            for i in range(3):
                c.create_pod(f"after-{i}")
            c.wait_bound([f"after-{i}" for i in range(3)], timeout=20)
            new_uuid, _ = _ring(standby.name)

            def both_there() -> bool:
                entries = stream_entries(client, ring_name)
                return events_of(entries, 2) == _ring(standby.name)[1] and entries
            entries = wait_for(both_there, what="the successor's ring in the stream")
            assert events_of(entries, 1) == _ring(leader.name)[1]       # nothing of it lost
            generations = [sid[0] for sid, _ in entries]
            assert generations == sorted(generations) and set(generations) == {1, 2}
            instances = client.hgetall(Keys.for_instance(ring_name).instances)
            assert instances[b"gen:1"].decode() == old_uuid and instances[b"gen:2"].decode() == new_uuid
            pods = {orjson.loads(j).get("objectID") for j in events_of(entries, 2).values()}
            assert pods  # the successor's events are there under generation 2
        finally:
            for e in exporters:
                e.stop()
