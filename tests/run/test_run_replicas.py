"""`ykshm run --replicas 2`: two scheduler replicas (engine + shim + web each) on one Lease."""

from __future__ import annotations

import os
import signal

import httpx

from common.shimstatus import read_status, status_path
from tools.harness import wait_for


def _roles(names: list[str]) -> dict[str, str]:
    """instance name -> leader/standby, from each live shim's status file."""
    roles = {}
    for name in names:
        doc = read_status(status_path(name))
        if not doc.get("stopped"):
            roles[name] = (doc.get("leaderElection") or {}).get("role")
    return roles


def test_two_replicas_one_leads_and_a_stopped_leader_hands_over(make_run, ring_name):
    inst = make_run(extra=("--replicas", "2"))
    names = [ring_name, f"{ring_name}-2"]
    webs = {names[0]: inst.url, names[1]: f"http://127.0.0.1:{inst.port + 1}"}
    assert f"replica 2: web {webs[names[1]]}" in inst.banner
    roles = wait_for(lambda: sorted((r := _roles(names)).values()) == ["leader", "standby"] and r,
                     30, "one leader and one standby")
    leader = next(n for n, role in roles.items() if role == "leader")
    standby = next(n for n in names if n != leader)
    for name in names:
        doc = httpx.get(webs[name] + "/ws/v1/scheduler/healthcheck", timeout=10).json()
        assert doc["LeaderElection"]["role"] == roles[name]
        assert doc["LeaderElection"]["lease"] == "yunikorn/yunikorn-scheduler"
    inst.create_pod("before")
    inst.wait_bound(["before"])
    old_pid = read_status(status_path(leader))["pid"]
    os.kill(old_pid, signal.SIGTERM)        # a clean stop releases the lease: no 15 s wait
    wait_for(lambda: _roles([standby]) == {standby: "leader"}, 12, f"{standby} leading")
    wait_for(lambda: (d := read_status(status_path(leader)))["pid"] != old_pid and not d["stopped"]
             and d.get("leaderElection", {}).get("role") == "standby", 30,
             f"{leader} restarted by the supervisor as the standby")
    inst.create_pod("after")
    inst.wait_bound(["after"])
    doc = httpx.get(webs[standby] + "/ws/v1/scheduler/healthcheck", timeout=10).json()
    assert doc["LeaderElection"]["role"] == "leader" and doc["LeaderElection"]["leaseTransitions"] == 1
