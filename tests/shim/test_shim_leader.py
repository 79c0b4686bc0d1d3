"""Active/standby: two scheduler replicas (engine + `ykshm shim --leader-elect` each) on one
sim-cluster and one Lease. The leader is killed, paused or cut from the API during a burst of
pods; each time the standby takes over, no pod is bound twice (every binding the API server
announces is counted, per pod) and no schedulable pod is left unbound. Short timings (lease 2 s,
renew deadline 1.5 s, retry 0.25 s) keep each test to seconds."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys

import httpx
import pytest

from tools.harness import ROOT, BindWatch, Cluster, wait_for

TIMINGS = (2.0, 1.5, 0.25)
CLIENT_GO = (15.0, 10.0, 2.0)
LEASE = "/apis/coordination.k8s.io/v1/namespaces/default/leases/yunikorn-scheduler"


@pytest.fixture
def pair(ring_name, request):
    """sim-cluster with 3 nodes, replica 0 the leader, replica 1 the standby, and a BindWatch;
    the timings TIMINGS unless the test names others (`indirect` parametrisation)."""
    timings = getattr(request, "param", TIMINGS)
    c = Cluster(ring_name, nodes=3)
    watch = None
    try:
        c.start_sim()
        leader = c.start_replica(timings=timings)
        leader.wait_role("leader")
        standby = c.start_replica(timings=timings)
        standby.wait_role("standby")
        watch = BindWatch(c.url)
        yield c, leader, standby, watch
    finally:
        if watch is not None:
            watch.close()
        c.close()


def _pods(c: Cluster, start: int, n: int) -> list[str]:
    names = [f"p{i:03d}" for i in range(start, start + n)]
    for name in names:
        c.create_pod(name)
    return names


def _micro(text: str) -> float:
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=dt.timezone.utc).timestamp()


def _all_bound_once(c: Cluster, watch: BindWatch, names: list[str]) -> None:
    c.wait_bound(names, timeout=30)
    wait_for(lambda: set(names) <= watch.bound(), 10, "the watch to see every binding")
    assert watch.bound_twice() == []
    assert sorted(watch.bound()) == sorted(names)


def test_the_standby_keeps_its_caches_warm_and_binds_nothing(pair):
    c, leader, standby, watch = pair
    names = _pods(c, 0, 10)
    _all_bound_once(c, watch, names)
    lease = c.api.get(LEASE).json()["spec"]
    assert lease["holderIdentity"] == "replica-0" and lease["leaseTransitions"] == 0
    assert lease["leaseDurationSeconds"] == 2 and lease["acquireTime"] and lease["renewTime"]
    doc = wait_for(lambda: (d := standby.status())["informers"]["pods"]["objects"] == 10 and d,
                   10, "the standby's pod cache")
    assert doc["state"] == "New" and not doc["connected"]        # its engine left idle
    assert doc["bindings"]["done"] == 0 and doc["leaderElection"]["firstWriteSent"] == 0
    assert doc["leaderElection"]["holder"] == "replica-0"
    wait_for(lambda: leader.status()["bindings"]["done"] == 10, 10, "the leader's 10 bindings")


def _status_lines(name: str) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "tools.cli", "status", "--name", name], cwd=ROOT,
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": ROOT})
    return [line for line in out.stdout.splitlines() if line.startswith("leader election:")]


def test_healthcheck_and_status_say_leader_or_standby(pair):
    c, leader, standby, watch = pair
    for replica, role in ((leader, "leader"), (standby, "standby")):
        url = replica.start_web()
        doc = httpx.get(url + "/ws/v1/scheduler/healthcheck", timeout=10).json()
        assert doc["LeaderElection"]["role"] == role
        assert doc["LeaderElection"]["holder"] == "replica-0"
        check = next(ch for ch in doc["HealthChecks"] if ch["Name"] == "Leader election")
        assert check["Succeeded"] and check["DiagnosisMessage"].startswith(
            f"{role} of lease default/yunikorn-scheduler as {replica.identity}")
        assert _status_lines(replica.name) == [
            f"leader election: {role} of lease default/yunikorn-scheduler as {replica.identity} "
            f"(holder replica-0, 0 transitions)"]
    leader.shim.stop(signal.SIGKILL)
    standby.wait_role("leader", timeout=20)
    doc = httpx.get(standby.web_url + "/ws/v1/scheduler/healthcheck", timeout=10).json()
    assert doc["LeaderElection"] == {"role": "leader", "identity": "replica-1", "holder": "replica-1",
                                     "lease": "default/yunikorn-scheduler", "leaseTransitions": 1}


def test_leader_killed_during_a_burst(pair):
    c, leader, standby, watch = pair
    names = _pods(c, 0, 20)
    leader.shim.stop(signal.SIGKILL)
    names += _pods(c, 20, 20)
    doc = standby.wait_role("leader", timeout=20)
    assert doc["leaderElection"]["leaseTransitions"] == 1
    _all_bound_once(c, watch, names)
    assert c.api.get(LEASE).json()["spec"]["holderIdentity"] == "replica-1"


def test_leader_paused_does_not_write_after_waking(pair):
    c, leader, standby, watch = pair
    names = _pods(c, 0, 20)
    leader.shim.send(signal.SIGSTOP)
    names += _pods(c, 20, 20)
    doc = standby.wait_role("leader", timeout=20)
    _all_bound_once(c, watch, names)
    leader.shim.send(signal.SIGCONT)
    assert leader.shim.popen.wait(20) == 1                      # it finds the lease gone: exits
    assert "leadership lost" in leader.shim.tail(5)
    old = leader.status()["leaderElection"]
    acquired = _micro(doc["leaderElection"]["acquireTime"])
    assert old["lastWriteSent"] < acquired                      # nothing sent after the takeover
    names += _pods(c, 40, 5)
    _all_bound_once(c, watch, names)


def test_leader_cut_from_the_api(pair):
    c, leader, standby, watch = pair
    names = _pods(c, 0, 20)
    leader.proxy.cut()
    names += _pods(c, 20, 20)
    doc = standby.wait_role("leader", timeout=20)
    assert leader.shim.popen.wait(20) == 1                      # renew deadline missed: exits
    assert "leadership lost" in leader.shim.tail(5)
    old = leader.status()["leaderElection"]
    assert old["lastWriteSent"] < _micro(doc["leaderElection"]["acquireTime"])
    _all_bound_once(c, watch, names)


def test_a_leader_stopped_cleanly_releases_the_lease(ring_name):
    """SIGTERM: the lease is handed over at once, not after its 30 s duration."""
    with Cluster(ring_name, nodes=1) as c:
        c.start_sim()
        leader = c.start_replica(timings=(30.0, 10.0, 0.25))
        leader.wait_role("leader")
        standby = c.start_replica(timings=(30.0, 10.0, 0.25))
        standby.wait_role("standby")
        assert leader.shim.stop(signal.SIGTERM, timeout=10) == 0
        standby.wait_role("leader", timeout=10)
        c.create_pod("after")
        c.wait_bound(["after"], timeout=20)


@pytest.mark.parametrize("flags, message", [
    (["--leader-elect-lease-duration", "10s"],
     "--leader-elect: lease duration 10s must be more than the renew deadline (10s)"),
    (["--leader-elect-retry-period", "soon"],
     "argument --leader-elect-retry-period: invalid duration value: 'soon'"),
    (["--leader-elect-lifeline", "here:x"], "--leader-elect-lifeline: 'here:x' is not HOST[:PORT]"),
    (["--leader-elect-lifeline", "192.0.2.1:9088"],
     "--leader-elect-lifeline 192.0.2.1:9088: cannot listen there: Cannot assign requested address"),
])
def test_bad_election_flags_are_one_line_and_exit_2(flags, message):
    out = subprocess.run([sys.executable, "-m", "tools.cli", "shim", "--api-server",
                          "http://127.0.0.1:9", "--leader-elect", *flags], cwd=ROOT,
                         capture_output=True, text=True, timeout=30,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [f"ykshm shim: error: {message}"]


def test_the_leader_labels_its_pod_for_the_service_and_its_successor_relabels_it(ring_name):
    """`--leader-elect-pod`: the pod the Service selects is the leader's, and only its."""
    with Cluster(ring_name, nodes=1) as c:
        c.start_sim()
        for i in range(2):     # stand-ins for the replicas' pods (left to another scheduler)
            c.create_pod(f"sched-{i}", scheduler="default-scheduler")

        def roles() -> dict[str, str]:
            return {p["metadata"]["name"]: p["metadata"].get("labels", {}).get("ykshm.io/scheduler-role")
                    for p in c.pods() if p["metadata"]["name"].startswith("sched-")}

        leader = c.start_replica(timings=TIMINGS, extra=["--leader-elect-pod", "sched-0"])
        leader.wait_role("leader")
        standby = c.start_replica(timings=TIMINGS, extra=["--leader-elect-pod", "sched-1"])
        standby.wait_role("standby")
        wait_for(lambda: roles() == {"sched-0": "leader", "sched-1": "standby"}, 10, "the labels")
        leader.shim.stop(signal.SIGKILL)        # it cannot take its own label down
        standby.wait_role("leader", timeout=20)
        wait_for(lambda: roles() == {"sched-0": "standby", "sched-1": "leader"}, 10,
                 "the new leader's pod labelled, the old one's relabelled")



@pytest.mark.parametrize("pair", [CLIENT_GO], indirect=True)
def test_a_killed_leader_is_replaced_at_once_with_client_gos_timings(pair):
    """The lifeline: with client-go's 15 s lease, a SIGKILLed leader's successor does not wait
    the lease out. Its process is gone, the connection the standby held to it ended, and the
    standby took the Lease at once (without the lifeline: 15 s and more)."""
    c, leader, standby, watch = pair
    names = _pods(c, 0, 10)
    leader.shim.stop(signal.SIGKILL)
    names += _pods(c, 10, 10)
    doc = standby.wait_role("leader", timeout=8)
    assert doc["leaderElection"]["leaseTransitions"] == 1
    _all_bound_once(c, watch, names)


def test_a_paused_leader_is_waited_out_although_its_lifeline_is_open(pair):
    """SIGSTOP closes nothing: the standby takes the Lease only once it expired by its own
    clock (2 s here), never on the lifeline."""
    c, leader, standby, watch = pair
    import time
    leader.shim.send(signal.SIGSTOP)
    paused = time.time()
    doc = standby.wait_role("leader", timeout=20)
    assert _micro(doc["leaderElection"]["acquireTime"]) - paused > TIMINGS[0] - 0.6
    leader.shim.send(signal.SIGCONT)
    assert leader.shim.popen.wait(20) == 1


def _lifeline(replica) -> tuple[str, int, str]:
    from kube.lifeline import parse_bind

    annotation = replica.status()["leaderElection"]["lifeline"]
    address, _, nonce = annotation.partition("/")
    return (*parse_bind(address), nonce)


def _greeting(host: str, port: int, timeout: float = 2.0) -> bytes:
    import socket

    with socket.create_connection((host, port), timeout=timeout) as s:
        got = b""
        try:
            while chunk := s.recv(100):
                got += chunk
                if got.endswith(b"\n"):
                    break
        except TimeoutError:
            pass
        return got


def test_a_lifeline_greets_only_as_the_leader_and_holds_a_bounded_number(pair):
    """Playing a stranger on the lifeline port: a standby's lifeline says nothing (a stranger
    cannot get a greeting to pose with); the leader greets at most 16 peers at once, so a
    flood of connections costs it nothing and it keeps binding."""
    import socket

    c, leader, standby, watch = pair
    host, port, _ = _lifeline(standby)
    assert _greeting(host, port) == b""                       # closed, ungreeted
    host, port, nonce = _lifeline(leader)
    held = [socket.create_connection((host, port), timeout=2) for _ in range(15)]
    try:                                # with the standby's own connection, 16 are held
        for s in held:
            assert s.recv(100) == f"ykshm-lifeline replica-0 {nonce}\n".encode()
        assert _greeting(host, port) == b""                   # the 17th: closed, ungreeted
        names = _pods(c, 0, 5)
        _all_bound_once(c, watch, names)
        assert standby.role() == "standby"
    finally:
        for s in held:
            s.close()


def test_a_lease_taken_by_another_fences_the_leader_before_its_next_renewal(ring_name):
    """A record of the Lease written by another (here the test, as an intruder or a standby
    acting on a wrong proof) fences the leader when its watch announces it: pods created right
    after it are never bound by the old leader (it would have bound them until its next
    renewal, up to a retry period of 2 s later), and it exits."""
    with Cluster(ring_name, nodes=2) as c:
        c.start_sim()
        leader = c.start_replica(timings=CLIENT_GO)
        leader.wait_role("leader")
        _pods(c, 0, 2)
        c.wait_bound(["p000", "p001"], timeout=20)
        lease = c.api.get(LEASE).json()
        lease["spec"]["holderIdentity"] = "intruder"
        assert c.api.put(LEASE, json=lease).status_code == 200
        names = _pods(c, 2, 5)
        assert leader.shim.popen.wait(10) == 1
        assert [p["metadata"]["name"] for p in c.pods()
                if p["metadata"]["name"] in names and p["spec"].get("nodeName")] == []
        assert "held by intruder (seen on its watch)" in leader.shim.tail(5)
