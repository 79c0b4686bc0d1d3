"""`ykshm run --real-k8s`: the same demo on the real control plane (issue 31 item 6).

The default stays sim-cluster. With `--real-k8s`, `ykshm run` first checks that the real control
plane is built (else one line naming `ykshm realk8s build`, exit 2), then becomes
`ykshm realk8s run -- ykshm run --real-k8s ...` (`outer`): etcd, kube-apiserver,
kube-controller-manager and kube-scheduler in a network namespace of their own, and this same command again inside
it, told by `INNER` that it is there (`inside`). Inside, everything `ykshm run` supervises is as
with sim-cluster except the cluster:

- no sim-cluster child: the API server is the real one (`KUBECONFIG`'s server); its PKI
  (`$YKSHM_REALK8S_DIR/pki`, the same layout as sim-cluster's) signs each role's client
  certificate (`run_identities`), and the roles' RBAC policy is applied with kubectl as the admin;
- the node agent (`ykshm node-agent`, nodeagent/) is the child that provides `--nodes` nodes
  (`node-0`, ...), running the Streams demo's PEs as `ykshm pe-sim` process pods and its
  consistent-region operator's pod;
- sim-cluster's generated demo apps are not there (sim-cluster's own workload generator makes
  them); the Streams demo job is.

Every address lives in the run's namespace: the banner prints the `nsenter` line that reaches the
web and the admission controller on its 127.0.0.1. Ctrl-C stops the inner `ykshm run` (its
children by pid), then the run stops the control plane.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

import yaml

from common.cliutil import Failure, UsageError
from tools import realk8s_build, run_identities

INNER = "YKSHM_RUN_REAL_K8S_INSIDE"


def is_inside() -> bool:
    return os.environ.get(INNER) == "1" and bool(os.environ.get("YKSHM_REALK8S_DIR"))


def outer(argv: Sequence[str], nodes: int) -> int:
    """Check the build, then run this command again inside `ykshm realk8s run`."""
    from tools import realk8s_cmd

    if nodes < 1:
        raise UsageError("--real-k8s needs --nodes 1 or more (the node agent's nodes run the demo's pods)")
    realk8s_build.require_built()
    os.environ[INNER] = "1"
    return realk8s_cmd.run(["--", sys.executable, "-m", "tools.cli", "run", *argv])


def server_of(kubeconfig: Path) -> str:
    return yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]


def credentials(runtime: Path):
    """The run's Credentials on the real control plane's PKI; the roles' policy applied."""
    from simcluster import pki

    from tools.run_cmd import Credentials

    made = pki.Pki(Path(os.environ["YKSHM_REALK8S_DIR"]) / "pki")
    admin = Path(os.environ["KUBECONFIG"])
    server = server_of(admin)
    policy = run_identities.write_policy(runtime / "ykshm-rbac.yaml")
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise Failure("--real-k8s applies the roles' RBAC with kubectl, which is not on PATH")
    done = subprocess.run([kubectl, "--kubeconfig", str(admin), "apply", "-f", str(policy)],
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise Failure(f"the roles' RBAC policy was refused: {done.stderr.strip().splitlines()[-1:]}")
    return Credentials(made.dir, admin, run_identities.write_kubeconfigs(made, server), policy), server


def node_agent_argv(ykshm: list[str], admin: Path, client_ca: Path, nodes: int, pods_dir: Path,
                    process_images: list[str]) -> list[str]:
    """The agent's kubelet endpoint takes kube-apiserver's client certificate (`client_ca`) only."""
    argv = [*ykshm, "node-agent", "--kubeconfig", str(admin), "--client-ca-file", str(client_ca),
            "--nodes", str(nodes), "--node-prefix", "node-", "--pods-dir", str(pods_dir)]
    for mapping in process_images:
        argv += ["--process-image", mapping]
    return argv


def streams_bind(args) -> list[str]:
    """The Streams controller's bundle API where PE pods reach it: the real kube-apiserver refuses a
    loopback address in its Endpoints, so the run's advertise address (on lo of its namespace)."""
    if not getattr(args, "real_k8s", False):
        return []
    host = urllib.parse.urlsplit(args.api_url).hostname
    return ["--api-bind", f"{host}:0"]


def enter_line() -> str:
    """How a shell outside reaches this namespace (the inner run's pid is in it)."""
    user = "" if os.getuid() == 0 else " -U --preserve-credentials"
    return f"nsenter -t {os.getpid()} -n{user}"
