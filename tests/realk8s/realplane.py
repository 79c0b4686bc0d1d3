"""A real control plane for tests, started by `ykshm realk8s run` itself (the code users run), and
reached inside the run's network namespace with `nsenter`.

The run's CMD is HOLD: it writes where it is (its pid, so `nsenter -t PID -n` joins the namespace;
KUBECONFIG; the run's private directory) and waits for its stdin to close. Closing it ends CMD
with 0, which ends the run: the test then checks the exit code and that nothing of the run is left.
The binaries must be built (`ykshm realk8s build`, which `.ci/run` does): a missing build fails
the test with that command, it is never skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import yaml

from simcluster import pki

from tests.tools.ykcli import env as ykshm_env
from tests.tools.ykcli import spawn, stop
from tools import harness, realk8s_build

START_TIMEOUT = 300.0
# A request from inside the run's namespace: prints the HTTP status and the body.
REQUEST = textwrap.dedent("""
    import ssl, sys, urllib.request, urllib.error
    url, ca, cert, key, token = sys.argv[1:6]
    ctx = ssl.create_default_context(cafile=ca)
    if cert:
        ctx.load_cert_chain(cert, key)
    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + token} if token else {})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            print(resp.status); print(resp.read().decode())
    except urllib.error.HTTPError as err:
        print(err.code); print(err.read().decode())
""")
HOLD = """
import json, os, sys
info = {"pid": os.getpid(), "kubeconfig": os.environ["KUBECONFIG"], "dir": os.environ["YKSHM_REALK8S_DIR"]}
with open(sys.argv[1] + ".part", "w") as f:
    json.dump(info, f)
os.rename(sys.argv[1] + ".part", sys.argv[1])
sys.stdin.read()
"""


def require_binaries() -> Path:
    built = realk8s_build.built()
    assert built is not None, (f"the real control plane is not built ({realk8s_build.bin_dir()}): "
                               f"run `{realk8s_build.BUILD_COMMAND}` (.ci/run does) before these tests")
    return built


def run_dir_processes(directory: str) -> list[psutil.Process]:
    """Live processes whose command line names the run's directory (every component's does)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(directory in arg for arg in proc.info["cmdline"] or ()):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


@dataclass
class RealPlane:
    """A running `ykshm realk8s run -- HOLD` and the ways in."""

    proc: subprocess.Popen
    pid: int
    kubeconfig: str
    dir: str

    @property
    def pki(self) -> pki.Pki:
        """The run's PKI (its CA signs a test's users)."""
        return pki.Pki(Path(self.dir) / "pki")

    @property
    def server(self) -> str:
        """kube-apiserver's URL, from the admin kubeconfig (an address in the run's namespace)."""
        return yaml.safe_load(Path(self.kubeconfig).read_text())["clusters"][0]["cluster"]["server"]

    def enter(self) -> list[str]:
        """The nsenter prefix that runs a command in the run's network namespace."""
        user = [] if os.getuid() == 0 else ["-U", "--preserve-credentials"]
        return ["nsenter", "-t", str(self.pid), "-n", *user]

    def inside(self, *argv: str, kubeconfig: str | None = None, timeout: float = 60,
               check: bool = True) -> subprocess.CompletedProcess:
        env = dict(ykshm_env(), KUBECONFIG=kubeconfig or self.kubeconfig)
        done = subprocess.run([*self.enter(), *argv], capture_output=True, text=True, env=env, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"{argv} exited {done.returncode}: {done.stderr.strip()}")
        return done

    def request(self, path: str, cert: tuple[str, str] = ("", ""), token: str = "") -> tuple[int, dict]:
        """(HTTP status, decoded body) of a GET of `path` from inside the namespace, with a client
        certificate (cert, key), a bearer token, or no credentials."""
        done = self.inside(sys.executable, "-c", REQUEST, self.server + path, str(self.pki.ca_crt), *cert, token)
        status, _, body = done.stdout.partition("\n")
        return int(status), json.loads(body)

    def apply_json(self, obj: dict, verb: str = "create") -> None:
        """`kubectl create -f` (or apply) of one object, through a file in the run's directory."""
        path = Path(self.dir) / f"obj-{time.monotonic_ns()}.json"
        path.write_text(json.dumps(obj))
        self.kubectl(verb, "-f", str(path))

    def register_node(self, name: str, resources: dict[str, str]) -> None:
        """A Node as a kubelet registers it: the object, then Ready through the status
        sub-resource; and the `node.kubernetes.io/not-ready` taint the real TaintNodesByCondition
        admission plugin puts on every new node lifted, as the node lifecycle controller would
        (the run does not start one; `ykshm node-agent` lifts it for its own nodes)."""
        self.apply_json({"apiVersion": "v1", "kind": "Node",
                         "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                         "status": {"capacity": resources, "allocatable": resources}})
        ready = {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                            "message": "registered by the test"}]}}
        self.kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps(ready))
        self.kubectl("taint", "node", name, "node.kubernetes.io/not-ready:NoSchedule-")

    def kubectl(self, *args: str, **kwargs) -> subprocess.CompletedProcess:
        return self.inside("kubectl", *args, **kwargs)

    def kubectl_json(self, *args: str) -> dict:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def wait_for(self, what: str, probe, timeout: float = 90) -> object:
        """Poll `probe()` (a kubectl read) until it returns something truthy: the controller
        manager acts asynchronously and a real cluster has no event to wait on from outside."""
        return harness.wait_for(probe, timeout, what, interval=0.5)

    def finish(self) -> int:
        """Close HOLD's stdin: CMD ends with 0, the run stops everything; its exit code."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(60)


def start(tmp: Path, *options: str) -> RealPlane:
    require_binaries()
    info = tmp / "hold.json"
    with open(tmp / "run.stderr", "wb") as stderr:   # the child keeps its own copy of the fd
        proc = spawn("realk8s", "run", "--dir", str(tmp), *options, "--", sys.executable, "-c", HOLD, str(info),
                     stdin=subprocess.PIPE, stderr=stderr)
    deadline = time.monotonic() + START_TIMEOUT
    while not info.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            raise AssertionError(f"ykshm realk8s run did not start: {(tmp / 'run.stderr').read_text()}")
        time.sleep(0.2)
    data = json.loads(info.read_text())
    return RealPlane(proc, data["pid"], data["kubeconfig"], data["dir"])


@contextlib.contextmanager
def running(tmp: Path) -> Iterator[RealPlane]:
    """A started plane; afterwards the run must have exited 0 leaving no process and no directory."""
    plane = start(tmp)
    try:
        yield plane
    finally:
        code = plane.finish()
        left = run_dir_processes(plane.dir)
        assert code == 0 and not left, f"the run exited {code}, left {left}"
        assert not Path(plane.dir).exists()  # the private directory went with the run
