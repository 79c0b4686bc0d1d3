"""ykshm's engine and shim against a real control plane (realplane.py), on tools.harness.Cluster's
process handling (shim status, kill -9, stop by pid, /dev/shm clean-up). The engine needs no
network (its SI socket is a file); the shim runs inside the run's network namespace."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from simcluster import pki
from tests.realk8s.realplane import RealPlane
from tools import harness, run_identities


def shim_kubeconfig(plane, tmp: Path) -> Path:
    """The shim's identity and RBAC, exactly as `ykshm run` makes them for sim-cluster."""
    plane.kubectl("apply", "-f", str(run_identities.write_policy(tmp / "policy.yaml")))
    return pki.client_kubeconfig(plane.pki, "ykshm-shim", f"{run_identities.USER_PREFIX}shim",
                                 (run_identities.GROUP,), plane.server)


class RealScheduler:
    """Engine + shim of instance `name`; the shim authenticates with `kubeconfig`."""

    def __init__(self, plane: RealPlane, name: str, kubeconfig: Path, shim_args: Sequence[str] = (),
                 engine_config: str | None = None) -> None:
        self.plane = plane
        self.kubeconfig = kubeconfig
        self.shim_args = list(shim_args)
        self.cluster = harness.Cluster(name, engine_config=engine_config)

    def start_shim(self) -> dict:
        Path(self.cluster.status_file).unlink(missing_ok=True)
        self.cluster.shim = harness.Proc("shim", ["shim", "--kubeconfig", str(self.kubeconfig), "--name",
                                                  self.cluster.name, "--socket", self.cluster.socket,
                                                  *self.shim_args],
                                         self.cluster.log_dir, prefix=self.plane.enter())
        return self.cluster.wait_shim("Running", 60)

    def create_pod(self, name: str, app: str, **kwargs) -> None:
        """tools.harness.pod_body's pod (schedulerName yunikorn), created in `default`."""
        self.plane.apply_json(harness.pod_body(name, app=app, **kwargs))

    def placement(self) -> dict[str, str]:
        return {p["metadata"]["name"]: p["spec"].get("nodeName", "")
                for p in self.plane.kubectl_json("get", "pods")["items"]}

    def wait_bound(self, names: list[str]) -> dict[str, str]:
        def bound():
            now = self.placement()
            return all(now.get(n) for n in names) and {n: now[n] for n in names}
        return self.plane.wait_for(f"{len(names)} pods bound by ykshm", bound, timeout=60)

    def shim_log(self) -> str:
        assert self.cluster.shim is not None
        return Path(self.cluster.shim.log_path).read_text()

    def close(self) -> None:
        """Stop both; delete the pods at once (no kubelet confirms a graceful deletion)."""
        self.cluster.close()
        self.plane.kubectl("delete", "pods", "--all", "--grace-period=0", "--force")
