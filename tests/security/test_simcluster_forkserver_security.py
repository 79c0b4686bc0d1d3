"""The fork server plays the attacker's target: a pod's process must not reach it or its secrets.

Whoever may create a process pod runs `ykshm ARGS` forked by sim-cluster's fork server. The
server's control channel would let a pod fork anything with any environment, so no pod process
may hold an fd of it; nor may a pod see sim-cluster's or the server's environment. Each test
fails without the check it names (closing every fd >= 3 in the child; clearing os.environ and
starting the server with nothing of sim-cluster's).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from kubernetes import client as k8s

from simcluster import launcher
from tests.simcluster.test_simcluster import start_cluster, stop_cluster
from tests.simcluster.test_simcluster_clients import eventually, make_namespace

IMAGE = "ykshm:0.1.0"
HOST_SECRET = "sim-cluster-forkserver-secret-value"


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[k8s.CoreV1Api, int]]:
    os.environ["YKSHM_TEST_HOST_SECRET"] = HOST_SECRET  # what sim-cluster's environment holds
    try:
        proc, url = start_cluster("--nodes", "1", "--kubelet-delay", "0.05")
    finally:
        del os.environ["YKSHM_TEST_HOST_SECRET"]
    try:
        with k8s.ApiClient(k8s.Configuration(host=url)) as api_client:
            yield k8s.CoreV1Api(api_client), proc.pid
    finally:
        stop_cluster(proc)


def _sockets(pid: int) -> set[str]:
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):
            found.add(target)
    return found


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[1])


def _running_pid(core: k8s.CoreV1Api, ns: str, name: str) -> int:
    def pid() -> int | None:
        got = core.read_namespaced_pod(name, ns).status.container_statuses
        cid = got[0].container_id if got else None
        return int(cid.removeprefix("process://")) if cid and got[0].state.running else None

    return eventually(pid, timeout=15)


def test_a_pod_holds_no_fd_of_the_servers_channel_nor_its_environment(cluster: tuple[k8s.CoreV1Api, int]) -> None:
    core, cluster_pid = cluster
    ns = f"fsec-{uuid.uuid4().hex[:8]}"
    make_namespace(core.api_client, ns)
    core.create_namespaced_pod(ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {
        "nodeName": "node-0000", "containers": [{"name": "c", "image": IMAGE,
                                                 "args": ["sim-cluster", "--port", "0", "--bind", "$(IP)"],
                                                 "env": [{"name": "IP", "valueFrom": {
                                                     "fieldRef": {"fieldPath": "status.podIP"}}}]}]}})
    pod_pid = _running_pid(core, ns, "p")
    server = _ppid(pod_pid)
    assert _ppid(server) == cluster_pid and b"simcluster.forkserver" in Path(f"/proc/{server}/cmdline").read_bytes()
    channel = _sockets(server)  # the server's end of the channel (its only socket)
    assert channel
    eventually(lambda: Path(f"/proc/{pod_pid}/fd").exists() and len(_sockets(pod_pid)) >= 1, timeout=10)
    assert not channel & _sockets(pod_pid)  # the pod's own listener, nothing of the server's
    raw = Path(f"/proc/{pod_pid}/environ").read_bytes().decode()
    assert "KUBERNETES_SERVICE_HOST=" in raw and HOST_SECRET not in raw and "FORK_SERVER_PAD" not in raw
    assert HOST_SECRET.encode() not in Path(f"/proc/{server}/environ").read_bytes()
    core.delete_namespaced_pod("p", ns)


async def test_a_forked_process_finds_no_inherited_fd_and_only_its_env(tmp_path: Path) -> None:
    """The run itself looks: every fd it holds, and its os.environ (not only what /proc shows)."""
    code = ("import os, json; fds = sorted(int(f) for f in os.listdir('/proc/self/fd'));"
            "print(json.dumps({'fds': fds, 'links': [os.readlink(f'/proc/self/fd/{f}') for f in fds if f > 2 and "
            "os.path.exists(f'/proc/self/fd/{f}')], 'env': sorted(os.environ)}))")
    log = tmp_path / "log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT, 0o600)
    async with trio.open_nursery() as nursery:
        owner = launcher.Launcher()
        await nursery.start(owner.run)
        try:
            child = await owner.start([sys.executable, "-I", "-c", code], {"ONLY": "this"}, str(tmp_path), fd)
            with trio.fail_after(30):
                assert await child.wait() == 0
        finally:
            os.close(fd)
            owner.close()
            nursery.cancel_scope.cancel()
    got = json.loads(log.read_text())
    assert got["fds"] == [0, 1, 2, 3], got  # 3: listdir's own directory fd, gone once read
    assert set(got["env"]) - {"LC_CTYPE"} == {"ONLY"}
