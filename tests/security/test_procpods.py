"""Process pods play the attacker: whoever may create a pod must not get more than `ykshm ARGS`.

A process pod runs ykshm with the pod author's arguments, so each test here is a pod author trying to run
something else (a shell, code through PYTHONPATH or LD_PRELOAD), to write outside the pod's
directory through a volume path, or to read sim-cluster's own environment. Each one fails
without the check it names.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from tests.podsdir import reachable_pods_dir
from tests.simcluster.test_simcluster import start_cluster, stop_cluster
from tests.simcluster.test_simcluster_clients import eventually, make_namespace

IMAGE = "ykshm:0.1.0"
HOST_SECRET = "sim-cluster-own-secret-value"


@pytest.fixture(scope="module")
def pods_dir() -> Iterator[Path]:
    with reachable_pods_dir("secpods-") as path:
        yield path


@pytest.fixture(scope="module")
def core(pods_dir: Path) -> Iterator[k8s.CoreV1Api]:
    os.environ["YKSHM_TEST_HOST_SECRET"] = HOST_SECRET  # what sim-cluster's environment holds
    try:
        proc, url = start_cluster("--nodes", "1", "--kubelet-delay", "0.05", "--pods-dir", str(pods_dir))
    finally:
        del os.environ["YKSHM_TEST_HOST_SECRET"]
    try:
        with k8s.ApiClient(k8s.Configuration(host=url)) as api_client:
            yield k8s.CoreV1Api(api_client)
    finally:
        stop_cluster(proc)


@pytest.fixture
def ns(core: k8s.CoreV1Api) -> str:
    name = f"sec-{uuid.uuid4().hex[:8]}"
    make_namespace(core.api_client, name)
    return name


def pod(name: str, container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": "node-0000", "containers": [{"name": "c", "image": IMAGE, **container}], **spec}}


def waiting(core: k8s.CoreV1Api, ns: str, name: str, reason: str) -> str:
    def check() -> str | None:
        statuses = core.api_client.sanitize_for_serialization(
            core.read_namespaced_pod(name, ns)).get("status", {}).get("containerStatuses") or [{}]
        state = (statuses[0].get("state") or {}).get("waiting") or {}
        return state.get("message") if state.get("reason") == reason else None

    return eventually(check, timeout=10)


def test_a_shell_command_is_not_run(core: k8s.CoreV1Api, ns: str, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    core.create_namespaced_pod(ns, pod("sh", {"command": ["/bin/sh", "-c", f"touch {marker}"]}))
    message = waiting(core, ns, "sh", "CreateContainerError")
    assert message == "process pods run only ykshm: command '/bin/sh' is not ykshm"
    # ... nor smuggled in as ykshm's path, nor as an exec probe
    core.create_namespaced_pod(ns, pod("probe", {"args": ["--help"], "livenessProbe": {
        "exec": {"command": ["/bin/sh", "-c", f"touch {marker}"]}, "periodSeconds": 1}}))
    events = eventually(lambda: [e for e in core.list_namespaced_event(ns).items
                                 if e.involved_object.name == "probe" and e.reason == "Unhealthy"], timeout=10)
    assert "Liveness probe failed: process pods run only ykshm" in events[0].message
    assert not marker.exists()


def test_python_and_loader_variables_are_refused(core: k8s.CoreV1Api, ns: str, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    (tmp_path / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    core.create_namespaced_pod(ns, pod("pypath", {"args": ["--help"],
                                                  "env": [{"name": "PYTHONPATH", "value": str(tmp_path)}]}))
    message = waiting(core, ns, "pypath", "CreateContainerConfigError")
    assert "env PYTHONPATH: not allowed in a process pod" in message
    core.create_namespaced_secret(ns, {"metadata": {"name": "evil"}, "stringData": {"LD_PRELOAD": "/tmp/x.so"}})
    core.create_namespaced_pod(ns, pod("ldpre", {"args": ["--help"], "envFrom": [{"secretRef": {"name": "evil"}}]}))
    assert "env LD_PRELOAD: not allowed" in waiting(core, ns, "ldpre", "CreateContainerConfigError")
    assert not marker.exists()


def test_volume_paths_stay_in_the_pod_directory(core: k8s.CoreV1Api, ns: str, pods_dir: Path) -> None:
    core.create_namespaced_secret(ns, {"metadata": {"name": "s"}, "stringData": {"k": "v"}})
    escape = f"../../../escaped-{ns}"
    volumes = [{"name": "v", "secret": {"secretName": "s", "items": [{"key": "k", "path": escape}]}}]
    try:
        core.create_namespaced_pod(ns, pod("escape", {"args": ["--help"],
                                                      "volumeMounts": [{"name": "v", "mountPath": "/etc/v"}]},
                                           volumes=volumes))
    except ApiException as exc:  # refused at the API is as good
        assert exc.status == 422
    else:
        events = eventually(lambda: [e for e in core.list_namespaced_event(ns).items if e.reason == "FailedMount"])
        assert "must be a relative path without '..'" in events[0].message
    assert not list(pods_dir.parent.rglob(f"escaped-{ns}")) and not list(Path("/tmp").glob(f"escaped-{ns}"))


def test_the_process_gets_none_of_sim_clusters_environment(core: k8s.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, pod("env", {"args": ["sim-cluster", "--port", "0", "--bind", "$(IP)"],
                                               "env": [{"name": "IP", "valueFrom": {
                                                   "fieldRef": {"fieldPath": "status.podIP"}}}]}))

    def pid() -> int | None:
        got = core.read_namespaced_pod("env", ns).status.container_statuses
        cid = got[0].container_id if got else None
        return int(cid.removeprefix("process://")) if cid and got[0].state.running else None

    raw = Path(f"/proc/{eventually(pid, timeout=10)}/environ").read_bytes().decode()
    assert "KUBERNETES_SERVICE_HOST=" in raw and HOST_SECRET not in raw
    core.delete_namespaced_pod("env", ns)


def test_the_pod_directory_is_private(core: k8s.CoreV1Api, ns: str, pods_dir: Path) -> None:
    core.create_namespaced_pod(ns, pod("private", {"args": ["sim-cluster", "--port", "0", "--bind", "$(IP)"],
                                                   "env": [{"name": "IP", "valueFrom": {
                                                       "fieldRef": {"fieldPath": "status.podIP"}}}]}))
    token = eventually(lambda: next(pods_dir.glob(f"{ns}_private_*/volumes/kube-api-access/token"), None))
    pod_dir = token.parent.parent.parent.stat()  # the pod's own uid (and group) only, and root
    assert (pod_dir.st_mode & 0o777, pod_dir.st_uid, pod_dir.st_gid) == (0o750, 0, token.stat().st_gid)
    assert token.stat().st_mode & 0o777 == 0o600 and token.stat().st_uid >= 200000
    core.delete_namespaced_pod("private", ns)


def test_a_service_proxies_only_to_loopback_endpoints(core: k8s.CoreV1Api, ns: str, pods_dir: Path) -> None:
    """User-written Endpoints must not turn sim-cluster's proxy into a way out of 127.0.0.0/8:
    0.0.0.0 reaches this host's listeners, so it stands in for any other address here."""
    with socket.create_server(("127.0.0.1", 0)) as target:
        port = target.getsockname()[1]
        target.settimeout(0.5)
        core.create_namespaced_service(ns, {"metadata": {"name": "out"}, "spec": {"ports": [{"port": 7171}]}})
        core.create_namespaced_endpoints(ns, {"metadata": {"name": "out"}, "subsets": [
            {"addresses": [{"ip": "0.0.0.0"}], "ports": [{"port": port}]}]})
        line = eventually(lambda: [ln for ln in (pods_dir / "hosts").read_text().splitlines()
                                   if f" out.{ns}.svc.cluster.local" in ln])
        address = line[0].split()[0]
        client = eventually(lambda: _connect(address, 7171))
        with client:
            client.settimeout(2)
            assert client.recv(1) == b""  # closed at once: no endpoint it may use
        with pytest.raises(TimeoutError):
            target.accept()


def _connect(host: str, port: int) -> socket.socket | None:
    try:
        return socket.create_connection((host, port), timeout=1)
    except OSError:
        return None
