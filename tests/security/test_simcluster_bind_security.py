"""sim-cluster serves its API (cluster-admin for whoever holds the admin certificate, and process
pods' Services) on loopback only, except inside a network namespace whose only interface is `lo`:
there nothing off the machine can reach it (what `ykshm realk8s run` makes, so a process pod can
serve on its 10.244.1.x address). A namespace with any other interface is the host's case:
refused. Each namespace here is the test's own (`unshare -n`), so nothing leaves the machine.
"""

from __future__ import annotations

import subprocess
import sys

from tools.harness import ROOT

ADDRESS = "10.9.9.9"
SIM = f"exec timeout 5 {sys.executable} -m tools.cli sim-cluster --bind {ADDRESS} --port 0 --no-process-pods"


def _in_namespace(setup: str) -> subprocess.CompletedProcess:
    return subprocess.run(["unshare", "-n", "sh", "-c", f"ip link set lo up && {setup} && {SIM}"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_an_address_on_another_interface_is_refused():
    """Another interface (a bridge, as a host's eth0) holding the address: the API would be reachable
    from off the machine, so one line, exit 2, nothing served."""
    done = _in_namespace(f"ip link add x0 type bridge && ip addr add {ADDRESS}/32 dev x0 && ip link set x0 up")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        f"ykshm sim-cluster: error: --bind {ADDRESS}: the sim-cluster binds loopback addresses only "
        "(or any address inside a network namespace whose only interface is lo)"]
    assert "listening" not in done.stdout


def test_an_address_in_a_namespace_with_only_lo_is_served():
    done = _in_namespace(f"ip addr add {ADDRESS}/32 dev lo")
    assert f"sim-cluster listening on http://{ADDRESS}:" in done.stdout, done.stdout + done.stderr
