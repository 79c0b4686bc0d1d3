"""`ykshm run --manifests DIR`: ykshm deployed *into* the embedded cluster, as into a real one.

Instead of running engine, shim, admission, Streams controller and web as local children, the
supervisor runs only sim-cluster (HTTPS, RBAC, process pods, `--default-scheduler`) and applies the
kustomization DIR (`deploy/kubernetes`) with the admin kubeconfig, as a user would
(`kubectl apply -k DIR`); every role then runs as a process pod of `ykshm:VERSION` under its own
ServiceAccount. The API is reached through `yunikorn-service`'s address, read from sim-cluster's
hosts file of Service names (other programs cannot resolve them). The pods' directory is in
/dev/shm (the scheduler pod's emptyDir is `medium: Memory`) and short: the SI socket's path in it
must stay under the 108 bytes a Unix socket allows.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from common.cliutil import Failure, UsageError

SERVICE = "yunikorn-service.yunikorn.svc.cluster.local"
PORT = 9080


def check(manifests: str) -> Path:
    """The kustomization directory, and kubectl to apply it: one line and exit 2 / 1 otherwise."""
    path = Path(manifests)
    if not (path / "kustomization.yaml").is_file():
        raise UsageError(f"--manifests {manifests}: not a kustomization directory (no kustomization.yaml)")
    if shutil.which("kubectl") is None:
        raise Failure("--manifests needs kubectl on PATH (it applies the kustomization as a user would)")
    return path.resolve()


def pods_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="ykp-", dir="/dev/shm"))


def _kubectl(admin: Path, *args: str) -> None:
    out = subprocess.run(["kubectl", "--kubeconfig", str(admin), *args], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=180)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise Failure(f"kubectl {' '.join(args)} failed: {last}")


def apply(manifests: Path, admin: Path) -> None:
    """`kubectl apply -k DIR` as the admin, then every Deployment Available: the admission
    controller's readiness follows its webhooks' registration, so every pod a user creates after
    the banner is judged by it (and refused while it is down: failurePolicy Fail). A refusal is
    one line, kubectl's last."""
    _kubectl(admin, "apply", "-k", str(manifests))
    _kubectl(admin, "-n", "yunikorn", "wait", "--for=condition=Available", "deployment", "--all", "--timeout=150s")


def service_url(pods: Path) -> str | None:
    """http://ADDRESS:9080 of `yunikorn-service` once sim-cluster serves it, else None."""
    try:
        lines = (pods / "hosts").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        words = line.split()
        if len(words) > 1 and SERVICE in words[1:]:
            return f"http://{words[0]}:{PORT}"
    return None


def wait_web(pods: Path, deadline: float, http_get, stopping) -> str | None:
    """The web's URL once `/ws/v1/partitions` answers through the Service, or None."""
    while time.monotonic() < deadline and not stopping():
        url = service_url(pods)
        if url is not None and http_get(f"{url}/ws/v1/partitions") is not None:
            return url
        time.sleep(0.25)
    return None


def banner(url: str, api_port: int, log_path: Path, admin: Path) -> str:
    return (
        f"ykshm is running: {url}  (deployed with kubectl apply -k; kube-apiserver: "
        f"https://127.0.0.1:{api_port}, logs: {log_path})\n"
        f"  curl -s '{url}/ws/v1/events/batch?count=10'\n"
        f"  curl -sN '{url}/ws/v1/events/stream?count=5'\n"
        f"  kubectl --kubeconfig {admin} -n yunikorn get pods\n"
        f"  kubectl --kubeconfig {admin} get pods -A\n"
        "Ctrl-C stops everything.\n"
    )


__all__ = ["apply", "banner", "check", "pods_dir", "service_url", "wait_web"]
