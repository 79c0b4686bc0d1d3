"""Issue 31 item 6: `ykshm run --real-k8s`, the demo on the real control plane, the node agent
providing the nodes (the default stays sim-cluster).

One `ykshm run --real-k8s --nodes 2` as a user starts it; what the user then sees, through the
banner's nsenter line and kubeconfig: two Ready nodes from the node agent, the Streams demo job
Running with its PEs as process pods placed by ykshm on those nodes, its consistent region
draining through the operator's pod, and ykshm's web answering about the two nodes. SIGTERM by pid
stops everything: exit 0, no process, no /dev/shm segment left.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.realk8s.realplane import require_binaries, run_dir_processes
from tests.tools.ykcli import env as ykshm_env
from tools import harness

GET = ("import sys, urllib.request\ntry:\n    print(urllib.request.urlopen(sys.argv[1], timeout=3).read().decode())\n"
       "except OSError as e:\n    print('ERROR', e)")


def test_ykshm_run_real_k8s_runs_the_demo_and_stops_clean(tmp_path: Path, ring_name: str) -> None:
    require_binaries()
    out_path = tmp_path / "run.out"
    with open(out_path, "wb") as out, open(tmp_path / "run.err", "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "tools.cli", "run", "--real-k8s", "--nodes", "2",
                                 "--name", ring_name], stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                env=ykshm_env(), cwd=harness.ROOT)
    t0 = time.monotonic()
    try:
        banner = harness.wait_for(lambda: (text := out_path.read_text()) and "Real control plane" in text and text
                                  or (proc.poll() is not None and (tmp_path / "run.err").read_text()),
                                  240, "the banner of ykshm run --real-k8s")
        assert "Real control plane" in banner, banner
        print(f"ykshm run --real-k8s: banner after {time.monotonic() - t0:.1f}s")
        enter = re.search(r"(nsenter -t \d+ -n[^-]*)-- CMD", banner).group(1).split()
        kubeconfig = re.search(r"export KUBECONFIG=(\S+)", banner).group(1)

        def kubectl_json(*args: str) -> dict:
            done = subprocess.run([*enter, "kubectl", "--kubeconfig", kubeconfig, *args, "-o", "json"],
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            return json.loads(done.stdout)

        nodes = kubectl_json("get", "nodes")["items"]
        assert sorted(n["metadata"]["name"] for n in nodes) == ["node-0", "node-1"]
        assert all(c["status"] == "True" for n in nodes for c in n["status"]["conditions"] if c["type"] == "Ready")

        def pes_running():
            pods = [p for p in kubectl_json("get", "pods")["items"] if p["metadata"]["name"].startswith("demo-")]
            pes = [p for p in pods if "operator" not in p["metadata"]["name"]]
            return len(pes) == 3 and all(p["status"].get("phase") == "Running" for p in pods) and pods
        pods = harness.wait_for(pes_running, 120, "the demo's PEs and operator Running")
        for pod in pods:
            assert pod["spec"]["nodeName"] in ("node-0", "node-1")
            assert pod["spec"]["schedulerName"] == "yunikorn"
            assert pod["status"]["podIP"].startswith("10.244.1.")
            assert pod["status"]["containerStatuses"][0]["containerID"].startswith("process://")
        # Running once every PE has reported full connectivity, a moment after the pods run
        harness.wait_for(lambda: kubectl_json("get", "streamsjobs", "demo")["status"]["phase"] == "Running",
                         60, "the demo job Running")

        def drained():
            status = kubectl_json("get", "stcr")["items"][0].get("status") or {}
            return status.get("lastCompletedSeqID", -1) >= 2 and status
        harness.wait_for(drained, 90, "the consistent region draining twice")

        web = subprocess.run([*enter, sys.executable, "-c", GET, "http://127.0.0.1:9080/ws/v1/partitions"],
                             capture_output=True, text=True, timeout=30).stdout
        assert json.loads(web)[0]["totalNodes"] == 2
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(90)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        print((tmp_path / "run.err").read_text()[-2000:])
    assert code == 0
    assert not [p.pid for p in run_dir_processes(ring_name)]        # every child stopped by pid
    assert not list(Path("/dev/shm").glob(f"{ring_name}*"))


def test_real_k8s_without_nodes_is_one_line() -> None:
    done = subprocess.run([sys.executable, "-m", "tools.cli", "run", "--real-k8s", "--nodes", "0", "--name", "t-x"],
                          capture_output=True, text=True, timeout=60, env=ykshm_env(), cwd=harness.ROOT)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "--real-k8s needs --nodes 1 or more" in done.stderr
