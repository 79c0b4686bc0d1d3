"""ykshm's engine and shim schedule pods on the real kube-apiserver (issue 31 item 4, first bullet):
the shim runs under its own identity (`CN=ykshm:shim`) with the ClusterRole `ykshm run` gives it
(tools/run_identities.py), lists and watches the real API and binds; the binding and the
scheduler's Event are what `kubectl` shows; a kill -9 of the engine and of the shim recovers
(seed 004: the shim re-registers and replays what is bound), and nothing is bound twice (the real
apiserver answers a second binding with 409, which the shim would count as a conflict).

The test registers the nodes as API objects itself, as a kubelet would (capacity, allocatable, a
Ready condition through the status sub-resource; the node agent of item 3 is proven in
test_realk8s_nodeagent.py), and removes the
`node.kubernetes.io/not-ready` taint the real TaintNodesByCondition admission plugin puts on every
new node (the node lifecycle controller would lift it; the run does not start it, see
tools/realk8s_plane.py). Pods therefore stay Pending after binding: nothing runs them, and the
shim recovers them as allocations because they are bound (spec.nodeName), as YuniKorn does.
"""

from __future__ import annotations

import signal

import pytest

from tests.realk8s.realsched import RealScheduler, shim_kubeconfig
from tools import harness

NODES = ("real-node-1", "real-node-2")


@pytest.fixture(scope="module")
def nodes(plane):
    for name in NODES:
        plane.register_node(name, {"cpu": "4", "memory": "8Gi", "pods": "110"})
    return NODES


@pytest.fixture
def scheduler(plane, nodes, tmp_path, ring_name):
    real = RealScheduler(plane, ring_name, shim_kubeconfig(plane, tmp_path))
    try:
        real.cluster.start_engine()
        real.start_shim()
        yield real
    finally:
        real.close()


def test_engine_and_shim_bind_a_pod_on_the_real_apiserver(plane, scheduler, tmp_path):
    scheduler.create_pod("plain", "app-real")
    node = scheduler.wait_bound(["plain"])["plain"]
    assert node in NODES
    wide = plane.kubectl("get", "pod", "plain", "-o", "wide").stdout
    print(wide)
    assert node in wide.splitlines()[1].split()
    conditions = plane.kubectl_json("get", "pod", "plain")["status"]["conditions"]
    assert {"type": "PodScheduled", "status": "True"}.items() <= conditions[0].items()

    def scheduler_event():  # the engine's request event, posted by the shim as a Kubernetes Event
        return [e for e in plane.kubectl_json("get", "events")["items"]
                if e["involvedObject"]["name"] == "plain" and e["source"].get("component") == "yunikorn"]
    events = plane.wait_for("a yunikorn Event on the pod", scheduler_event, timeout=30)
    assert any(f"allocated on node {node}" in e["message"] for e in events), events
    log = scheduler.shim_log()
    assert " 403 " not in log and "forbidden" not in log.lower(), log


def test_kill_9_of_engine_and_shim_recovers_and_binds_nothing_twice(plane, scheduler, tmp_path):
    c = scheduler.cluster
    names = [f"k{i}" for i in range(8)]
    for n in names:
        scheduler.create_pod(n, "app-kill")
    placed = scheduler.wait_bound(names)

    c.kill_engine()
    c.wait_shim("New", 30)
    scheduler.create_pod("while-engine-down", "app-kill")
    c.start_engine()
    status = c.wait_shim("Running", 60, registrations=2)
    assert [t["to"] for t in status["history"]][-4:] == ["New", "Registered", "Recovering", "Running"]
    now = scheduler.wait_bound([*names, "while-engine-down"])
    assert {n: now[n] for n in names} == placed                  # nothing moved
    binds = harness.wait_for(lambda: (b := c.shim_status()["bindings"])["done"] >= 9 and b, 20, "9 bindings")
    assert binds == {"done": 9, "inFlight": 0, "conflicts": 0, "errors": 0}   # each pod bound once

    assert c.shim is not None
    c.shim.stop(signal.SIGKILL)
    scheduler.create_pod("while-shim-down", "app-kill")
    scheduler.start_shim()                       # re-registers: the engine forgets, the shim replays
    assert c.shim_status()["engine"]["allocations"] >= 9
    now = scheduler.wait_bound([*names, "while-engine-down", "while-shim-down"])
    assert {n: now[n] for n in names} == placed
    binds = harness.wait_for(lambda: (b := c.shim_status()["bindings"])["done"] >= 1 and b, 20, "1 binding")
    assert binds == {"done": 1, "inFlight": 0, "conflicts": 0, "errors": 0}  # only the new pod
