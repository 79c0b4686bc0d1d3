"""`ykshm node-agent` against sim-cluster's own API (issue 31 item 3; the real kube-apiserver's side
is tests/realk8s/test_realk8s_nodeagent.py).

sim-cluster runs its own nodes as today; an agent pointed at it over HTTP registers another node
(labelled `ykshm.io/node-agent`), keeps that node's Lease, and runs the process pods bound to it on
a loopback block of its own: sim-cluster's kubelet leaves that node alone. Every process is
stopped by pid and checked gone.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.podsdir import reachable_pods_dir
from tests.simcluster.test_simcluster import kubectl, start_cluster, stop_cluster
from tests.simcluster.test_simcluster_clients import eventually
from tests.simcluster.test_simcluster_procpods import alive, survivors
from tools import harness


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Iterator[tuple[str, harness.Proc, Path]]:
    with reachable_pods_dir() as sim_pods, reachable_pods_dir() as agent_pods:
        proc, url = start_cluster("--nodes", "1", "--kubelet-delay", "0.05", "--node-lease-interval", "1",
                                  "--pods-dir", str(sim_pods))
        agent = None
        try:
            agent = harness.Proc("node-agent", ["sim-cluster", "--node-agent", "--api-server", url, "--nodes", "1",
                                                "--node-lease-interval", "1", "--pods-dir", str(agent_pods)],
                                 str(tmp_path_factory.mktemp("agent")))
            harness.wait_for(lambda: "node agent: 1 nodes Ready" in Path(agent.log_path).read_text()
                             or not agent.alive(), 30, "the node agent's ready line")
            assert agent.alive(), agent.tail()
            yield url, agent, agent_pods
        finally:
            code = agent.stop(signal.SIGTERM, timeout=20) if agent else 0
            stop_cluster(proc)
            left = survivors(agent_pods) + survivors(sim_pods)
        assert code == 0 and not left, (code, left)


def get(url: str, home: Path, *args: str) -> dict:
    out = kubectl(url, home, "get", *args, "-o", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_agent_runs_its_node_and_pods_on_a_sim_cluster(setup, tmp_path: Path) -> None:
    url, agent, _ = setup
    node = get(url, tmp_path, "node", "agent-node-0")
    assert node["metadata"]["labels"]["ykshm.io/node-agent"] == "true"
    assert [c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready"] == ["True"]
    lease = get(url, tmp_path, "lease", "-n", "kube-node-lease", "agent-node-0")
    first = lease["spec"]["renewTime"]
    eventually(lambda: get(url, tmp_path, "lease", "-n", "kube-node-lease", "agent-node-0")["spec"]["renewTime"]
               > first, timeout=10)

    pods = []
    for name, node_name in (("on-agent", "agent-node-0"), ("on-sim", "node-0000")):
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"nodeName": node_name, "containers": [
                    {"name": "c", "image": "ykshm:0.1.0", "args": ["sim-cluster", "--port", "0", "--no-process-pods"]}]}}
        out = kubectl(url, tmp_path, "create", "-f", "-", stdin=json.dumps(body))
        assert out.returncode == 0, out.stderr

        def started(name=name):
            cs = (get(url, tmp_path, "pod", name)["status"].get("containerStatuses") or [{}])[0]
            return "running" in (cs.get("state") or {}) and cs["containerID"].startswith("process://") and cs
        pods.append((name, eventually(started, timeout=30), get(url, tmp_path, "pod", name)["status"]["podIP"]))
    (_, agent_cs, agent_ip), (_, sim_cs, sim_ip) = pods
    # two kubelets, two loopback blocks: the agent's pod is not one of sim-cluster's
    assert agent_ip.startswith("127.") and sim_ip.startswith("127.") and agent_ip.split(".")[1] != sim_ip.split(".")[1]
    agent_pid, sim_pid = (int(cs["containerID"].removeprefix("process://")) for cs in (agent_cs, sim_cs))
    assert alive(agent_pid) and alive(sim_pid)
    for name in ("on-agent", "on-sim"):
        assert kubectl(url, tmp_path, "delete", "pod", name).returncode == 0
    eventually(lambda: not alive(agent_pid) and not alive(sim_pid), timeout=20)


def test_bad_api_server_is_one_line() -> None:
    out = subprocess.run([sys.executable, "-m", "tools.cli", "node-agent", "--api-server", "http://127.0.0.1:1"],
                         capture_output=True, text=True, timeout=30, cwd=harness.ROOT)
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("ykshm node-agent: error: node agent-node-0: cannot reach the API server")
