"""`ykshm ring ...` as a user runs it: subprocesses, exit codes, one-line errors, real segments."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import orjson
import pytest

from ykcli import ROOT, env, ndjson, one_line_error, spawn, stop, wait_for, ykshm


APP_EVENT = {
    "type": 2,
    "objectID": "app-1",
    "message": "hello",
    "timestampNano": 1649167576110750000,
    "eventChangeType": 2,
    "eventChangeDetail": 201,
    "referenceID": "alloc-1",
    "resource": {"resources": {"memory": {"value": 1024}, "vcore": {"value": 1000}}},
}


def event(i: int) -> dict:
    return {"type": 2, "objectID": f"app-{i}", "timestampNano": 1_000_000 + i,
            "eventChangeType": 1, "eventChangeDetail": 206}


def create(name: str, capacity: int = 100) -> None:
    r = ykshm("ring", "create", "--name", name, "--capacity", str(capacity))
    assert r.returncode == 0, r.stderr
    assert f"created ring {name}" in r.stdout.decode()


def publish(name: str, events: list[dict]) -> subprocess.CompletedProcess:
    return ykshm("ring", "publish", "--name", name, input=ndjson(*events))


def dump_json(name: str, *args: str) -> list[dict]:
    r = ykshm("ring", "dump", "--name", name, "--json", *args)
    assert r.returncode == 0, r.stderr
    return [orjson.loads(line) for line in r.stdout.splitlines()]


def test_create_publish_dump(ring_name):
    create(ring_name)
    r = publish(ring_name, [APP_EVENT, event(1), event(2)])
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().strip() == "published 3 events: first id 0, last id 2"
    got = dump_json(ring_name)
    assert got[0] == {"id": 0, **APP_EVENT}
    assert list(got[0]) == ["id", *APP_EVENT]  # REST key order
    assert [e["id"] for e in got] == [0, 1, 2]
    assert got[2] == {"id": 2, **event(2)}
    # ranges
    assert [e["id"] for e in dump_json(ring_name, "--start", "1", "--count", "1")] == [1]
    assert [e["id"] for e in dump_json(ring_name, "--start", "1")] == [1, 2]
    # human form: one line per event, names of the enums
    r = ykshm("ring", "dump", "--name", ring_name)
    lines = r.stdout.decode().splitlines()
    assert len(lines) == 3
    assert lines[0].split()[:8] == ["0", "2022-04-05T14:06:16.110750000Z", "APP", "ADD",
                                    "APP_REQUEST", "app-1", "alloc-1", "memory=1024,vcore=1000"]
    assert lines[0].endswith("'hello'")
    # publish --json, continuing the ids
    r = ykshm("ring", "publish", "--name", ring_name, "--json", input=ndjson(event(3)) + b"\n")
    assert orjson.loads(r.stdout) == {"published": 1, "firstID": 3, "lastID": 3}


def test_dump_past_the_end_and_empty(ring_name):
    create(ring_name)
    r = ykshm("ring", "dump", "--name", ring_name)
    assert r.returncode == 0 and r.stdout == b""
    publish(ring_name, [event(0)])
    r = ykshm("ring", "dump", "--name", ring_name, "--start", "5")
    assert r.returncode == 0 and r.stdout == b""
    assert "highest is 0" in r.stderr.decode()


def test_create_refuses_existing_without_force(ring_name):
    create(ring_name)
    r = ykshm("ring", "create", "--name", ring_name, "--capacity", "10")
    assert r.returncode == 1
    assert "already exists" in one_line_error(r)
    r = ykshm("ring", "create", "--name", ring_name, "--capacity", "10", "--force", "--json")
    assert r.returncode == 0, r.stderr
    assert orjson.loads(r.stdout)["capacity"] == 10


@pytest.mark.parametrize("sub", [
    ["dump"], ["dump", "--json"], ["tail"], ["tail", "-f"], ["stat"], ["stat", "--json"],
    ["verify"], ["publish"], ["rm"],
])
def test_unknown_ring_is_one_line_exit_1(ring_name, sub):
    r = ykshm("ring", sub[0], "--name", ring_name, *sub[1:], input=b"", timeout=20)
    assert r.returncode == 1
    assert ring_name in one_line_error(r)


@pytest.mark.parametrize("args", [
    ["create", "--capacity", "abc"],
    ["create", "--capacity", "0"],
    ["create", "--capacity", "-5"],
    ["create", "--capacity", "10", "--request-capacity", "1.5"],
    ["create"],
    ["dump", "--start", "-1"],
    ["dump", "--start", "x"],
    ["dump", "--count", "0"],
    ["tail", "-n", "ten"],
    ["stat", "--interval", "nan?"],
    ["frobnicate"],
])
def test_bad_numbers_and_usage_exit_2(ring_name, args):
    r = ykshm("ring", args[0], "--name", ring_name, *args[1:])
    assert r.returncode == 2
    one_line_error(r)


def test_bad_name_exit_2():
    r = ykshm("ring", "stat", "--name", "a/b")
    assert r.returncode == 2
    assert "invalid ring name" in one_line_error(r)


BAD_LINES = [
    (b"{not json", "not valid JSON"),
    (b"[1,2]", "expected a JSON object"),
    (b'{"type": 9}', "type 9 is not a known EventRecordType"),
    (b'{"type": "2"}', "type must be an integer"),
    (b'{"eventChangeType": 7}', "eventChangeType 7 is not a known EventChangeType"),
    (b'{"eventChangeDetail": 999}', "eventChangeDetail 999 is not a known EventChangeDetail"),
    (b'{"objectID": 5}', "objectID must be a string"),
    (b'{"timestampNano": -1}', "timestampNano -1 is out of range"),
    (b'{"resource": {"resources": {"memory": 5}}}', "resource.resources.memory must be"),
    (b'{"resource": {"resources": {"memory": {"value": "1Gi"}}}}', "memory.value must be an integer"),
    (b'{"colour": "red"}', "unknown key 'colour'"),
]


@pytest.mark.parametrize("bad,problem", BAD_LINES)
def test_publish_bad_line_keeps_what_came_before(ring_name, bad, problem):
    create(ring_name)
    body = ndjson(*[event(i) for i in range(6)]) + bad + b"\n" + ndjson(event(99))
    r = ykshm("ring", "publish", "--name", ring_name, input=body)
    assert r.returncode == 2
    line = one_line_error(r)
    assert "line 7: " in line
    assert problem in line
    assert line.endswith("; 6 events before it were published (ids 0-5)")
    got = dump_json(ring_name)
    assert [e["objectID"] for e in got] == [f"app-{i}" for i in range(6)]


def test_publish_bad_first_line(ring_name):
    create(ring_name)
    r = ykshm("ring", "publish", "--name", ring_name, input=b"\n{}\n{\"type\": -1}\n")
    assert r.returncode == 2
    line = one_line_error(r)
    assert "line 3: " in line and line.endswith("1 event before it was published (id 0)")


def test_publish_id_is_ignored_so_dump_pipes_into_publish(ring_name):
    create(ring_name)
    publish(ring_name, [APP_EVENT, event(1)])
    other = ring_name + "-copy"
    try:
        create(other)
        publish(other, [event(7)])
        dumped = ykshm("ring", "dump", "--name", ring_name, "--json").stdout
        r = ykshm("ring", "publish", "--name", other, input=dumped)
        assert r.returncode == 0, r.stderr
        got = dump_json(other)
        assert got[1] == {"id": 1, **APP_EVENT}
    finally:
        ykshm("ring", "rm", "--name", other)


def test_long_message_is_cut(ring_name):
    create(ring_name)
    publish(ring_name, [{"type": 3, "message": "é" * 1000}])
    msg = dump_json(ring_name)[0]["message"]
    assert len(msg.encode()) <= 1024 and msg.endswith("...")
    assert msg == "é" * 510 + "..."


def test_stat_json_and_human(ring_name):
    create(ring_name, capacity=1000)
    publish(ring_name, [APP_EVENT] + [event(i) for i in range(9)])
    r = ykshm("ring", "stat", "--name", ring_name, "--json", "--interval", "0.1")
    assert r.returncode == 0, r.stderr
    doc = orjson.loads(r.stdout)
    assert doc["name"] == ring_name
    assert len(doc["instanceUUID"]) == 36
    assert doc["capacity"] == 1000
    assert (doc["lowestID"], doc["highestID"], doc["events"]) == (0, 9, 10)
    assert doc["fill"] == pytest.approx(0.01)
    assert doc["eventsPerSecond"] == 0
    assert doc["internStrings"] == 12  # app-0..app-8 (app-1 shared), hello, alloc-1, one resource
    assert doc["shmBytes"] > 0 and doc["bytesPerEvent"] == pytest.approx(doc["shmBytes"] / 1000)
    assert doc["bytesPerRetainedEvent"] == pytest.approx(doc["shmBytes"] / 10)
    assert doc["counters"]["events_written"] == 10
    assert doc["writerAlive"] is False
    assert doc["writerPID"] == 0  # a closed writer clears its pid
    assert doc["mappers"] == []
    assert any(s.endswith(f"{ring_name}.events") for s in doc["segments"])
    r = ykshm("ring", "stat", "--name", ring_name, "--interval", "0")
    out = r.stdout.decode()
    assert r.returncode == 0
    for label in ("instance:", "capacity:", "ids:", "events:", "intern strings:", "shm in use:",
                  "writer:", "mapped by:"):
        assert label in out
    assert "0 - 9" in out and "not running" in out


WRITER = """
import sys, time
from shm import RingWriter
w = RingWriter.create(sys.argv[1], 1000, 10)
print("ready", flush=True)
i = 0
while True:
    w.publish(2, 2, 200, object_id=f"obj-{i}")
    w.heartbeat()
    i += 1
    time.sleep(0.001)
"""


@pytest.fixture
def live_writer(ring_name):
    proc = subprocess.Popen([sys.executable, "-c", WRITER, ring_name], stdout=subprocess.PIPE,
                            cwd=ROOT, env=env())
    try:
        assert proc.stdout.readline().strip() == b"ready"
        yield proc
    finally:
        stop(proc)


def test_stat_of_a_live_writer(ring_name, live_writer):
    r = ykshm("ring", "stat", "--name", ring_name, "--json")
    doc = orjson.loads(r.stdout)
    assert doc["writerPID"] == live_writer.pid and doc["writerAlive"] is True
    assert doc["eventsPerSecond"] > 10
    assert doc["heartbeatAgeSeconds"] < 5
    assert live_writer.pid in [m["pid"] for m in doc["mappers"]]


def test_rm_refuses_a_live_writer(ring_name, live_writer):
    r = ykshm("ring", "rm", "--name", ring_name)
    assert r.returncode == 1
    assert f"live writer (pid {live_writer.pid})" in one_line_error(r)
    assert os.path.exists(f"/dev/shm/{ring_name}.events")
    r = ykshm("ring", "publish", "--name", ring_name, input=ndjson(event(1)))
    assert r.returncode == 1
    assert "live writer" in one_line_error(r)
    r = ykshm("ring", "rm", "--name", ring_name, "--force")
    assert r.returncode == 0, r.stderr
    assert not os.path.exists(f"/dev/shm/{ring_name}.events")


def test_rm(ring_name):
    create(ring_name)
    other = ring_name + ".x.events"  # another instance named NAME.x: not ours to remove
    open(f"/dev/shm/{other}", "wb").close()
    try:
        r = ykshm("ring", "rm", "--name", ring_name)
        assert r.returncode == 0, r.stderr
        assert f"/dev/shm/{ring_name}.events" in r.stdout.decode()
        assert not [p for p in os.listdir("/dev/shm") if p.startswith(ring_name + ".")
                    and p != other]
        assert os.path.exists(f"/dev/shm/{other}")
    finally:
        os.unlink(f"/dev/shm/{other}")
    r = ykshm("ring", "rm", "--name", ring_name)
    assert r.returncode == 1
    one_line_error(r)


def test_verify_ok(ring_name):
    create(ring_name, capacity=8)
    publish(ring_name, [APP_EVENT] + [event(i % 3) for i in range(20)])  # laps the ring
    r = ykshm("ring", "verify", "--name", ring_name)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode().strip()
    assert out.startswith("ok: 8 records, ") and out.endswith(" strings")


def test_verify_ok_right_after_the_first_wrap(ring_name):
    """A healthy ring holding exactly capacity + 1 events (an engine gone quiet just after its
    first wrap) is not reported corrupt."""
    create(ring_name, capacity=8)
    assert publish(ring_name, [event(i) for i in range(9)]).returncode == 0
    r = ykshm("ring", "verify", "--name", ring_name)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().startswith("ok: 8 records, ")


def _corrupt(name: str, field: str, value: int) -> None:
    """Write a header field of NAME.events directly in /dev/shm."""
    from shm._ringext import ffi

    offset = ffi.offsetof("ykr_header", field)
    with open(f"/dev/shm/{name}.events", "r+b") as f:
        f.seek(offset)
        f.write(value.to_bytes(8, "little"))


def test_verify_reports_a_violation(ring_name):
    create(ring_name, capacity=8)
    publish(ring_name, [event(i) for i in range(5)])
    _corrupt(ring_name, "events_written", 12345)
    _corrupt(ring_name, "entries_live", 999)
    r = ykshm("ring", "verify", "--name", ring_name)
    assert r.returncode == 1
    line = one_line_error(r)
    assert "events_written 12345" in line and "1 more" in line
    r = ykshm("ring", "verify", "--name", ring_name, "--all")
    assert r.returncode == 1
    assert "events_written 12345" in r.stdout.decode()
    assert "entries_live 999" in r.stdout.decode()
    assert "2 violations" in one_line_error(r)


def _reader_thread(stream, sink: list) -> threading.Thread:
    def run():
        for line in iter(stream.readline, b""):
            sink.append(line)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_tail_without_follow(ring_name):
    create(ring_name)
    publish(ring_name, [event(i) for i in range(30)])
    r = ykshm("ring", "tail", "--name", ring_name, "-n", "3", "--json")
    assert [orjson.loads(x)["id"] for x in r.stdout.splitlines()] == [27, 28, 29]
    r = ykshm("ring", "tail", "--name", ring_name)
    assert len(r.stdout.splitlines()) == 10


def test_tail_follow_lost_range_and_new_instance(ring_name):
    create(ring_name, capacity=50)
    publish(ring_name, [event(i) for i in range(5)])
    proc = spawn("ring", "tail", "--name", ring_name, "-f", "--json", "-n", "2",
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out: list[bytes] = []
    err: list[bytes] = []
    threads = [_reader_thread(proc.stdout, out), _reader_thread(proc.stderr, err)]
    try:
        wait_for(lambda: len(out) >= 2)
        assert [orjson.loads(x)["id"] for x in out] == [3, 4]
        publish(ring_name, [event(i) for i in range(5, 8)])
        wait_for(lambda: len(out) >= 5)
        assert [orjson.loads(x)["id"] for x in out] == [3, 4, 5, 6, 7]
        # lap the follower: freeze it, publish more than a ring, let it go
        os.kill(proc.pid, signal.SIGSTOP)
        publish(ring_name, [event(i) for i in range(100)])
        os.kill(proc.pid, signal.SIGCONT)
        wait_for(lambda: any(b"lost" in e for e in err))
        lost = next(e for e in err if b"lost" in e).decode()
        assert "ids 8-57" in lost and "overwritten" in lost
        wait_for(lambda: orjson.loads(out[-1])["id"] == 107)
        ids = [orjson.loads(x)["id"] for x in out[5:]]
        assert ids == list(range(58, 108))
        # an engine restart: a new instance replaces the ring
        r = ykshm("ring", "create", "--name", ring_name, "--capacity", "20", "--force")
        assert r.returncode == 0, r.stderr
        wait_for(lambda: any(b"re-attached" in e for e in err))
        publish(ring_name, [event(1000)])
        wait_for(lambda: orjson.loads(out[-1])["objectID"] == "app-1000")
        assert orjson.loads(out[-1])["id"] == 0
        assert proc.poll() is None
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(10) == 0
    finally:
        stop(proc)
        for t in threads:
            t.join(5)
    assert b"Traceback" not in b"".join(err)


def test_tail_follow_human_and_sigint(ring_name):
    create(ring_name)
    proc = spawn("ring", "tail", "--name", ring_name, "-f", stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE)
    out: list[bytes] = []
    t = _reader_thread(proc.stdout, out)
    try:
        time.sleep(0.3)
        publish(ring_name, [APP_EVENT])
        wait_for(lambda: out)
        assert out[0].split()[0] == b"0" and b"APP_REQUEST" in out[0]
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(10) == 0
        assert b"Traceback" not in proc.stderr.read()
    finally:
        stop(proc)
        t.join(5)


def test_ring_help():
    r = ykshm("ring", "--help")
    assert r.returncode == 0
    for sub in ("create", "rm", "publish", "dump", "tail", "stat", "verify"):
        assert sub in r.stdout.decode()


def test_tail_follow_stops_when_its_reader_goes(ring_name):
    """`ykshm ring tail -f | head -1`: tail exits once head has gone, even with no new events."""
    create(ring_name)
    publish(ring_name, [event(0)])
    proc = spawn("ring", "tail", "--name", ring_name, "-f", stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline().split()[0] == b"0"
        proc.stdout.close()
        assert proc.wait(10) == 0
        assert b"Traceback" not in proc.stderr.read()
    finally:
        stop(proc)


def test_not_a_ring_is_one_line_exit_1(ring_name):
    # our own file, mode 0600 (a wider mode is refused before the format is looked at)
    fd = os.open(f"/dev/shm/{ring_name}.events", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(fd, "wb") as f:
        f.write(os.urandom(5000))
    for sub in (["stat"], ["dump"], ["verify"], ["tail"]):
        r = ykshm("ring", *sub, "--name", ring_name)
        assert r.returncode == 1
        assert "not usable" in one_line_error(r)
    r = ykshm("ring", "rm", "--name", ring_name)  # a broken segment can always be removed
    assert r.returncode == 0
    assert not os.path.exists(f"/dev/shm/{ring_name}.events")
