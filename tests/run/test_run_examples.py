"""examples/ as the README uses them, against a real `ykshm run` (issue 35.3): a pod, a gang Job, a
queue configuration with a per-user limit and a Streams Job, each doing what the README says. kubectl
runs as a user would after pasting the banner's `export KUBECONFIG=...` line."""

from __future__ import annotations

import os
import re
import subprocess

import yaml

from runharness import ROOT

from tools.harness import wait_for

EXAMPLES = ROOT / "examples"


def test_the_readme_examples_do_what_it_says(make_run, tmp_path):
    inst = make_run(nodes=4, extra=("--config", str(EXAMPLES / "queues-user-limit.yaml")))
    export = re.search(r"^  export (KUBECONFIG=\S+)$", inst.banner, re.M).group(1)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "KUBECONFIG": export.partition("=")[2]}

    def kubectl(*args: str) -> str:
        out = subprocess.run(["kubectl", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, (args, out.stderr)
        return out.stdout

    def app(app_id: str) -> dict:
        r = inst.web.get(f"/ws/v1/partition/default/application/{app_id}")
        return r.json() if r.status_code == 200 else {}

    # a pod with schedulerName yunikorn gets scheduled
    kubectl("create", "-f", "examples/pod.yaml")
    inst.wait_bound(["sleep-1"], phase="Running")

    # one application per user in root.limited: alice's second waits until her first is gone
    kubectl("--as", "alice", "create", "-f", "examples/limited-apps.yaml")
    inst.wait_bound(["limited-1"], phase="Running")
    second = wait_for(lambda: (a := app("limited-app-2")) and a, 15, "limited-app-2 known to the engine")
    assert second["queueName"] == "root.limited" and second["user"] == "alice"
    assert second["applicationState"] == "Accepted", second
    assert not inst.placement()["limited-2"]
    kubectl("delete", "pod", "limited-1", "--wait=false")
    inst.wait_bound(["limited-2"], phase="Running")

    # a gang: placeholders for all 3 members first, each replaced by a real pod
    kubectl("create", "-f", "examples/gang-job.yaml")
    gang = wait_for(lambda: (a := app("gang-app")) and a.get("placeholderData") and
                    a["placeholderData"][0]["replaced"] == 3 and a, 60, "3 placeholders replaced")
    assert gang["placeholderData"][0]["taskGroupName"] == "workers"
    assert gang["placeholderData"][0]["count"] == 3    # was 4 in some runs: a terminating placeholder re-reported
    job_pods = [n for n in inst.placement() if n.startswith("gang-")]
    inst.wait_bound(job_pods, phase="Running")
    assert len(job_pods) == 3

    # a Streams Job of the bundle the banner's directory holds: Running with 3 PEs
    spec = yaml.safe_load((EXAMPLES / "streams-job.yaml").read_text())["spec"]
    bundles = re.search(r"^Streams bundles \(--bundle-dir\): (\S+)$", inst.banner, re.M).group(1)
    assert os.path.isfile(os.path.join(bundles, spec["bundle"]["file"]["path"]))
    kubectl("create", "-f", "examples/streams-job.yaml")
    job = wait_for(lambda: (r := inst.api.get("/apis/streams.ibm.com/v1/namespaces/default/streamsjobs/mine"))
                   .status_code == 200 and r.json().get("status", {}).get("phase") == "Running" and r.json(),
                   60, "Streams job mine Running")
    assert job["status"]["peCount"] == 3
    assert "mine" in kubectl("get", "stj")

    # README: `kubectl annotate pod P ykshm.io/exit-code=1` fails a PE pod (a process pod running
    # `ykshm pe-sim`); the controller relaunches the PE (newcomer-2 row 45: it was ignored)
    kubectl("annotate", "pod", "mine-0-1", "ykshm.io/exit-code=1")
    wait_for(lambda: (r := inst.api.get("/api/v1/namespaces/default/pods/mine-0-1")).status_code == 404
             or r.json()["status"]["phase"] == "Failed", 30, "mine-0-1 Failed")
    inst.wait_bound(["mine-0-2"], timeout=60, phase="Running")
    pe = inst.api.get("/apis/streams.ibm.com/v1/namespaces/default/streamspes/mine-0").json()
    assert pe["spec"]["launchCount"] == 2
