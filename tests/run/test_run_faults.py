"""Faults end to end under one `ykshm run` (sim-cluster + engine + shim + web, 4 nodes).

The instance is shared by the tests of this module (module-scoped fixture), which run in file
order and each leave it healthy: a web worker killed during two open streams, the engine stalled
(SIGSTOP/SIGCONT), the shim killed, the engine killed while pods run, and finally SIGTERM of the
supervisor, after which nothing of the instance may remain.
"""

from __future__ import annotations

import os
import re
import signal
import time
import uuid
from typing import Any

import httpx
import orjson
import pytest

from runharness import RunInstance, alive, proc_state
from tools.harness import wait_for

USERS = {u: orjson.dumps({"user": u, "groups": [f"g-{u}"]}).decode() for u in ("alice", "bob")}


@pytest.fixture(scope="module")
def inst():
    name = f"t-{uuid.uuid4().hex[:10]}"
    run = RunInstance(name, nodes=4)
    try:
        run.read_banner()
        run.wait_shim_running()
        yield run
    finally:
        run.close()


def normalise(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: normalise(v) for k, v in sorted(obj.items())}
    if isinstance(obj, list):
        return sorted((normalise(v) for v in obj), key=lambda v: orjson.dumps(v, option=orjson.OPT_SORT_KEYS))
    return obj


def user_usage(inst: RunInstance) -> Any:
    return normalise(inst.get_json("/ws/v1/partition/default/usage/users"))


def queue_usage(inst: RunInstance) -> dict[str, Any]:
    """queue path -> (allocated resources, running applications) from the REST queue tree."""
    out: dict[str, Any] = {}

    def walk(q: dict[str, Any]) -> None:
        out[q["queuename"]] = (q.get("allocatedResource") or {}, q.get("runningApps") or
                               q.get("runningApplications") or 0)
        for child in q.get("children") or []:
            walk(child)

    walk(inst.get_json("/ws/v1/partition/default/queues"))
    return out


def queue_tree(inst: RunInstance) -> Any:
    return normalise(inst.get_json("/ws/v1/partition/default/queues"))


def snapshot_engine_pid(inst: RunInstance) -> int:
    from shm import SnapshotReader

    reader = SnapshotReader.attach(inst.name)
    try:
        return (reader.read() or {}).get("engine", {}).get("pid", 0)
    finally:
        reader.close()


def web_snapshot_age(inst: RunInstance) -> float:
    """Seconds since the snapshot a web worker serves was published (from its healthcheck)."""
    doc = inst.get_json("/ws/v1/scheduler/healthcheck")
    check = next(c for c in doc["HealthChecks"] if c["Name"] == "State snapshot")
    return float(re.fullmatch(r"published (\S+)s ago", check["DiagnosisMessage"]).group(1))


def pods_in_usage(inst: RunInstance) -> int:
    users = inst.get_json("/ws/v1/partition/default/usage/users") or []
    return sum(u["queues"].get("resourceUsage", {}).get("pods", 0) for u in users)


def settled_bindings(inst: RunInstance, since: float) -> dict[str, int]:
    """The shim's binding counters from a status written after `since` with nothing in flight.

    A binding is in flight from before the API server commits it until the shim counts it, so
    a status written after every pod was seen bound, with inFlight 0, counts them all.
    """
    def ok():
        doc = inst.shim_status()
        return doc["updated"] > since and doc["bindings"]["inFlight"] == 0 and doc["bindings"]

    return wait_for(ok, 10, "the shim's bindings settled", interval=0.05)


def create_pods(inst: RunInstance, prefix: str, n: int,
                queues: tuple[str | None, ...] = ("root.prod", None)) -> list[str]:
    """n pods in len(queues) applications (one per queue), of users alice and bob."""
    names = []
    for i in range(n):
        app = i % len(queues)
        user = ("alice", "bob")[app % 2]
        queue = queues[app]
        inst.create_pod(f"{prefix}{i}", app=f"{prefix}app-{app}", queue=queue,
                        annotations={"yunikorn.apache.org/user.info": USERS[user]})
        names.append(f"{prefix}{i}")
    return names


class Stream:
    """One open /ws/v1/events/stream (httpx, sync); `owner` is the worker pid serving it."""

    def __init__(self, url: str, local: str = "127.0.0.1") -> None:
        self.client = httpx.Client(timeout=httpx.Timeout(10.0),
                                   transport=httpx.HTTPTransport(local_address=local))
        self.resp = self.client.send(self.client.build_request("GET", url + "/ws/v1/events/stream"),
                                     stream=True)
        assert self.resp.status_code == 200, self.resp.status_code
        self.lines = self.resp.iter_lines()
        self.head = orjson.loads(self.next_line())
        self.owner = 0

    def next_line(self) -> str:
        for line in self.lines:
            if line.strip():
                return line
        raise EOFError("stream ended")

    def next_event(self) -> dict[str, Any]:
        doc = orjson.loads(self.next_line())
        assert "id" in doc or "type" in doc, doc
        return doc

    def close(self) -> None:
        self.resp.close()
        self.client.close()


def stream_slots(name: str) -> dict[int, int]:
    """worker pid -> open stream slots, from /dev/shm/NAME.web (as tests/web does)."""
    from web.segment import WebSegment

    with WebSegment.open_or_create(name, 1) as seg:
        return seg.stream_owners()


def test_status_line_counts_events_pods_and_open_streams(inst):
    """The live line `ykshm run` shows on a terminal reads the same ring, snapshot and metrics."""
    from tools.run_cmd import StatusLine

    line = StatusLine(inst.name, inst.port)
    try:
        def streams_shown() -> int:
            return int(line.render().rsplit("open streams", 1)[1])

        before = streams_shown()
        opened = [Stream(inst.url), Stream(inst.url)]
        try:
            assert wait_for(lambda: streams_shown() == before + 2, 5, "two more streams shown")
        finally:
            for s in opened:
                s.close()
        create_pods(inst, "sl", 2)
        def pods_running() -> int:
            return int(line.render().split("pods running", 1)[1].split("|")[0])
        assert wait_for(lambda: pods_running() >= 2, 15, "running pods shown")
    finally:
        line.close()


def test_kill_9_web_worker_during_two_streams(inst):
    workers = wait_for(lambda: len(w := inst.workers()) == 2 and w, 10, "2 web workers")
    streams: list[Stream] = []
    by_owner: dict[int, Stream] = {}
    try:
        # one stream on each worker. Which worker accepts a connection on the shared socket is
        # up to the kernel and often lopsided, so: open one, stop the worker that took it (it
        # cannot accept while stopped), open the second (the other worker must take it), resume.
        def open_stream() -> Stream:
            before = stream_slots(inst.name)
            s = Stream(inst.url)
            streams.append(s)
            after = wait_for(lambda: (a := stream_slots(inst.name)) != before and a, 5, "slot taken")
            s.owner = next(pid for pid, n in after.items() if n > before.get(pid, 0))
            by_owner.setdefault(s.owner, s)
            return s

        first = open_stream()
        os.kill(first.owner, signal.SIGSTOP)
        try:
            open_stream()
        finally:
            os.kill(first.owner, signal.SIGCONT)
        assert set(by_owner) == set(workers), (by_owner, workers)
        victim, survivor = workers
        doomed, kept = by_owner[victim], by_owner[survivor]
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: not alive(victim), 5, "the worker dead")
        names = create_pods(inst, "w", 2)
        # the stream on the other worker goes on receiving new events
        assert any(kept.next_event().get("objectID", "").startswith("wapp-") for _ in range(40))
        # the killed worker's stream ends
        with pytest.raises((httpx.HTTPError, EOFError)):
            for _ in range(1000):
                doomed.next_line()
        # the supervisor replaced the worker; new connections are served
        new = wait_for(lambda: len(w := inst.workers()) == 2 and victim not in w and w, 15,
                       "a new web worker")
        assert survivor in new
        for _ in range(6):
            r = httpx.get(f"{inst.url}/ws/v1/events/batch?count=5", timeout=5)
            assert r.status_code == 200 and r.json()["EventRecords"]
        fresh = Stream(inst.url)
        streams.append(fresh)
        inst.create_pod("w-after", app="wafter-app",
                        annotations={"yunikorn.apache.org/user.info": USERS["bob"]})
        assert any(fresh.next_event().get("objectID") == "wafter-app" for _ in range(40))
        inst.wait_bound([*names, "w-after"])
    finally:
        for s in streams:
            s.close()


def test_stalled_engine_keeps_history_and_is_reported_not_live(inst):
    engine = inst.roles()["engine"]
    before = inst.get_json("/ws/v1/events/batch?count=100")
    assert before["EventRecords"]

    def heartbeat_ok() -> bool:
        doc = inst.get_json("/ws/v1/scheduler/healthcheck")
        check = next(c for c in doc["HealthChecks"] if c["Name"] == "Engine heartbeat")
        return check["Succeeded"] and doc["Healthy"]

    assert heartbeat_ok()
    os.kill(engine, signal.SIGSTOP)
    try:
        wait_for(lambda: proc_state(engine) == "T", 5, "engine stopped")
        wait_for(lambda: not heartbeat_ok(), 10, "healthcheck: engine not live")
        doc = inst.get_json("/ws/v1/scheduler/healthcheck")
        assert doc["Healthy"] is False
        assert next(c for c in doc["HealthChecks"] if c["Name"] == "Engine process")["Succeeded"]
        # readers keep serving the history the engine left
        during = inst.get_json(f"/ws/v1/events/batch?start={before['LowestID']}&count=100")
        assert during["InstanceUUID"] == before["InstanceUUID"]
        assert during["EventRecords"][:len(before["EventRecords"])] == before["EventRecords"]
        assert inst.get_json("/ws/v1/partition/default/queues")["queuename"] == "root"
    finally:
        os.kill(engine, signal.SIGCONT)
    wait_for(heartbeat_ok, 10, "healthcheck: engine live again")
    assert inst.roles()["engine"] == engine         # stalled is not dead: no restart
    inst.wait_shim_running(timeout=30)
    inst.create_pod("after-stall", app="stall-app")
    inst.wait_bound(["after-stall"])


def test_kill_9_shim_is_restarted_and_relists_without_double_binding(inst):
    names = create_pods(inst, "s", 6)
    before = inst.wait_bound(names)
    shim = inst.roles()["shim"]
    old = inst.shim_status()
    assert old["pid"] == shim and old["bindings"]["conflicts"] == 0
    placed = inst.placement()
    os.kill(shim, signal.SIGKILL)
    new_pid = inst.wait_role_pid("shim", shim)
    status = inst.wait_shim_running(pid=new_pid)
    assert status["cluster"]["pods"] >= len(placed)        # relisted every pod
    assert inst.placement() == placed                      # nothing moved
    assert {k: v for k, v in inst.placement().items() if k in before} == before
    wait_for(lambda: inst.shim_status()["engine"]["allocations"] == len(placed), 15,
             "every bound pod replayed to the engine as an allocation")
    fresh = create_pods(inst, "s2-", 3)
    inst.wait_bound(fresh)
    b = settled_bindings(inst, time.time())
    assert b == {"done": 3, "inFlight": 0, "conflicts": 0, "errors": 0}   # only the new pods
    assert {k: v for k, v in inst.placement().items() if k in placed} == placed


def test_kill_9_engine_while_pods_run(inst):
    names = create_pods(inst, "e", 18, ("root.dev", "root.prod", None))
    inst.wait_bound(names, phase="Running")
    total = len(inst.placement())
    wait_for(lambda: pods_in_usage(inst) == total, 15, f"usage of {total} pods")
    users_before = user_usage(inst)
    queues_before = queue_usage(inst)
    tree_before = queue_tree(inst)
    assert queues_before["root"][0].get("pods") == total
    assert {"alice", "bob"} <= {u["userName"] for u in users_before}
    assert queues_before["root.dev"][1] and queues_before["root.prod"][1]   # running apps
    placed = inst.placement()
    binds_before = settled_bindings(inst, time.time())
    status = inst.shim_status()
    engine = inst.roles()["engine"]
    uuid_before = inst.get_json("/ws/v1/events/batch?count=1")["InstanceUUID"]

    killed = time.time()
    os.kill(engine, signal.SIGKILL)
    new_engine = inst.wait_role_pid("engine", engine)
    assert "ykshm engine " in open(f"/proc/{new_engine}/cmdline", "rb").read().replace(b"\0", b" ").decode()
    after = inst.wait_shim_running(registrations=status["registrations"] + 1)
    assert after["pid"] == status["pid"]                  # the same shim recovered
    wait_for(lambda: inst.get_json("/ws/v1/events/batch?count=1")["InstanceUUID"] != uuid_before,
             10, "the web on the new engine's ring")
    wait_for(lambda: snapshot_engine_pid(inst) == new_engine, 10, "a snapshot of the new engine")
    wait_for(lambda: all(web_snapshot_age(inst) < time.time() - killed for _ in range(4)), 10,
             "the web serving the new engine's snapshot")
    wait_for(lambda: user_usage(inst) == users_before, 15, "user usage equal to before")
    wait_for(lambda: queue_usage(inst) == queues_before, 10, "queue usage equal to before")
    assert queue_tree(inst) == tree_before                # the whole queue view, not only usage
    assert inst.placement() == placed                     # every pod keeps its node
    b = settled_bindings(inst, time.time())
    assert b == binds_before and b["conflicts"] == 0 and b["errors"] == 0   # nothing re-bound

    fresh = create_pods(inst, "e2-", 4, ("root.dev", "root.prod", None))
    inst.wait_bound(fresh)
    b = settled_bindings(inst, time.time())
    assert b == {**binds_before, "done": binds_before["done"] + 4}     # each new pod bound once
    assert {k: v for k, v in inst.placement().items() if k in placed} == placed
    wait_for(lambda: pods_in_usage(inst) == total + 4, 15, "usage of the new pods")


def test_sigterm_stops_everything(inst):
    inst.remember()
    assert len(inst.seen) >= 6          # 4 roles + 2 workers (plus the replaced ones)
    assert inst.stop(signal.SIGTERM) == 0, inst.stderr()
    left = inst.leftovers()
    assert left == {"shm": [], "pids": [], "status_file": False}, left
