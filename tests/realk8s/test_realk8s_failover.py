"""Issue 36 on the real control plane: two scheduler replicas (engine + `ykshm shim
--leader-elect` each, under the shim's identity and RBAC from `ykshm run`) share the real Lease
`yunikorn/yunikorn-scheduler` of kube-apiserver. A SIGKILLed leader is replaced at once with
client-go's timings (the lifeline, kube/lifeline.py); a SIGSTOPped one is waited out, and when it
wakes it finds the Lease gone, writes nothing and exits; one cut from kube-apiserver (its
connections through a cut proxy inside the plane's namespace, `python -m tools.cutproxy`) stops
writing at its renew deadline, exits, and the standby takes over. Every pod is bound once (the real
apiserver refuses a second binding with 409, which the shims would log), and no 403 appears:
the Role grants the Lease's create, get, update and watch."""

from __future__ import annotations

import datetime as dt
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from common.shimstatus import read_status
from tests.realk8s.realsched import RealScheduler, shim_kubeconfig
from tests.tools.ykcli import env as ykshm_env
from tools import harness, run_identities

NODES = ("fo-node-1", "fo-node-2")
LEASE = ("get", "lease", "yunikorn-scheduler", "-n", run_identities.SCHEDULER_NAMESPACE)


@pytest.fixture(scope="module")
def nodes(plane, tmp_path_factory):
    """The nodes, and the shim's Role in `yunikorn` (its Lease) as `ykshm run` makes it."""
    for name in NODES:
        plane.register_node(name, {"cpu": "8", "memory": "16Gi", "pods": "110"})
    plane.kubectl("create", "namespace", run_identities.SCHEDULER_NAMESPACE, check=False)
    path = tmp_path_factory.mktemp("lease-rbac") / "namespaced.yaml"
    path.write_text(yaml.safe_dump_all(run_identities.namespaced_documents(), sort_keys=False))
    plane.kubectl("apply", "-f", str(path))
    return NODES


class Replica:
    """Engine + shim (a candidate of the Lease) of instance `name`, the shim in the plane."""

    def __init__(self, plane, name: str, kubeconfig: Path, identity: str,
                 timings: tuple[float, float, float]) -> None:
        self.real = RealScheduler(plane, name, kubeconfig)
        c = self.real.cluster
        c.start_engine()
        Path(c.status_file).unlink(missing_ok=True)
        lease, renew, retry = timings
        c.shim = harness.Proc("shim", [
            "shim", "--kubeconfig", str(kubeconfig), "--name", name, "--socket", c.socket,
            "--namespace", run_identities.SCHEDULER_NAMESPACE, "--leader-elect",
            "--leader-elect-identity", identity, "--leader-elect-lease-duration", f"{lease:g}",
            "--leader-elect-renew-deadline", f"{renew:g}", "--leader-elect-retry-period", f"{retry:g}"],
            c.log_dir, prefix=plane.enter())

    @property
    def shim(self) -> harness.Proc:
        assert self.real.cluster.shim is not None
        return self.real.cluster.shim

    def election(self) -> dict:
        try:
            return read_status(self.real.cluster.status_file).get("leaderElection") or {}
        except (OSError, ValueError):
            return {}

    def wait_role(self, role: str, timeout: float = 30) -> dict:
        def ok():
            if not self.shim.alive():
                raise harness.HarnessError(f"shim exited: {self.shim.tail()}")
            doc = self.election()
            return doc if doc.get("role") == role else None
        try:
            return harness.wait_for(ok, timeout, f"{self.real.cluster.name} {role}", interval=0.05)
        except harness.HarnessError as exc:
            raise harness.HarnessError(f"{exc}; its shim's log ends: {self.shim.tail(8)}") from None

    def log(self) -> str:
        return self.real.shim_log()


@pytest.fixture
def cut_proxy(plane):
    """A cut proxy to kube-apiserver inside the plane's namespace: (its port, the process)."""
    target = plane.server.removeprefix("https://").rstrip("/")
    proc = subprocess.Popen([*plane.enter(), sys.executable, "-m", "tools.cutproxy", target],
                            stdout=subprocess.PIPE, text=True, cwd=harness.ROOT, env=ykshm_env())
    try:
        assert proc.stdout is not None
        yield int(proc.stdout.readline()), proc
    finally:
        proc.terminate()
        proc.wait(10)


def _through(kubeconfig: Path, port: int) -> Path:
    """A copy of `kubeconfig` whose server is 127.0.0.1:PORT (in the serving certificate)."""
    doc = yaml.safe_load(kubeconfig.read_text())
    doc["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    path = kubeconfig.with_name(f"through-{port}.kubeconfig")
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def pair(plane, nodes, tmp_path, ring_name, request):
    timings, cuttable = request.param     # cuttable: the leader reaches the API through cut_proxy
    kubeconfig = shim_kubeconfig(plane, tmp_path)
    leader_config = _through(kubeconfig, request.getfixturevalue("cut_proxy")[0]) if cuttable else kubeconfig
    replicas = []
    try:
        replicas.append(Replica(plane, f"{ring_name}-a", leader_config, f"{ring_name}-a", timings))
        replicas[0].wait_role("leader")
        replicas.append(Replica(plane, f"{ring_name}-b", kubeconfig, f"{ring_name}-b", timings))
        replicas[1].wait_role("standby")
        yield replicas
    finally:
        for r in replicas:
            r.real.close()


def _micro(text: str) -> float:
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=dt.timezone.utc).timestamp()


def _pods(leader: Replica, prefix: str, n: int) -> list[str]:
    names = [f"{prefix}-{i}" for i in range(n)]
    for name in names:
        leader.real.create_pod(name, f"app-{prefix}")
    return names


def _clean_logs(*replicas: Replica) -> None:
    for r in replicas:
        log = r.log()
        assert " 403" not in log and "forbidden" not in log.lower(), log[-3000:]
        assert "409" not in log, log[-3000:]               # no binding refused as a second one


@pytest.mark.parametrize("pair", [((15.0, 10.0, 2.0), False)], indirect=True)
def test_a_killed_leader_is_replaced_at_once_on_the_real_apiserver(plane, pair):
    leader, standby = pair
    names = _pods(leader, "kill", 6)
    leader.real.wait_bound(names)
    leader.shim.stop(signal.SIGKILL)
    killed = time.time()
    names += _pods(leader, "kill-after", 6)
    doc = standby.wait_role("leader", timeout=8)               # not the lease's 15 s
    assert _micro(doc["acquireTime"]) - killed < 5
    standby.real.wait_bound(names)
    spec = plane.kubectl_json(*LEASE)["spec"]
    assert spec["holderIdentity"] == standby.election()["identity"] and spec["leaseTransitions"] == 1
    _clean_logs(standby)


@pytest.mark.parametrize("pair", [((2.0, 1.5, 0.25), False)], indirect=True)
def test_a_paused_leader_is_waited_out_and_writes_nothing_after_waking(plane, pair):
    leader, standby = pair
    names = _pods(leader, "stop", 6)
    leader.real.wait_bound(names)
    leader.shim.send(signal.SIGSTOP)
    paused = time.time()
    names += _pods(leader, "stop-after", 6)
    doc = standby.wait_role("leader", timeout=20)
    acquired = _micro(doc["acquireTime"])
    assert acquired - paused > 1.4                            # the lease expired; no lifeline proof
    standby.real.wait_bound(names)
    leader.shim.send(signal.SIGCONT)
    assert leader.shim.popen.wait(20) == 1
    assert "leadership lost" in leader.shim.tail(5)
    assert leader.election()["lastWriteSent"] < acquired
    _clean_logs(leader, standby)


@pytest.mark.parametrize("pair", [((4.0, 3.0, 0.5), True)], indirect=True)
def test_a_leader_cut_from_the_apiserver_stops_at_its_deadline_and_is_replaced(plane, pair, cut_proxy):
    leader, standby = pair
    names = _pods(leader, "cut", 6)
    leader.real.wait_bound(names)
    cut_proxy[1].send_signal(signal.SIGUSR1)
    names += _pods(leader, "cut-after", 6)
    doc = standby.wait_role("leader", timeout=30)
    assert leader.shim.popen.wait(30) == 1                     # renew deadline missed: exits
    assert "leadership lost" in leader.shim.tail(5)
    assert leader.election()["lastWriteSent"] < _micro(doc["acquireTime"])
    standby.real.wait_bound(names)
    _clean_logs(standby)
