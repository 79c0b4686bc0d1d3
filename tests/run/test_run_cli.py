"""`ykshm run` as a user meets it: banner, events at the URL, roles in `ps`, Ctrl-C, pre-flight errors.

Every test starts real processes on 127.0.0.1 with free ports under a unique `--name` and stops
them by pid (conftest.RunInstance); afterwards no /dev/shm/NAME* and no child pid may remain.
"""

from __future__ import annotations

import glob
import os
import re
import signal
import socket
import subprocess
import time

import httpx

from runharness import ROOT, RunInstance, alive, children, cmdline, free_port, pids_naming, ykshm

from common.runtimedir import runtime_dir
from tools.harness import wait_for


def run_cli(*args: str, timeout: float = 30) -> tuple[subprocess.CompletedProcess, float]:
    began = time.monotonic()
    res = subprocess.run([*ykshm(), "run", *args], cwd=ROOT, capture_output=True, text=True,
                         timeout=timeout)
    return res, time.monotonic() - began


def one_error_line(res: subprocess.CompletedProcess) -> str:
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ykshm run: error: "), res.stderr
    assert res.stdout == "", res.stdout
    return lines[0]


def test_banner_events_roles_then_sigint_leaves_nothing(make_run, ring_name, tmp_path):
    inst = make_run()
    banner = inst.banner
    # the URL and three example commands, each naming this instance's URL or name
    assert f"ykshm is running: {inst.url} " in banner, banner
    commands = [line.strip() for line in banner.splitlines() if line.startswith("  ")]
    assert len(commands) == 6, banner
    assert commands[0].startswith("curl") and f"{inst.url}/ws/v1/events/batch" in commands[0]
    assert commands[1].startswith("curl") and f"{inst.url}/ws/v1/events/stream" in commands[1]
    assert commands[2].endswith(f"ykshm ring stat --name {ring_name}")
    assert commands[3].endswith(f"ykshm status --name {ring_name}")
    url = re.search(r"ykshm is running: (\S+)", banner).group(1)

    # events at the printed URL within seconds
    def batch():
        r = httpx.get(f"{url}/ws/v1/events/batch?count=10", timeout=5)
        return r.status_code == 200 and r.json()["EventRecords"] and r.json()

    doc = wait_for(batch, 10, "events at the banner's URL")
    assert doc["EventRecords"][0]["id"] == doc["LowestID"]
    # every command works pasted as printed into the shell that started the run: the banner names
    # `ykshm` bare only when that shell's PATH finds it, else by its full path (README's set-up
    # installs it into .venv/bin without activating it; CI puts .venv/bin on PATH)
    run_path = dict(line.split("=", 1) for line in
                    open(f"/proc/{inst.pid}/environ").read().split("\0") if "=" in line)["PATH"]
    env = {"PATH": run_path, "HOME": str(tmp_path)}

    def paste(*lines: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", "\n".join(lines)], capture_output=True, text=True,
                              cwd=tmp_path, timeout=30, env=env)

    out = paste(commands[2])
    assert out.returncode == 0 and ring_name in out.stdout, out.stderr
    out = paste(commands[3])
    assert out.returncode == 0 and "engine" in out.stdout, out.stdout + out.stderr
    # kubectl with the admin kubeconfig, as printed and through the printed `export KUBECONFIG=`
    kubeconfig = re.fullmatch(r"kubectl --kubeconfig (\S+) get pods -A", commands[4]).group(1)
    assert commands[5] == f"export KUBECONFIG={kubeconfig}"
    assert kubeconfig == str(runtime_dir() / f"{ring_name}.kubeconfig")   # the same path every run
    assert os.stat(kubeconfig).st_mode & 0o077 == 0      # the admin's credentials: ours alone
    for out in (paste(commands[4]), paste(commands[5], "kubectl get pods -A")):
        assert out.returncode == 0 and out.stdout.split()[:2] == ["NAMESPACE", "NAME"] or \
            "No resources found" in out.stderr, out.stderr
    bundles = re.search(r"^Streams bundles \(--bundle-dir\): (\S+)$", banner, re.M).group(1)
    assert os.path.isfile(os.path.join(bundles, "demo.sab"))
    anonymous = httpx.get(f"https://127.0.0.1:{inst.api_port}/api/v1/pods", verify=False, timeout=5)
    assert anonymous.status_code == 401  # authentication is on

    # `ps` shows each role: one child per role, its cmdline `... ykshm <role> ...`
    roles = inst.roles()
    assert set(roles) == {"sim-cluster", "engine", "shim", "admission", "streams", "web"}, [
        cmdline(p) for p in children(inst.pid)]
    assert len(children(inst.pid)) == 6
    assert len(wait_for(lambda: len(w := inst.workers()) == 2 and w, 10, "2 web workers")) == 2
    inst.remember()
    for pid in inst.seen:
        assert alive(pid)

    # a second instance of the same name while this one is alive: exit 1, one line, no harm
    res, _ = run_cli("--port", str(free_port()), "--api-port", str(free_port()), "--name", ring_name,
                     "--admission-port", str(free_port()), "--nodes", "1", "--no-demo")
    assert res.returncode == 1
    assert f"an instance named '{ring_name}' is running" in one_error_line(res)
    assert inst.roles() == roles and inst.proc.poll() is None
    assert os.path.exists(f"/dev/shm/{ring_name}.events")      # the refused run removed nothing
    assert httpx.get(f"{url}/ws/v1/events/batch", timeout=5).status_code == 200

    # keep-alive connections open at Ctrl-C: the servers close them (TIME_WAIT on their ports)
    assert inst.web.get("/ws/v1/partitions").status_code == 200
    assert inst.api.get("/api/v1/nodes").status_code == 200

    # Ctrl-C: exit 0, every child gone, every segment, socket and status file removed
    sock_dir = re.search(r"--socket (\S+)/si\.sock", cmdline(roles["engine"])).group(1)
    assert os.path.exists(sock_dir)
    assert inst.stop(signal.SIGINT) == 0, inst.stderr()
    left = inst.leftovers()
    assert left == {"shm": [], "pids": [], "status_file": False}, left
    assert not pids_naming(ring_name)
    assert not os.path.exists(sock_dir)
    assert not os.path.exists(kubeconfig)

    # started again at once on the same ports and name (as after Ctrl-C in a terminal): it runs
    again = make_run(ring_name, port=inst.port, api_port=inst.api_port, admission_port=inst.admission_port)
    assert f"ykshm is running: {inst.url} " in again.banner
    assert httpx.get(f"{inst.url}/ws/v1/partitions", timeout=5).status_code == 200
    assert again.stop(signal.SIGTERM) == 0, again.stderr()
    assert again.leftovers() == {"shm": [], "pids": [], "status_file": False}


def test_demo_runs_a_streams_job_whose_region_drains(make_run, ring_name):
    """The default demo: a Streams job with a consistent region, its PEs process pods running
    pe-sim and its operator a Deployment's pod; the region completes drains, and Ctrl-C leaves
    nothing (cr-operator and pe-sim included)."""
    inst = make_run(ring_name, extra=("--demo",))

    def pod_commands(selector: str) -> list[str]:
        pods = inst.api.get("/api/v1/namespaces/default/pods", params={"labelSelector": selector}).json()["items"]
        ids = [((p.get("status") or {}).get("containerStatuses") or [{}])[0].get("containerID", "") for p in pods]
        return [cmdline(int(i.removeprefix("process://"))) for i in ids if i.startswith("process://")]

    pes = wait_for(lambda: (c := pod_commands("streams.ibm.com/job=demo,svc=pe")) and len(c) == 3 and c, 60,
                   "the demo's three PE pods running as processes")
    assert all(" pe-sim " in f" {c} " for c in pes)
    operator = wait_for(lambda: pod_commands("streams.ibm.com/job=demo,svc=consistent-region-operator"), 60,
                        "the demo's cr-operator pod running")
    assert " cr-operator " in f" {operator[0]} "

    def drains() -> int:
        r = inst.api.get("/apis/streams.ibm.com/v1/namespaces/default/streamscrs/demo-0")
        return r.status_code == 200 and (r.json().get("status") or {}).get("lastCompletedSeqID", 0) >= 2

    wait_for(drains, 60, "the demo job's region completing two drains")
    job = inst.api.get("/apis/streams.ibm.com/v1/namespaces/default/streamsjobs/demo").json()
    assert job["status"]["phase"] == "Running" and job["status"]["peCount"] == 3

    # a user deletes the operator's Deployment and Role and the streams-api Service and Endpoints:
    # the controller makes each again (issue 33 item 3) and the region drains on
    paths = ["/apis/apps/v1/namespaces/default/deployments/demo-consistent-region-operator",
             "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles/demo-consistent-region-operator",
             "/api/v1/namespaces/default/services/streams-api", "/api/v1/namespaces/default/endpoints/streams-api"]
    seq = lambda: inst.api.get("/apis/streams.ibm.com/v1/namespaces/default/streamscrs/demo-0") \
        .json()["status"]["lastCompletedSeqID"]
    before = seq()
    for path in paths:      # the Endpoints may have gone with their Service already
        assert inst.api.delete(path).status_code in (200, 404)
    wait_for(lambda: all(inst.api.get(p).status_code == 200 for p in paths), 30,
             "the operator's Deployment and Role, streams-api's Service and Endpoints made again")
    wait_for(lambda: seq() >= before + 2, 90, "two more drains under the re-made operator")
    inst.remember()
    assert inst.stop(signal.SIGINT) == 0, inst.stderr()
    assert inst.leftovers() == {"shm": [], "pids": [], "status_file": False}


def test_port_in_use_is_one_line_exit_1_and_starts_nothing(ring_name):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        for args, what in ((["--port", str(port), "--api-port", str(free_port())], "REST"),
                           (["--port", str(free_port()), "--api-port", str(port)], "kube-apiserver"),
                           (["--port", str(free_port()), "--api-port", str(free_port()),
                             "--admission-port", str(port)], "admission controller")):
            res, took = run_cli(*args, "--name", ring_name, "--nodes", "1", "--no-demo")
            assert res.returncode == 1, res.stderr
            line = one_error_line(res)
            assert f"{what} port 127.0.0.1:{port} is not available" in line
            assert took < 10
            assert not pids_naming(ring_name)
            assert not (runtime_dir() / f"{ring_name}.log").exists()
            assert glob.glob(f"/dev/shm/{ring_name}*") == []


def test_bad_config_is_the_engines_one_line_exit_2_quickly(tmp_path, ring_name):
    cases = {
        "service:\n  event:\n    maxStreams: lots\n": "service.event.maxStreams: invalid value 'lots'",
        "partitions: [\n": "not valid YAML",
        "service:\n  event:\n    trackingEventsEnabled: maybe\n":
            "service.event.trackingEventsEnabled: invalid value 'maybe'",
    }
    for text, message in cases.items():
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        # what the engine itself says about this file
        engine = subprocess.run([*ykshm(), "engine", "--config", str(bad), "--name", ring_name],
                                cwd=ROOT, capture_output=True, text=True, timeout=30)
        assert engine.returncode == 2
        engine_line = engine.stderr.strip().splitlines()[-1]
        assert engine_line.startswith("ykshm engine: error: ") and message in engine_line
        res, took = run_cli("--config", str(bad), "--port", str(free_port()), "--api-port",
                            str(free_port()), "--name", ring_name, "--no-demo")
        assert res.returncode == 2, res.stderr
        line = one_error_line(res)
        assert line.removeprefix("ykshm run: error: ") == engine_line.removeprefix(
            "ykshm engine: error: ")
        assert took < 10
        assert not pids_naming(ring_name)
    res, _ = run_cli("--config", str(tmp_path / "missing.yaml"), "--name", ring_name)
    assert res.returncode == 2 and "missing.yaml" in one_error_line(res)
    # a good file given with --config starts fine (the check refuses only what the engine refuses)
    good = tmp_path / "good.yaml"
    good.write_text("partitions:\n  - name: default\n    queues:\n      - name: root\n"
                    "service:\n  event:\n    ringBufferCapacity: 5000\n")
    inst = RunInstance(ring_name, nodes=1, extra=("--config", str(good)))
    try:
        inst.read_banner()
        r = httpx.get(f"{inst.url}/ws/v1/events/batch", timeout=5)
        assert r.status_code == 200 and r.json()["EventRecords"]
        assert inst.stop() == 0
        assert inst.leftovers() == {"shm": [], "pids": [], "status_file": False}
    finally:
        inst.close()
