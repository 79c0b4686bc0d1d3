"""ykshm's engine and shim schedule a plain pod on the real kube-apiserver (issue 31 item 4, first
bullet): the shim runs under its own identity (`CN=ykshm:shim`) with the ClusterRole `ykshm run`
gives it (tools/run_identities.py), lists and watches the real API, and binds; the binding is
what `kubectl` shows.

There is no node agent yet (item 3): the test registers the nodes as API objects, as a kubelet
would (capacity, allocatable, a Ready condition through the status sub-resource), and removes the
`node.kubernetes.io/not-ready` taint the real TaintNodesByCondition admission plugin puts on every
new node (the node lifecycle controller would lift it; the run does not start it, see
tools/realk8s_plane.py). Pods therefore stay Pending after binding: nothing runs them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from common.shimstatus import read_status, status_path
from simcluster import pki
from tools import harness, run_identities

NODES = ("real-node-1", "real-node-2")


def node_object(name: str) -> dict:
    resources = {"cpu": "4", "memory": "8Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"capacity": resources, "allocatable": resources}}


def register_nodes(plane, tmp: Path) -> None:
    """Nodes as a kubelet registers them: the object, then Ready through status."""
    for name in NODES:
        path = tmp / f"{name}.json"
        path.write_text(json.dumps(node_object(name)))
        plane.kubectl("create", "-f", str(path))
        ready = {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                            "message": "registered by the test (no node agent yet)"}]}}
        plane.kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps(ready))
        plane.kubectl("taint", "node", name, "node.kubernetes.io/not-ready:NoSchedule-")


def shim_kubeconfig(plane, tmp: Path) -> Path:
    """The shim's identity and RBAC, exactly as `ykshm run` makes them for sim-cluster."""
    plane.kubectl("apply", "-f", str(run_identities.write_policy(tmp / "policy.yaml")))
    return pki.client_kubeconfig(plane.pki, "ykshm-shim", f"{run_identities.USER_PREFIX}shim",
                                 (run_identities.GROUP,), plane.server)


def accepts(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(path))
    return True


@pytest.fixture
def scheduler(plane, tmp_path, ring_name):
    """An engine (no network: its SI socket is a file) and a shim inside the run's namespace."""
    config, sock = tmp_path / "queues.yaml", tmp_path / "engine.sock"
    config.write_text(harness.ENGINE_CONFIG.format(request_events="true"))
    engine = harness.Proc("engine", ["engine", "--config", str(config), "--name", ring_name,
                                     "--socket", str(sock)], str(tmp_path))
    harness.wait_for(lambda: accepts(sock), 30, "the engine socket")
    kubeconfig = shim_kubeconfig(plane, tmp_path)
    log = open(tmp_path / "shim.log", "wb")
    shim = subprocess.Popen([*plane.enter(), sys.executable, "-m", "tools.cli", "shim", "--kubeconfig",
                             str(kubeconfig), "--name", ring_name, "--socket", str(sock)],
                            cwd=harness.ROOT, env=dict(os.environ, PYTHONPATH=harness.ROOT),
                            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    try:
        yield shim, tmp_path / "shim.log"
    finally:
        if shim.poll() is None:
            shim.send_signal(signal.SIGTERM)
            shim.wait(15)
        log.close()
        engine.stop()
        for path in (status_path(ring_name),):
            Path(path).unlink(missing_ok=True)


def test_engine_and_shim_bind_a_pod_on_the_real_apiserver(plane, scheduler, tmp_path, ring_name):
    shim, log = scheduler
    register_nodes(plane, tmp_path)

    def running():
        assert shim.poll() is None, log.read_text()
        return read_status(status_path(ring_name))["state"] == "Running"
    harness.wait_for(running, 60, "the shim Running against the real kube-apiserver")
    pod = tmp_path / "pod.json"
    pod.write_text(json.dumps(harness.pod_body("plain", app="app-real")))
    plane.kubectl("create", "-f", str(pod))

    def bound():
        return plane.kubectl_json("get", "pod", "plain")["spec"].get("nodeName")
    node = plane.wait_for("the pod bound by ykshm", bound, timeout=60)
    assert node in NODES
    wide = plane.kubectl("get", "pod", "plain", "-o", "wide").stdout
    print(wide)
    assert node in wide.splitlines()[1].split()
    assert plane.kubectl_json("get", "pod", "plain")["status"]["conditions"][0]["type"] == "PodScheduled"

    def scheduler_event():  # the engine's request event, posted by the shim as a Kubernetes Event
        return [e for e in plane.kubectl_json("get", "events")["items"]
                if e["involvedObject"]["name"] == "plain" and e["source"].get("component") == "yunikorn"]
    events = plane.wait_for("a yunikorn Event on the pod", scheduler_event, timeout=30)
    assert any(f"allocated on node {node}" in e["message"] for e in events), events
    assert " 403 " not in log.read_text() and "forbidden" not in log.read_text().lower()
