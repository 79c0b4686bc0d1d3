"""Issue 31 item 3: sim-cluster's node half (`ykshm node-agent`, also `ykshm sim-cluster
--node-agent`) against the real kube-apiserver.

The agent runs inside the run's network namespace with the admin kubeconfig, registers two nodes
and keeps their Leases; ykshm's engine and shim (realsched.py) bind pods to those nodes; the agent
runs them as process pods (`ykshm sim-cluster` serving on the pod's own 10.244.1.x address,
`ykshm streams` as a client) and what a user sees is checked through kubectl against the real
API: Ready nodes, renewed Leases, Running pods with their podIP, `kubectl logs` (kube-apiserver
calls the agent's kubelet endpoint), a liveness probe's restart, deletion stopping the process
by pid, and a Service name resolved from a process pod. The agent and every process pod are
stopped by pid at the end.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from simcluster import podtoken
from tests.podsdir import reachable_pods_dir
from tests.realk8s.realplane import RealPlane, run_dir_processes
from tests.realk8s.realsched import RealScheduler, shim_kubeconfig
from tests.simcluster.test_simcluster_procpods import alive, environ, survivors
from tools import harness

NODES = ("agent-node-0", "agent-node-1")
IMAGE = "ykshm:0.1.0"
POD_CIDR = ipaddress.ip_network("10.244.1.0/24")


@pytest.fixture(scope="module")
def agent(plane: RealPlane, tmp_path_factory) -> Iterator[harness.Proc]:
    logs = tmp_path_factory.mktemp("agent-logs")
    with reachable_pods_dir() as pods_dir:
        proc = harness.Proc("node-agent", ["sim-cluster", "--node-agent", "--kubeconfig", plane.kubeconfig,
                                           "--client-ca-file", str(plane.pki.ca_crt), "--nodes", "2", "--node-cpu", "4", "--node-memory", "8Gi",
                                           "--node-lease-interval", "1", "--backoff-initial", "1",
                                           "--backoff-max", "4", "--pods-dir", str(pods_dir)],
                            str(logs), prefix=plane.enter())
        try:
            harness.wait_for(lambda: "node agent: 2 nodes Ready" in Path(proc.log_path).read_text()
                             or not proc.alive(), 60, "the node agent's ready line")
            assert proc.alive(), proc.tail()
            yield proc
        finally:
            code = proc.stop(signal.SIGTERM, timeout=30)
            left = survivors(pods_dir)
            log = Path(proc.log_path).read_text()
            print(log[-3000:])
        assert code == 0 and not left, f"agent exited {code}, process pods left: {left}"
        assert "Traceback" not in log


@pytest.fixture(scope="module")
def scheduler(plane: RealPlane, agent, tmp_path_factory) -> Iterator[RealScheduler]:
    real = RealScheduler(plane, "t-nodeagent", shim_kubeconfig(plane, tmp_path_factory.mktemp("shim")))
    try:
        real.cluster.start_engine()
        real.start_shim()
        yield real
    finally:
        real.cluster.close()


def server_pod(name: str, **container: Any) -> dict[str, Any]:
    """A pod for ykshm's scheduler running `ykshm sim-cluster` on its own address (POD_IP)."""
    body = harness.pod_body(name, app=f"app-{name}")
    c = body["spec"]["containers"][0]
    c.update(image=IMAGE, args=["sim-cluster", "--bind", "$(POD_IP)", "--port", "8181", "--no-process-pods"],
             env=[{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
             ports=[{"name": "web", "containerPort": 8181}], **container)
    body["spec"]["terminationGracePeriodSeconds"] = 5
    return body


def pod_json(plane: RealPlane, name: str) -> dict[str, Any]:
    return plane.kubectl_json("get", "pod", name)


def running(plane: RealPlane, name: str, timeout: float = 60) -> dict[str, Any]:
    def check():
        status = pod_json(plane, name).get("status") or {}
        cs = (status.get("containerStatuses") or [{}])[0]
        return status.get("phase") == "Running" and "running" in (cs.get("state") or {}) and cs.get("ready") \
            and {**cs, "podIP": status.get("podIP")}
    return plane.wait_for(f"pod {name} Running and ready", check, timeout)


def pid_of(cs: dict[str, Any]) -> int:
    assert cs["containerID"].startswith("process://"), cs
    return int(cs["containerID"].removeprefix("process://"))


def gone(plane: RealPlane, name: str) -> bool:
    return plane.kubectl("get", "pod", name, "--ignore-not-found", "-o", "name").stdout.strip() == ""


def get_inside(plane: RealPlane, url: str) -> str:
    """A plain HTTP GET from inside the run's namespace (where pod addresses live)."""
    code = ("import sys, urllib.request\ntry:\n    print(urllib.request.urlopen(sys.argv[1], timeout=3).read().decode())\n"
            "except OSError as e:\n    print('ERROR', e)")
    return plane.inside(sys.executable, "-c", code, url).stdout


def test_nodes_ready_with_leases_renewed(plane: RealPlane, agent) -> None:
    nodes = {n["metadata"]["name"]: n for n in plane.kubectl_json("get", "nodes")["items"]}
    assert set(NODES) <= set(nodes)
    for name in NODES:
        node = nodes[name]
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", node["status"]
        assert not any(t["key"] == "node.kubernetes.io/not-ready" for t in node["spec"].get("taints") or [])
        assert node["status"]["allocatable"]["cpu"] == "4"
    assert "Ready" in plane.kubectl("get", "nodes", *NODES).stdout

    def renew_times() -> dict[str, str]:
        leases = plane.kubectl_json("get", "leases", "-n", "kube-node-lease")["items"]
        return {lease["metadata"]["name"]: lease["spec"]["renewTime"] for lease in leases
                if lease["spec"].get("holderIdentity") in NODES}
    first = renew_times()
    assert set(first) == set(NODES)
    later = plane.wait_for("both leases renewed", lambda: (now := renew_times()) and
                           all(now[n] > first[n] for n in NODES) and now, timeout=20)
    stamp = dt.datetime.fromisoformat(later[NODES[0]].replace("Z", "+00:00"))
    assert (dt.datetime.now(dt.timezone.utc) - stamp).total_seconds() < 10  # fresh, 1 s interval


def test_a_pod_bound_by_ykshm_runs_as_a_process_with_logs_and_stops_on_delete(plane, scheduler) -> None:
    plane.apply_json(server_pod("web1", readinessProbe={"httpGet": {"path": "/readyz", "port": "web"},
                                                        "periodSeconds": 1}))
    node = scheduler.wait_bound(["web1"])["web1"]
    assert node in NODES                                      # ykshm's scheduler placed it
    t0 = time.monotonic()
    cs = running(plane, "web1")
    print(f"bound -> Running and ready in {time.monotonic() - t0:.1f}s")
    ip = cs["podIP"]
    assert ipaddress.ip_address(ip) in POD_CIDR
    pid = pid_of(cs)
    assert alive(pid) and environ(pid)["HOSTNAME"] == "web1"
    wide = plane.kubectl("get", "pod", "web1", "-o", "wide").stdout.splitlines()[1].split()
    assert "Running" in wide and ip in wide and node in wide
    # the process serves on its pod address: reachable inside the namespace
    assert get_inside(plane, f"http://{ip}:8181/readyz").strip() == "ok"
    # kubectl logs: kube-apiserver -> the agent's kubelet endpoint -> the process's log file
    logs = plane.kubectl("logs", "web1").stdout
    assert f"sim-cluster listening on http://{ip}:8181" in logs
    reasons = {e["reason"] for e in plane.kubectl_json("get", "events", "--field-selector",
                                                       "involvedObject.name=web1")["items"]}
    assert {"Pulled", "Created", "Started"} <= reasons, reasons

    t0 = time.monotonic()
    plane.kubectl("delete", "pod", "web1", "--wait=true", timeout=60)  # graceful: the agent confirms it
    print(f"delete confirmed in {time.monotonic() - t0:.1f}s")
    assert not alive(pid) and gone(plane, "web1")


KUBELET_CLIENT = """
import socket, ssl, sys
host, port, cert, key = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
ctx = ssl.create_default_context()
ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE   # the agent's own serving CA
if cert:
    ctx.load_cert_chain(cert, key)
try:
    with ctx.wrap_socket(socket.create_connection((host, port), timeout=10), server_hostname=host) as tls:
        tls.sendall(b"GET /containerLogs/default/web2/c HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n")
        data = b""
        while chunk := tls.recv(65536):
            data += chunk
        print(data.decode(errors="replace") or "refused: closed without an answer")
except (ssl.SSLError, OSError) as exc:
    print("refused:", type(exc).__name__)
"""


def test_the_kubelet_endpoint_answers_kube_apiserver_only(plane, scheduler, tmp_path) -> None:
    """The agent's kubelet endpoint reads process pods' logs: like a kubelet's, it takes the client
    certificate kube-apiserver shows (signed by the cluster's CA) and nobody else: a client
    without one, or with one of another CA, reaches nothing, while `kubectl logs` still works."""
    import trustme

    plane.apply_json(server_pod("web2"))
    scheduler.wait_bound(["web2"])
    running(plane, "web2")
    node = plane.kubectl_json("get", "node", NODES[0])
    host = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
    port = str(node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"])
    other = trustme.CA().issue_cert("kube-apiserver-kubelet-client")
    other_cert, other_key = tmp_path / "other.crt", tmp_path / "other.key"
    other.cert_chain_pems[0].write_to_path(str(other_cert))
    other.private_key_pem.write_to_path(str(other_key))
    ours = plane.pki.dir

    def ask(cert: str, key: str) -> str:
        return plane.inside(sys.executable, "-c", KUBELET_CLIENT, host, port, cert, key).stdout

    assert ask("", "").startswith("refused:")                                   # no certificate
    assert ask(str(other_cert), str(other_key)).startswith("refused:")          # another CA's
    answer = ask(str(ours / "kubelet-client.crt"), str(ours / "kubelet-client.key"))
    assert answer.startswith("HTTP/1.1 200") and "sim-cluster listening on" in answer, answer
    assert "sim-cluster listening on" in plane.kubectl("logs", "web2").stdout
    plane.kubectl("delete", "pod", "web2", "--wait=true", timeout=60)


def test_a_pod_of_another_image_is_simulated_running(plane, scheduler) -> None:
    """Not ykshm's image: simulated as sim-cluster's kubelet does, Running with an address that is
    neither the API server's nor a process pod's, and deleted at once."""
    plane.apply_json(harness.pod_body("pause1", app="app-pause"))
    assert scheduler.wait_bound(["pause1"])["pause1"] in NODES
    status = plane.wait_for("pause1 Running", lambda: (st := pod_json(plane, "pause1")["status"])
                            .get("phase") == "Running" and st, timeout=60)
    assert ipaddress.ip_address(status["podIP"]) in ipaddress.ip_network("10.244.128.0/17")
    assert status["containerStatuses"][0]["ready"] is True
    plane.kubectl("delete", "pod", "pause1", timeout=60)
    assert gone(plane, "pause1")


def test_failing_liveness_probe_restarts_the_process(plane, scheduler) -> None:
    probe = {"httpGet": {"path": "/healthz-missing", "port": 8181}, "periodSeconds": 1, "failureThreshold": 2}
    plane.apply_json(server_pod("live", livenessProbe=probe))
    scheduler.wait_bound(["live"])
    first = running(plane, "live")

    def restarted():
        cs = (pod_json(plane, "live")["status"].get("containerStatuses") or [{}])[0]
        return cs.get("restartCount", 0) >= 1 and "running" in (cs.get("state") or {}) and cs
    again = plane.wait_for("a restart after the liveness probe failed", restarted, timeout=60)
    assert again["containerID"] != first["containerID"] and not alive(pid_of(first))
    assert again["lastState"]["terminated"]["containerID"] == first["containerID"]
    assert "RESTARTS" in (out := plane.kubectl("get", "pod", "live").stdout) and out.splitlines()[1].split()[3] != "0"
    events = plane.kubectl("get", "events", "--field-selector", "involvedObject.name=live").stdout
    assert "Liveness probe failed" in events and "failed liveness probe, will be restarted" in events
    pid = pid_of(again)
    plane.kubectl("delete", "pod", "live", timeout=60)
    assert not alive(pid) and gone(plane, "live")


def test_a_service_name_resolves_from_a_process_pod(plane, scheduler) -> None:
    api = server_pod("api", readinessProbe={"httpGet": {"path": "/readyz", "port": "web"}, "periodSeconds": 1})
    api["metadata"]["labels"]["svc"] = "api"
    plane.apply_json(api)
    plane.apply_json({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "api", "namespace": "default"},
                      "spec": {"selector": {"svc": "api"},
                               "ports": [{"name": "http", "port": 80, "targetPort": "web"}]}})
    scheduler.wait_bound(["api"])
    ip = running(plane, "api")["podIP"]
    # the real endpoints controller lists the pod's address (a loopback one it would refuse)
    plane.wait_for("the Service's endpoints", lambda: ip in plane.kubectl("get", "endpoints", "api").stdout, 60)
    cluster_ip = plane.kubectl_json("get", "service", "api")["spec"]["clusterIP"]
    assert ipaddress.ip_address(cluster_ip) in ipaddress.ip_network("10.245.0.0/24")

    # another process pod reaches it by the short name `api`: it installs the Streams CRDs there
    client = harness.pod_body("client", app="app-client")
    client["spec"]["containers"][0].update(image=IMAGE, args=["streams", "--api-server", "http://api",
                                                              "--install-crds", "--no-operators"])
    plane.apply_json(client)
    scheduler.wait_bound(["client"])
    url = f"http://{ip}:8181/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    plane.wait_for("the CRDs installed through the Service name",
                   lambda: "streamsjobs.streams.ibm.com" in get_inside(plane, url), timeout=60)
    cs = (pod_json(plane, "client")["status"].get("containerStatuses") or [{}])[0]
    env = environ(pid_of(cs))
    assert env["API_SERVICE_HOST"] == cluster_ip and env["API_SERVICE_PORT"] == "80"
    assert env["YKSHM_DNS_SEARCH"].split()[0] == "default.svc.cluster.local"
    assert f"{cluster_ip} api.default.svc.cluster.local" in Path(env["YKSHM_HOSTS"]).read_text()
    # its ServiceAccount token is kube-apiserver's own (TokenRequest, bound to the pod): it authenticates
    sa_dir = Path(env["YKSHM_ROOT"]) / "var/run/secrets/kubernetes.io/serviceaccount"
    token = (sa_dir / "token").read_text()
    claims = podtoken.decode_claims(token)
    assert claims["sub"] == "system:serviceaccount:default:default"
    assert claims["kubernetes.io"]["pod"]["name"] == "client"
    assert plane.request("/api", token=token)[0] == 200
    assert plane.request("/api", token=token[:-4] + "AAAA")[0] == 401
    assert "BEGIN CERTIFICATE" in (sa_dir / "ca.crt").read_text()
    for name in ("client", "api"):
        plane.kubectl("delete", "pod", name, timeout=60)
    assert gone(plane, "api") and gone(plane, "client")


def test_bad_input_is_one_line(plane: RealPlane, tmp_path: Path) -> None:
    cases = [(["--kubeconfig", str(tmp_path / "missing")], 2),
             (["--kubeconfig", plane.kubeconfig, "--pod-cidr", "127.0.0.0/8"], 2),
             (["--kubeconfig", plane.kubeconfig, "--nodes", "0"], 2),
             (["--kubeconfig", plane.kubeconfig, "--client-ca-file", str(tmp_path / "no-ca.crt")], 2)]
    for args, code in cases:
        out = subprocess.run([*plane.enter(), sys.executable, "-m", "tools.cli", "node-agent", *args],
                             capture_output=True, text=True, timeout=60, env=harness_env())
        assert out.returncode == code and out.stderr.count("\n") == 1, (args, out.stderr)
        assert out.stderr.startswith("ykshm node-agent: error: ")
        assert "Traceback" not in out.stderr
    # an address it cannot bind (not in this namespace): the component named, nothing left running
    out = subprocess.run([*plane.enter(), sys.executable, "-m", "tools.cli", "node-agent", "--kubeconfig",
                          plane.kubeconfig, "--client-ca-file", str(plane.pki.ca_crt), "--node-ip", "192.0.2.7",
                          "--node-prefix", "never-"],
                         capture_output=True, text=True, timeout=60, env=harness_env())
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and "kubelet endpoint" in out.stderr, out.stderr
    assert "never-0" not in plane.kubectl("get", "nodes", "-o", "name").stdout


def harness_env() -> dict[str, str]:
    from tests.tools.ykcli import env
    return env()



def test_realk8s_run_with_nodes_runs_pods_then_leaves_nothing(tmp_path: Path) -> None:
    """`ykshm realk8s run --nodes 1 -- CMD`: the agent is up before CMD, a pod CMD creates runs
    (its log through kubectl), and the run stops agent, process pods and control plane by pid."""
    script = tmp_path / "cmd.sh"
    script.write_text("set -e\nkubectl get nodes agent-node-0 --no-headers\n"
                      # the ServiceAccount controller makes `default` a moment after the plane is ready
                      "for i in $(seq 100); do kubectl get sa default >/dev/null 2>&1 && break; sleep 0.2; done\n"
                      "kubectl run demo --image=ykshm:0.1.0 --overrides='{\"spec\":{\"nodeName\":\"agent-node-0\"}}' "
                      "-- sim-cluster --port 0 --no-process-pods\n"
                      "kubectl wait --for=condition=Ready pod/demo --timeout=60s\n"
                      "for i in $(seq 50); do kubectl logs demo | grep -q 'sim-cluster listening' && break; sleep 0.2; done\n"
                      "kubectl logs demo\n")
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "tools.cli", "realk8s", "run", "--nodes", "1", "--dir", str(tmp_path),
                          "--", "bash", str(script)], capture_output=True, text=True, timeout=300, env=harness_env())
    print(f"realk8s run --nodes 1 with one pod: {time.monotonic() - t0:.1f}s")
    assert out.returncode == 0, out.stderr
    assert "agent-node-0" in out.stdout and " Ready " in out.stdout
    assert "sim-cluster listening on http://127.0.0.1:" in out.stdout
    assert "1 nodes from the node agent" in out.stderr
    assert not run_dir_processes(str(tmp_path))            # nothing of the run is left
    assert [p.name for p in tmp_path.iterdir()] == [script.name]
