"""Read replicas: `ykshm web --source redis://...` serves what `ykshm export` wrote, with the same
bytes, parameters, limits and error lines as the shared-memory web beside it."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import orjson
import pytest
from webharness import ROOT, WebServer, cleanup, unique_name

from bench.redis_server import RedisServer
from export.keys import Keys
from shm import RingWriter, SnapshotWriter
from tools.harness import wait_for as harness_wait_for
from shm.bench_support import seed_mix

CONFIG = """\
service:
  event:
    RESTResponseSize: 500
    ringBufferCapacity: 5000
    maxStreams: 6
    maxStreamsPerHost: 4
"""


def wait_for(ok, timeout: float = 20.0, what: str = "condition"):
    return harness_wait_for(ok, timeout, what, interval=0.02)


class Exporter:
    def __init__(self, name: str, url: str, *extra: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tools.cli", "export", "--redis", url, "--name", name,
                                      "--nice", "0", "--state-interval", "0.1", *extra],
                                     cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A ring + exporter + Redis, a shared-memory web and a replica web of the same instance."""
    name = unique_name()
    cfg = tmp_path_factory.mktemp("replica") / "ykshm.yaml"
    cfg.write_text(CONFIG)
    server = RedisServer()
    writer = RingWriter.create(name, 5000)
    snap = SnapshotWriter.create(name, size=1 << 20)
    snap.publish({"partitions": [{"name": "default", "totalNodes": 2}], "queues": {"default": {"queuename": "root"}},
                  "applications": {"default": []}, "nodes": {"default": []},
                  "usage": {"default": {"users": [{"userName": "alice"}], "groups": []}}})
    exporter = Exporter(name, server.url)
    shm_web = WebServer(name, workers=1, config=str(cfg))
    replica = WebServer(name + "-r", workers=2, config=str(cfg),
                        extra=["--source", f"{server.url}?instance={name}"])
    state = {"name": name, "server": server, "writer": writer, "shm": shm_web, "replica": replica,
             "exporter": exporter, "cfg": str(cfg)}
    yield state
    replica.stop()
    shm_web.stop()
    state["exporter"].stop()
    state["writer"].close()
    snap.close()
    server.close()
    cleanup(name)


def publish(pair, n: int, seed: int = 1) -> int:
    """Publish n events and wait until Redis holds them; the highest id."""
    writer = pair["writer"]
    for args in seed_mix(n, seed):
        writer.publish(*args)
    last = writer.next_id - 1
    client = pair["server"].client()
    key = Keys.for_instance(pair["name"]).events
    instances = Keys.for_instance(pair["name"]).instances
    gen = wait_for(lambda: client.hget(instances, f"uuid:{writer.instance_uuid}"), what="a generation")
    wait_for(lambda: client.xinfo_stream(key)["last-generated-id"] == b"%s-%d" % (gen, last),
             what=f"event {last} in Redis")
    return last


BATCH_QUERIES = ["", "?count=10", "?start=3", "?start=100&count=50", "?count=100000", "?start=999999",
                 "?count=0", "?count=-1", "?start=x", "?count=1e3", "?start=5&count=1"]


def test_batch_same_bytes_and_errors(pair):
    publish(pair, 700)
    for query in BATCH_QUERIES:
        a = httpx.get(pair["shm"].url + "/ws/v1/events/batch" + query, timeout=10)
        b = httpx.get(pair["replica"].url + "/ws/v1/events/batch" + query, timeout=10)
        assert (b.status_code, b.content) == (a.status_code, a.content), query
        assert b.headers["content-type"] == a.headers["content-type"]


def read_stream(url: str, query: str, lines_wanted: int, timeout: float = 15) -> list[bytes]:
    out: list[bytes] = []
    with httpx.stream("GET", url + "/ws/v1/events/stream" + query, timeout=timeout) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            out.append(line.encode())
            if len(out) >= lines_wanted or line.startswith('{"status_code"'):
                break
    return out


def test_stream_history_then_live_same_lines(pair):
    last = publish(pair, 50, seed=2)
    results = {}
    import threading

    def reader(kind: str) -> None:
        results[kind] = read_stream(pair[kind].url, "?count=20", 1 + 20 + 30)

    threads = [threading.Thread(target=reader, args=(k,)) for k in ("shm", "replica")]
    for t in threads:
        t.start()
    time.sleep(1.0)
    publish(pair, 30, seed=3)               # live events, woken by XREAD BLOCK on the replica
    for t in threads:
        t.join(20)
    assert results["replica"] == results["shm"]
    assert orjson.loads(results["replica"][1])["id"] == last - 19
    assert orjson.loads(results["replica"][-1])["id"] == last + 30


def test_stream_bad_parameters_same_answers(pair):
    for query in ("?count=x", "?start=-4", "?start=99999999"):
        a = httpx.get(pair["shm"].url + "/ws/v1/events/stream" + query, timeout=10)
        b = httpx.get(pair["replica"].url + "/ws/v1/events/stream" + query, timeout=10)
        assert (b.status_code, b.content) == (a.status_code, a.content), query


def test_state_views_same_bytes(pair):
    for path in ("/ws/v1/partitions", "/ws/v1/partition/default/queues", "/ws/v1/partition/default/nodes",
                 "/ws/v1/partition/default/usage/user/alice", "/ws/v1/partition/nope/queues",
                 "/ws/v1/partition/default/usage/user/bob"):
        a = httpx.get(pair["shm"].url + path, timeout=10)
        b = httpx.get(pair["replica"].url + path, timeout=10)
        assert (b.status_code, b.content) == (a.status_code, a.content), path


def test_trimmed_start_gets_the_410_line(pair):
    """Retention dropped the oldest entries: a stream from there opens, then says which are lost."""
    client = pair["server"].client()
    key = Keys.for_instance(pair["name"]).events
    publish(pair, 10, seed=4)
    first = client.xrange(key, count=1)[0][0]
    cut = client.xrange(key, count=101)[-1][0]
    client.execute_command("XTRIM", key, "MINID", cut)
    gen, seq = (int(x) for x in cut.split(b"-"))
    lines = read_stream(pair["replica"].url, f"?start={int(first.split(b'-')[1])}", 5)
    assert orjson.loads(lines[0]).keys() == {"InstanceUUID"}
    assert orjson.loads(lines[-1]) == {
        "status_code": 410,
        "message": "Event stream closed: no longer retained (the start was below LowestID, or the client "
                   f"fell a whole ring behind): lost events {int(first.split(b'-')[1])}-{seq - 1}; "
                   f"reconnect with start={seq} or later"}
    batch = httpx.get(pair["replica"].url + f"/ws/v1/events/batch?start={seq - 1}", timeout=10).json()
    assert batch["EventRecords"] is None and batch["LowestID"] == seq


def test_engine_restart_ends_replica_streams_with_503_then_serves_the_new_instance(pair):
    import threading

    publish(pair, 5, seed=5)
    got: list[bytes] = []
    t = threading.Thread(target=lambda: got.extend(read_stream(pair["replica"].url, "?count=0", 100, timeout=30)))
    t.start()
    time.sleep(1.0)
    old_uuid = pair["writer"].instance_uuid
    pair["writer"].close()
    pair["writer"] = RingWriter.create(pair["name"], 5000)
    publish(pair, 3, seed=6)
    t.join(30)
    end = orjson.loads(got[-1])
    assert end["status_code"] == 503 and old_uuid in end["message"]
    batch = httpx.get(pair["replica"].url + "/ws/v1/events/batch", timeout=10).json()
    assert batch["InstanceUUID"] == pair["writer"].instance_uuid
    assert [r["id"] for r in batch["EventRecords"]] == [0, 1, 2]


def test_health_relayed_from_the_exporter(pair):
    """The exporter relays the engine's health into Redis at its status interval; after the
    previous test's engine restart it takes one such round to show the new engine."""
    def checks():
        doc = httpx.get(pair["replica"].url + "/ws/v1/scheduler/healthcheck", timeout=10).json()
        found = {c["Name"]: c for c in doc["HealthChecks"]}
        healthy = all(found[n]["Succeeded"] for n in ("Event ring", "Engine process", "State snapshot"))
        return found if healthy else None

    found = wait_for(checks, 10, "every relayed health check succeeded")
    assert set(found) >= {"Event ring", "Engine process", "State snapshot"}


def test_bad_source_is_one_line_exit_2(ring_name):
    from bench.redis_server import free_port

    for url, words in ((f"redis://127.0.0.1:{free_port()}", "cannot connect to Redis"),
                       ("http://127.0.0.1:1", "expected redis://")):
        r = subprocess.run([sys.executable, "-m", "tools.cli", "web", "--name", ring_name, "--bind",
                            "127.0.0.1:0", "--source", url], cwd=ROOT, capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and words in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_redis_gone_answers_503_with_the_reason(tmp_path):
    name = unique_name()
    server = RedisServer()
    writer = RingWriter.create(name, 100)
    exporter = Exporter(name, server.url)
    try:
        writer.publish(2, 2, 201, "app-1", "", "", None)
        client = server.client()
        wait_for(lambda: client.exists(Keys.for_instance(name).events), what="export")
        cfg = tmp_path / "c.yaml"
        cfg.write_text(CONFIG)
        replica = WebServer(name + "-r", workers=1, config=str(cfg), extra=["--source", f"{server.url}?instance={name}"])
        try:
            assert httpx.get(replica.url + "/ws/v1/events/batch", timeout=10).status_code == 200
            server.kill()
            r = httpx.get(replica.url + "/ws/v1/events/batch", timeout=20)
            assert r.status_code == 503
            body = r.json()
            assert body["status_code"] == 503 and "cannot connect to Redis" in body["message"]
            assert "Traceback" not in replica.log()
        finally:
            replica.stop()
    finally:
        exporter.stop()
        writer.close()
        server.close()
        cleanup(name)
