"""Issue 22 item 5 on a live `ykshm sim-cluster`: ykshm's own pods run as real processes.

Driven by kubectl and the official Python client. The pods run `ykshm sim-cluster` (an HTTP
server with /readyz) and `ykshm streams` (a client of a kube-apiserver), so what a pod reads from a
Secret, which address it binds, which Service name it reaches and when it is restarted all show
in what those processes do. Every process is checked gone by pid at the end.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from common import podhosts
from simcluster import podtoken, procpods
from tests.podsdir import reachable_pods_dir
from tests.simcluster.test_simcluster import kubectl, start_cluster, stop_cluster
from tests.simcluster.test_simcluster_clients import eventually, make_namespace, ok

IMAGE = "ykshm:0.1.0"


@pytest.fixture(scope="module")
def pods_dir() -> Iterator[Path]:
    with reachable_pods_dir() as path:
        yield path


@pytest.fixture(scope="module")
def cluster(pods_dir: Path) -> Iterator[str]:
    proc, url = start_cluster("--nodes", "1", "--kubelet-delay", "0.05", "--pods-dir", str(pods_dir),
                              "--backoff-initial", "1", "--backoff-max", "4")
    try:
        yield url
    finally:
        stop_cluster(proc)
    assert not survivors(pods_dir), "sim-cluster left process pods running"


def survivors(pods_dir: Path) -> list[int]:
    """Live processes whose YKSHM_ROOT is under `pods_dir` (a process pod of that cluster)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                root = environ(int(entry.name)).get("YKSHM_ROOT", "")
            except OSError:
                continue
            if root.startswith(str(pods_dir)) and alive(int(entry.name)):
                found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def core(cluster: str) -> Iterator[k8s.CoreV1Api]:
    with k8s.ApiClient(k8s.Configuration(host=cluster)) as api_client:
        yield k8s.CoreV1Api(api_client)


@pytest.fixture
def ns(core: k8s.CoreV1Api) -> str:
    name = f"pp-{uuid.uuid4().hex[:8]}"
    make_namespace(core.api_client, name)
    return name


def pod(name: str, args: list[str], **extra: Any) -> dict[str, Any]:
    container = {"name": "c", "image": IMAGE, "args": args, **extra.pop("container", {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": extra.pop("labels", {})},
            "spec": {"nodeName": "node-0000", "containers": [container], **extra}}


def server_pod(name: str, port: int = 8080, **extra: Any) -> dict[str, Any]:
    """A pod running `ykshm sim-cluster` on its own address (POD_IP from the downward API)."""
    container = extra.pop("container", {})
    container.setdefault("env", []).append({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    container.setdefault("ports", [{"name": "web", "containerPort": port}])
    return pod(name, ["sim-cluster", "--bind", "$(POD_IP)", "--port", str(port), *extra.pop("more_args", [])],
               container=container, **extra)


def status(core: k8s.CoreV1Api, ns: str, name: str) -> dict[str, Any]:
    return core.api_client.sanitize_for_serialization(core.read_namespaced_pod(name, ns))["status"]


def container(core: k8s.CoreV1Api, ns: str, name: str) -> dict[str, Any]:
    return (status(core, ns, name).get("containerStatuses") or [{}])[0]


def waiting_state(core: k8s.CoreV1Api, ns: str, name: str) -> dict[str, Any]:
    return (container(core, ns, name).get("state") or {}).get("waiting") or {}


def pid_of(cs: dict[str, Any]) -> int:
    assert cs["containerID"].startswith("process://"), cs
    return int(cs["containerID"].removeprefix("process://"))


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or between open and read
        return False


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


def running(core: k8s.CoreV1Api, ns: str, name: str, ready: bool = True) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        cs = container(core, ns, name)
        return cs if "running" in (cs.get("state") or {}) and (cs.get("ready") or not ready) else None

    return eventually(check, timeout=30)


def delete_and_wait(core: k8s.CoreV1Api, ns: str, name: str, pid: int) -> None:
    core.delete_namespaced_pod(name, ns)
    eventually(lambda: not alive(pid), timeout=15)


# -- a Secret in env and volume; a Service reached by name from another process pod -------------

WORKLOAD = "- {name: app-a, pods: 2}\n"


def test_secret_env_and_volume_and_a_service_by_name(cluster: str, core: k8s.CoreV1Api, ns: str,
                                                     tmp_path: Path) -> None:
    core.create_namespaced_secret(ns, {"metadata": {"name": "conf"},
                                       "stringData": {"port": "8181", "workload.yaml": WORKLOAD}})
    api = server_pod("api", labels={"app": "api"}, volumes=[{"name": "wl", "secret": {"secretName": "conf"}}],
                     container={"env": [{"name": "PORT",
                                         "valueFrom": {"secretKeyRef": {"name": "conf", "key": "port"}}}],
                                "ports": [{"name": "web", "containerPort": 8181}],
                                "volumeMounts": [{"name": "wl", "mountPath": "/etc/wl", "readOnly": True}],
                                "readinessProbe": {"httpGet": {"path": "/readyz", "port": "web"},
                                                   "periodSeconds": 1}})
    api["spec"]["containers"][0]["args"] = ["sim-cluster", "--bind", "$(POD_IP)", "--port", "$(PORT)",
                                            "--workload", "/etc/wl/workload.yaml"]
    core.create_namespaced_pod(ns, api)
    core.create_namespaced_service(ns, {"metadata": {"name": "api"},
                                        "spec": {"selector": {"app": "api"},
                                                 "ports": [{"name": "http", "port": 80, "targetPort": "web"}]}})
    cs = running(core, ns, "api")
    ip = status(core, ns, "api")["podIP"]
    assert ip.startswith("127.") and ip != "127.0.0.1"
    # the port came from the Secret through env, the workload from the Secret's volume
    child = eventually(lambda: _pods_of(f"http://{ip}:8181"), timeout=15)
    assert {"app-a-0000", "app-a-0001"} <= child

    endpoints = core.read_namespaced_endpoints("api", ns)
    assert [a.ip for a in endpoints.subsets[0].addresses] == [ip]
    assert [(p.name, p.port) for p in endpoints.subsets[0].ports] == [("http", 8181)]
    slices = json.loads(ok(kubectl(cluster, tmp_path, "get", "endpointslices", "-n", ns,
                                   "-l", "kubernetes.io/service-name=api", "-o", "json")))["items"]
    assert [e["addresses"] for e in slices[0]["endpoints"]] == [[ip]]
    assert slices[0]["endpoints"][0]["conditions"]["ready"] is True
    assert f"{ip}:8181" in ok(kubectl(cluster, tmp_path, "get", "endpoints", "api", "-n", ns))

    # another process pod reaches it by the Service's short name: it installs the Streams CRDs there
    core.create_namespaced_pod(ns, pod("client", ["streams", "--api-server", "http://api", "--install-crds",
                                                  "--no-operators", "--repository", "off"]))
    eventually(lambda: "streamsjobs.streams.ibm.com" in _crds(f"http://{ip}:8181"), timeout=30)
    client_pid = pid_of(running(core, ns, "client"))
    env = environ(client_pid)
    assert env["API_SERVICE_HOST"].startswith("127.") and env["API_SERVICE_PORT"] == "80"
    assert env["YKSHM_DNS_SEARCH"].split()[0] == f"{ns}.svc.cluster.local"
    delete_and_wait(core, ns, "client", client_pid)
    delete_and_wait(core, ns, "api", pid_of(cs))


def _pods_of(url: str) -> set[str]:
    try:
        return {p["metadata"]["name"] for p in httpx.get(f"{url}/api/v1/pods", timeout=2).json()["items"]}
    except httpx.HTTPError:
        return set()


def _readyz(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=2).text == "ok"
    except httpx.HTTPError:
        return False


def _crds(url: str) -> set[str]:
    try:
        items = httpx.get(f"{url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions", timeout=2).json()["items"]
    except httpx.HTTPError:
        return set()
    return {c["metadata"]["name"] for c in items}


def test_not_ready_pod_is_a_not_ready_address(core: k8s.CoreV1Api, ns: str, pods_dir: Path) -> None:
    exec_fails = {"exec": {"command": ["ykshm", "nosuch"]}, "periodSeconds": 1, "failureThreshold": 1}
    core.create_namespaced_pod(ns, server_pod("slow", labels={"app": "slow"}, container={"readinessProbe": exec_fails}))
    core.create_namespaced_service(ns, {"metadata": {"name": "slow"}, "spec": {
        "clusterIP": "None", "selector": {"app": "slow"}, "ports": [{"port": 8080}]}})
    cs = running(core, ns, "slow", ready=False)
    ip = status(core, ns, "slow")["podIP"]
    eps = eventually(lambda: core.read_namespaced_endpoints("slow", ns).subsets, timeout=10)
    assert eps[0].addresses is None and [a.ip for a in eps[0].not_ready_addresses] == [ip]
    assert status(core, ns, "slow")["phase"] == "Running"
    ready = {c["type"]: c for c in status(core, ns, "slow")["conditions"]}["Ready"]
    assert ready["status"] == "False" and ready["reason"] == "ContainersNotReady"
    # a headless Service resolves to its ready endpoints only: none yet
    assert f"slow.{ns}.svc" not in (pods_dir / "hosts").read_text()
    delete_and_wait(core, ns, "slow", pid_of(cs))


# -- the ServiceAccount token, the in-cluster environment, the pod's directory ------------------

def test_service_account_token_and_in_cluster_env(cluster: str, core: k8s.CoreV1Api, ns: str,
                                                  pods_dir: Path) -> None:
    core.create_namespaced_pod(ns, server_pod("sa"))
    cs = running(core, ns, "sa")
    pid = pid_of(cs)
    env = environ(pid)
    host, port = cluster.removeprefix("http://").rsplit(":", 1)
    assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == (host, port)
    assert env["POD_IP"] == status(core, ns, "sa")["podIP"] and env["HOSTNAME"] == "sa"
    root = Path(env["YKSHM_ROOT"])
    pod_dir = root.parent.stat()  # root and the pod's own group (its uid's: simcluster/sandbox.py) only
    assert pods_dir in root.parents and (pod_dir.st_mode & 0o777, pod_dir.st_uid) == (0o750, 0)
    sa_dir = root / "var/run/secrets/kubernetes.io/serviceaccount"
    assert (sa_dir / "namespace").read_text() == ns
    assert (sa_dir / "ca.crt").read_text() == core.read_namespaced_config_map("kube-root-ca.crt", ns).data["ca.crt"]
    claims = podtoken.decode_claims((sa_dir / "token").read_text())
    assert claims["sub"] == f"system:serviceaccount:{ns}:default"
    assert claims["kubernetes.io"]["pod"] == {"name": "sa", "uid": core.read_namespaced_pod("sa", ns).metadata.uid}
    assert claims["exp"] > time.time() + 3000
    assert (sa_dir / "token").stat().st_mode & 0o777 == 0o600
    # the process talks to sim-cluster through KUBERNETES_SERVICE_HOST/PORT: it installs the CRDs here
    args = ["streams", "--api-server", "http://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)",
            "--install-crds", "--no-operators", "--repository", "off"]
    core.create_namespaced_pod(ns, pod("incluster", args))
    eventually(lambda: "streamspes.streams.ibm.com" in _crds(cluster), timeout=30)
    in_pid = pid_of(running(core, ns, "incluster"))
    delete_and_wait(core, ns, "incluster", in_pid)
    delete_and_wait(core, ns, "sa", pid)
    eventually(lambda: not root.parent.exists())


# -- probes and restarts ---------------------------------------------------------------------------

def test_a_quiet_process_pod_outlives_the_thread_that_spawned_it(core: k8s.CoreV1Api, ns: str) -> None:
    """PR_SET_PDEATHSIG follows the forking *thread*: pods forked from trio's worker threads were
    SIGKILLed (exit 137) when that thread idled out, 10 s after the start of a quiet cluster."""
    core.create_namespaced_pod(ns, server_pod("quiet"))
    first = running(core, ns, "quiet")
    time.sleep(12)  # past trio's 10 s thread-cache idle timeout: a real OS thread, no clock to mock
    now = container(core, ns, "quiet")
    assert now.get("restartCount", 0) == 0 and "running" in now["state"], now
    assert now["containerID"] == first["containerID"] and alive(pid_of(first))
    delete_and_wait(core, ns, "quiet", pid_of(first))


def test_liveness_probe_restarts_the_process(cluster: str, core: k8s.CoreV1Api, ns: str, tmp_path: Path) -> None:
    probe = {"httpGet": {"path": "/healthz", "port": 8181}, "periodSeconds": 1, "failureThreshold": 2}
    core.create_namespaced_pod(ns, server_pod("live", container={"livenessProbe": probe},
                                              terminationGracePeriodSeconds=5))
    first = running(core, ns, "live")
    restarted = eventually(lambda: (cs := container(core, ns, "live")).get("restartCount", 0) >= 1
                           and "running" in cs["state"] and cs, timeout=30)
    assert restarted["containerID"] != first["containerID"] and not alive(pid_of(first))
    assert restarted["lastState"]["terminated"]["containerID"] == first["containerID"]
    events = ok(kubectl(cluster, tmp_path, "get", "events", "-n", ns, "--field-selector",
                        "involvedObject.name=live"))
    assert "Liveness probe failed" in events and "failed liveness probe, will be restarted" in events
    delete_and_wait(core, ns, "live", pid_of(restarted))


def test_exit_code_annotation_fails_a_running_process_pod(cluster: str, core: k8s.CoreV1Api, ns: str,
                                                          tmp_path: Path) -> None:
    """`kubectl annotate pod P ykshm.io/exit-code=C` (README) on a process pod: its process is
    stopped and the run ends with C; restartPolicy Never leaves it Failed (a Streams PE pod),
    Always runs it once more (a crash, not a loop)."""
    core.create_namespaced_pod(ns, server_pod("fail-never", restartPolicy="Never", terminationGracePeriodSeconds=5))
    core.create_namespaced_pod(ns, server_pod("fail-always", terminationGracePeriodSeconds=5))
    never, always = running(core, ns, "fail-never"), running(core, ns, "fail-always")
    for name in ("fail-never", "fail-always"):
        ok(kubectl(cluster, tmp_path, "annotate", "pod", name, "-n", ns, "ykshm.io/exit-code=3"))
    eventually(lambda: status(core, ns, "fail-never")["phase"] == "Failed", timeout=20)
    term = container(core, ns, "fail-never")["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (3, "Error")
    assert not alive(pid_of(never))
    again = eventually(lambda: (cs := container(core, ns, "fail-always")).get("restartCount", 0) == 1
                       and "running" in cs["state"] and cs, timeout=30)
    assert again["lastState"]["terminated"]["exitCode"] == 3 and not alive(pid_of(always))
    core.delete_namespaced_pod("fail-never", ns)
    delete_and_wait(core, ns, "fail-always", pid_of(again))


def test_crashing_pod_goes_crash_loop_back_off(cluster: str, core: k8s.CoreV1Api, ns: str, tmp_path: Path) -> None:
    core.create_namespaced_pod(ns, pod("crash", ["nosuch"]))
    cs = eventually(lambda: (c := container(core, ns, "crash")).get("restartCount", 0) >= 1
                    and (c["state"].get("waiting") or {}).get("reason") == "CrashLoopBackOff" and c, timeout=30)
    assert "back-off" in cs["state"]["waiting"]["message"]
    last = cs["lastState"]["terminated"]
    assert (last["exitCode"], last["reason"]) == (2, "Error")
    assert "unknown command 'nosuch'" in last["message"]
    assert "CrashLoopBackOff" in ok(kubectl(cluster, tmp_path, "get", "pod", "crash", "-n", ns))
    assert status(core, ns, "crash")["phase"] == "Running"  # restartPolicy Always: it will run again
    previous = ok(kubectl(cluster, tmp_path, "logs", "crash", "-n", ns, "--previous"))
    assert previous == "ykshm: error: unknown command 'nosuch' (try ykshm --help)\n"
    events = ok(kubectl(cluster, tmp_path, "get", "events", "-n", ns, "--field-selector", "reason=BackOff"))
    assert "Back-off restarting failed container c in pod crash" in events
    core.delete_namespaced_pod("crash", ns)


def test_restart_policies_and_logs(cluster: str, core: k8s.CoreV1Api, ns: str, tmp_path: Path) -> None:
    core.create_namespaced_pod(ns, pod("never", ["nosuch"], restartPolicy="Never"))
    core.create_namespaced_pod(ns, pod("done", ["--help"], restartPolicy="OnFailure"))
    eventually(lambda: status(core, ns, "never")["phase"] == "Failed", timeout=20)
    eventually(lambda: status(core, ns, "done")["phase"] == "Succeeded", timeout=20)
    never, done = container(core, ns, "never"), container(core, ns, "done")
    assert never["restartCount"] == 0 and never["state"]["terminated"]["exitCode"] == 2
    assert done["state"]["terminated"]["reason"] == "Completed" and "message" not in done["state"]["terminated"]
    out = ok(kubectl(cluster, tmp_path, "logs", "done", "-n", ns))
    assert out.startswith("usage: ykshm <command>") and "sim-cluster" in out
    assert ok(kubectl(cluster, tmp_path, "logs", "done", "-n", ns, "--tail", "1")) == out.splitlines(True)[-1]
    assert ok(kubectl(cluster, tmp_path, "logs", "-f", "done", "-n", ns)) == out  # a finished run: at once
    bad = kubectl(cluster, tmp_path, "logs", "done", "-n", ns, "--previous")
    assert bad.returncode == 1 and 'previous terminated container "c" in pod "done" not found' in bad.stderr
    bad = kubectl(cluster, tmp_path, "logs", "done", "-n", ns, "-c", "other")
    assert bad.returncode == 1 and "container other is not valid for pod done" in bad.stderr


def test_logs_follow_ends_with_the_run(cluster: str, core: k8s.CoreV1Api, ns: str, tmp_path: Path) -> None:
    # no process pods of its own: as the pod's unprivileged uid it could not serve Service port 443
    core.create_namespaced_pod(ns, server_pod("follow", more_args=["--no-process-pods"]))
    pid = pid_of(running(core, ns, "follow"))
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "KUBECONFIG": "/dev/null"}
    follower = subprocess.Popen(["kubectl", "--server", cluster, "logs", "-f", "follow", "-n", ns, "-c", "c"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert follower.stdout is not None
        assert follower.stdout.readline().startswith("sim-cluster listening on http://127.")
        core.delete_namespaced_pod("follow", ns)
        assert follower.wait(timeout=15) == 0
        eventually(lambda: not alive(pid), timeout=10)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait(timeout=5)
        for stream in (follower.stdout, follower.stderr):
            if stream:
                stream.close()


# -- bad input --------------------------------------------------------------------------------------

def test_missing_secret_is_create_container_config_error_until_it_exists(core: k8s.CoreV1Api, ns: str) -> None:
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "later", "key": "token"}}}]
    core.create_namespaced_pod(ns, server_pod("waits", container={"env": env}))
    waiting = eventually(lambda: waiting_state(core, ns, "waits").get("message"), timeout=10)
    assert waiting == 'secret "later" not found'
    assert container(core, ns, "waits")["state"]["waiting"]["reason"] == "CreateContainerConfigError"
    assert status(core, ns, "waits")["phase"] == "Pending"
    core.create_namespaced_secret(ns, {"metadata": {"name": "later"}, "stringData": {"token": "t0k"}})
    pid = pid_of(running(core, ns, "waits"))
    assert environ(pid)["TOKEN"] == "t0k"
    delete_and_wait(core, ns, "waits", pid)


def test_log_of_a_waiting_container_is_a_400(cluster: str, core: k8s.CoreV1Api, ns: str, tmp_path: Path) -> None:
    volumes = [{"name": "v", "configMap": {"name": "absent"}}]
    core.create_namespaced_pod(ns, server_pod("nomount", volumes=volumes,
                                              container={"volumeMounts": [{"name": "v", "mountPath": "/etc/v"}]}))
    eventually(lambda: waiting_state(core, ns, "nomount").get("reason") == "ContainerCreating")
    events = eventually(lambda: [e for e in core.list_namespaced_event(ns).items if e.reason == "FailedMount"])
    assert 'configmap "absent" not found' in events[0].message and events[0].type == "Warning"
    out = kubectl(cluster, tmp_path, "logs", "nomount", "-n", ns)
    assert out.returncode == 1
    assert 'container "c" in pod "nomount" is waiting to start: ContainerCreating' in out.stderr
    core.create_namespaced_config_map(ns, {"metadata": {"name": "absent"}, "data": {"f": "here"}})
    pid = pid_of(running(core, ns, "nomount"))  # the mount is retried and then complete
    assert (Path(environ(pid)["YKSHM_ROOT"]) / "etc/v/f").read_text() == "here"
    delete_and_wait(core, ns, "nomount", pid)


def test_bad_process_image_flags_are_one_line_errors(tmp_path: Path) -> None:
    cases = [(["--process-image", "runtime:1"], "--process-image 'runtime:1': expected IMAGE=COMMAND"),
             (["--process-image", "runtime:1=/bin/sh -c x"], "command '/bin/sh -c x' must start with 'ykshm'"),
             (["--process-images", str(tmp_path / "none.yaml")], "--process-images"),
             (["--loopback-block", "7"], "--loopback-block must be 100..254, got 7")]
    for flags, message in cases:
        out = subprocess.run([*start_cmd(), *flags], capture_output=True, text=True, timeout=30)
        assert out.returncode == 2, out
        assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def start_cmd() -> list[str]:
    return [sys.executable, "-m", "tools.cli", "sim-cluster", "--port", "0"]


def test_a_mapped_image_runs_its_command(tmp_path: Path, pods_dir: Path) -> None:
    images = tmp_path / "images.yaml"
    images.write_text("streams-runtime:7: ykshm sim-cluster\n")
    proc, url = start_cluster("--nodes", "1", "--kubelet-delay", "0.05", "--process-images", str(images),
                              "--pods-dir", str(pods_dir / "mapped"))
    pid = None
    try:
        with k8s.ApiClient(k8s.Configuration(host=url)) as api_client:
            core = k8s.CoreV1Api(api_client)
            mapped = server_pod("mapped")
            mapped["spec"]["containers"][0].update(image="streams-runtime:7", args=["--bind", "$(POD_IP)",
                                                                                 "--port", "8080"])
            core.create_namespaced_pod("default", mapped)
            core.create_namespaced_pod("default", pod("sim", [], container={"image": "nginx:1"}))
            pid = pid_of(running(core, "default", "mapped"))
            ip = status(core, "default", "mapped")["podIP"]
            eventually(lambda: _readyz(f"http://{ip}:8080"), timeout=15)  # it serves on its pod address
            simulated = eventually(lambda: status(core, "default", "sim").get("phase") == "Running"
                                   and container(core, "default", "sim"))
            assert simulated["containerID"].startswith("sim://")  # other images stay simulated
    finally:
        stop_cluster(proc)
    # stopping sim-cluster stops its process pods and removes their directories
    assert pid is not None and not alive(pid) and not survivors(pods_dir / "mapped")
    assert not [p for p in (pods_dir / "mapped").iterdir() if p.is_dir()]


# -- the resolver every ykshm process uses --------------------------------------------------------

def test_podhosts_resolves_service_names_with_the_search_list(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("127.150.128.5 api.team.svc.cluster.local api.team.svc\n")
    table = podhosts.Hosts(str(hosts), "team.svc.cluster.local svc.cluster.local cluster.local".split())
    for name in ("api", "api.team", "api.team.svc", "api.team.svc.cluster.local", "API.team.svc.cluster.local."):
        assert table.lookup(name) == "127.150.128.5", name
    assert table.lookup("api.other") is None and table.lookup("example.com") is None
    time.sleep(0.01)
    hosts.write_text("127.150.128.9 api.team.svc.cluster.local\n")
    os.utime(hosts, (time.time() + 5, time.time() + 5))
    assert table.lookup("api") == "127.150.128.9"


# -- more of the kubelet's contract ---------------------------------------------------------------

def test_two_containers_one_simulated(cluster: str, core: k8s.CoreV1Api, ns: str, tmp_path: Path) -> None:
    two = server_pod("two")
    two["spec"]["containers"][0]["name"] = "srv"
    two["spec"]["containers"].append({"name": "side", "image": "nginx:1"})
    core.create_namespaced_pod(ns, two)
    eventually(lambda: all(c.get("ready") for c in status(core, ns, "two").get("containerStatuses") or [{}]),
               timeout=15)
    assert "2/2" in ok(kubectl(cluster, tmp_path, "get", "pod", "two", "-n", ns))
    with pytest.raises(ApiException) as err:  # the API wants a container; kubectl picks the first itself
        core.read_namespaced_pod_log("two", ns)
    assert err.value.status == 400
    assert json.loads(err.value.body)["message"] == ("a container name must be specified for pod two, "
                                                     "choose one of: [srv side]")
    assert ok(kubectl(cluster, tmp_path, "logs", "two", "-n", ns, "-c", "side")) == ""
    eventually(lambda: "sim-cluster listening" in ok(kubectl(cluster, tmp_path, "logs", "two", "-n", ns)))
    delete_and_wait(core, ns, "two", pid_of(status(core, ns, "two")["containerStatuses"][0]))


def test_startup_probe_gates_and_restarts(cluster: str, core: k8s.CoreV1Api, ns: str, tmp_path: Path) -> None:
    good = {"tcpSocket": {"port": "web"}, "periodSeconds": 1, "failureThreshold": 10}
    bad = {"tcpSocket": {"port": 8999}, "periodSeconds": 1, "failureThreshold": 2}
    core.create_namespaced_pod(ns, server_pod("gated", container={"startupProbe": good}))
    core.create_namespaced_pod(ns, server_pod("never-up", container={"startupProbe": bad}))
    gated = running(core, ns, "gated")
    assert gated["started"] is True and gated["restartCount"] == 0
    failed = eventually(lambda: container(core, ns, "never-up").get("restartCount", 0) >= 1, timeout=20)
    assert failed
    events = ok(kubectl(cluster, tmp_path, "get", "events", "-n", ns, "--field-selector", "reason=Killing"))
    assert "Container c failed startup probe, will be restarted" in events
    delete_and_wait(core, ns, "gated", pid_of(gated))
    core.delete_namespaced_pod("never-up", ns)


def test_exec_probes_sim_cluster_answers_itself(core: k8s.CoreV1Api, ns: str) -> None:
    token = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    probes = {"livenessProbe": {"exec": {"command": ["/bin/true"]}, "periodSeconds": 1, "failureThreshold": 1},
              "readinessProbe": {"exec": {"command": ["test", "-f", token]}, "periodSeconds": 1}}
    core.create_namespaced_pod(ns, server_pod("execs", container=probes))
    core.create_namespaced_pod(ns, server_pod("nofile", container={"readinessProbe": {
        "exec": {"command": ["cat", "/etc/absent"]}, "periodSeconds": 1, "failureThreshold": 1}}))
    pid = pid_of(running(core, ns, "execs"))
    other = pid_of(running(core, ns, "nofile", ready=False))
    events = eventually(lambda: [e.message for e in core.list_namespaced_event(ns).items if e.reason == "Unhealthy"])
    assert events[0].startswith("Readiness probe failed: command ['cat', '/etc/absent'] exited with 1")
    time.sleep(2.5)  # three liveness periods: /bin/true keeps passing
    cs = container(core, ns, "execs")
    assert cs["restartCount"] == 0 and cs["ready"] and not container(core, ns, "nofile")["ready"]
    delete_and_wait(core, ns, "execs", pid)
    delete_and_wait(core, ns, "nofile", other)


def test_deleting_a_service_takes_its_endpoints_name_and_address(core: k8s.CoreV1Api, ns: str,
                                                                 pods_dir: Path) -> None:
    core.create_namespaced_pod(ns, server_pod("web", labels={"app": "web"}))
    core.create_namespaced_service(ns, {"metadata": {"name": "web"}, "spec": {
        "selector": {"app": "web"}, "ports": [{"port": 9090, "targetPort": 8080}]}})
    core.create_namespaced_service(ns, {"metadata": {"name": "web-headless"}, "spec": {
        "clusterIP": "None", "selector": {"app": "web"}, "ports": [{"port": 8080}]}})
    pid = pid_of(running(core, ns, "web"))
    pod_ip = status(core, ns, "web")["podIP"]
    hosts = pods_dir / "hosts"
    line = eventually(lambda: [ln for ln in hosts.read_text().splitlines() if f" web.{ns}.svc.cluster.local" in ln])
    address = line[0].split()[0]
    assert address.startswith("127.") and address != pod_ip
    eventually(lambda: f"{pod_ip} web-headless.{ns}.svc.cluster.local" in hosts.read_text())
    eventually(lambda: _readyz(f"http://{address}:9090"), timeout=10)  # the ClusterIP proxies to the pod
    core.delete_namespaced_service("web", ns)
    eventually(lambda: f"web.{ns}.svc" not in hosts.read_text())
    eventually(lambda: not _connects(address, 9090))
    assert [e.metadata.name for e in core.list_namespaced_endpoints(ns).items] == ["web-headless"]
    eventually(lambda: [s.metadata.labels["kubernetes.io/service-name"] for s in k8s.DiscoveryV1Api(
        core.api_client).list_namespaced_endpoint_slice(ns).items] == ["web-headless"])
    delete_and_wait(core, ns, "web", pid)
    eventually(lambda: not core.read_namespaced_endpoints("web-headless", ns).subsets)


def test_a_pod_relabelled_out_of_a_selector_leaves_the_services_endpoints(core: k8s.CoreV1Api, ns: str) -> None:
    """A pod change re-computes only the Services selecting the pod before or after it: one that
    stops matching still leaves its Service, one that starts matching joins it."""
    core.create_namespaced_service(ns, {"metadata": {"name": "shop"}, "spec": {
        "clusterIP": "None", "selector": {"app": "shop"}, "ports": [{"port": 8080}]}})
    core.create_namespaced_pod(ns, server_pod("seller", labels={"app": "shop"}))
    pid = pid_of(running(core, ns, "seller"))

    def addresses() -> list[str]:
        subsets = core.read_namespaced_endpoints("shop", ns).subsets or []
        return [a.ip for s in subsets for a in s.addresses or []]

    pod_ip = status(core, ns, "seller")["podIP"]
    eventually(lambda: addresses() == [pod_ip])
    core.patch_namespaced_pod("seller", ns, {"metadata": {"labels": {"app": "other"}}})
    eventually(lambda: addresses() == [])
    core.patch_namespaced_pod("seller", ns, {"metadata": {"labels": {"app": "shop"}}})
    eventually(lambda: addresses() == [pod_ip])
    delete_and_wait(core, ns, "seller", pid)


def _connects(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


def test_env_sources_and_volumes(core: k8s.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}, "data": {"LEVEL": "debug", "a.yaml": "x: 1\n"}})
    env = [{"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
           {"name": "GREETING", "value": "$(APP)-$(LEVEL)-$$(APP)-$(NOPE)"},
           {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
           {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
           {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k", "optional": True}}},
           {"name": "CONF", "value": "/etc/conf/a.yaml"}]
    volumes = [{"name": "conf", "projected": {"sources": [
        {"configMap": {"name": "cm", "items": [{"key": "a.yaml", "path": "a.yaml"}]}},
        {"downwardAPI": {"items": [{"path": "labels/app", "fieldRef": {"fieldPath": "metadata.labels['app']"}}]}},
        {"serviceAccountToken": {"path": "tok", "audience": "vault", "expirationSeconds": 600}}]}},
        {"name": "scratch", "emptyDir": {}}]
    spec = server_pod("envs", labels={"app": "shop"}, volumes=volumes, container={
        "env": env, "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "resources": {"requests": {"cpu": "250m"}, "limits": {"memory": "64Mi"}},
        "volumeMounts": [{"name": "conf", "mountPath": "/etc/conf"}, {"name": "scratch", "mountPath": "/scratch"}]})
    core.create_namespaced_pod(ns, spec)
    pid = pid_of(running(core, ns, "envs"))
    got = environ(pid)
    assert got["APP"] == "shop" and got["GREETING"] == "shop-$(LEVEL)-$(APP)-$(NOPE)"
    assert (got["MEM"], got["CPU"], got["CM_LEVEL"]) == ("64", "250", "debug") and "OPT" not in got
    root = Path(got["YKSHM_ROOT"])
    assert got["CONF"] == f"{root}/etc/conf/a.yaml" and Path(got["CONF"]).read_text() == "x: 1\n"
    assert (root / "etc/conf/labels/app").read_text() == "shop"
    assert podtoken.decode_claims((root / "etc/conf/tok").read_text())["aud"] == ["vault"]
    assert (root / "scratch").is_dir()
    assert (root / "scratch").stat().st_mode & 0o777 == 0o777     # the kubelet's emptyDir mode
    delete_and_wait(core, ns, "envs", pid)


async def test_a_process_ignoring_sigterm_is_killed_after_the_grace_period() -> None:
    """What deleting a pod does to a run that will not stop: SIGTERM, the grace period, SIGKILL."""
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); "
            "time.sleep(60)")
    proc = await trio.lowlevel.open_process([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                            start_new_session=True)
    try:
        assert proc.stdout is not None
        seen = b""
        while b"\n" not in seen:
            seen += await proc.stdout.receive_some(16)
        assert seen == b"up\n"
        started = trio.current_time()
        await procpods.terminate(proc, 0.5)
        assert proc.returncode == -9 and trio.current_time() - started >= 0.5
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await proc.stdout.aclose()


def test_a_service_without_selector_uses_the_users_endpoints(cluster: str, core: k8s.CoreV1Api, ns: str,
                                                             pods_dir: Path, tmp_path: Path) -> None:
    core.create_namespaced_pod(ns, server_pod("backend"))
    pid = pid_of(running(core, ns, "backend"))
    ip = status(core, ns, "backend")["podIP"]
    manifest = tmp_path / "ext.yaml"
    manifest.write_text(f"apiVersion: v1\nkind: Service\nmetadata: {{name: ext, namespace: {ns}}}\n"
                        "spec: {ports: [{port: 7070, targetPort: 8080}]}\n---\n"
                        f"apiVersion: v1\nkind: Endpoints\nmetadata: {{name: ext, namespace: {ns}}}\n"
                        f"subsets: [{{adresses: [{{ip: {ip}}}], ports: [{{port: 8080}}]}}]\n")
    bad = kubectl(cluster, tmp_path, "apply", "-f", str(manifest))  # the real schema, strictly
    assert 'strict decoding error: unknown field "subsets[0].adresses"' in bad.stderr
    manifest.write_text(manifest.read_text().replace("adresses", "addresses"))
    ok(kubectl(cluster, tmp_path, "apply", "-f", str(manifest)))
    line = eventually(lambda: [ln for ln in (pods_dir / "hosts").read_text().splitlines()
                               if f" ext.{ns}.svc.cluster.local" in ln])
    eventually(lambda: _readyz(f"http://{line[0].split()[0]}:7070"), timeout=10)
    assert [a.ip for a in core.read_namespaced_endpoints("ext", ns).subsets[0].addresses] == [ip]  # left alone
    assert "FIELD: subsets <[]EndpointSubset>" in ok(kubectl(cluster, tmp_path, "explain", "endpoints.subsets"))
    delete_and_wait(core, ns, "backend", pid)
