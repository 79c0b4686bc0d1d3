"""The run's network namespace (tools/realk8s_netns.py), both ways it is made: as root
(`unshare -n`) and as another user (`unshare -rn`: a user namespace too, this uid mapped to root
in it; forced here so a root CI runs that path too). Either way the run's addresses are on `lo`
and there is no route anywhere else."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tools import harness
from tools.realk8s_netns import Network

PROBE = """
import json, os, subprocess, sys
from tools import realk8s_netns as n
n.enter(n.Network(), user_namespace=json.loads(sys.argv[1]))
run = lambda *a: subprocess.run(a, capture_output=True, text=True, check=True).stdout
print(json.dumps({"uid": os.getuid(), "uid_map": open("/proc/self/uid_map").read().split(),
                  "routes": run("ip", "route", "show"), "addresses": run("ip", "-o", "addr", "show")}))
"""


@pytest.mark.parametrize("user", [None, True], ids=["as-this-user", "with-a-user-namespace"])
def test_the_namespace_has_the_runs_addresses_and_no_route_out(user):
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(user)], capture_output=True, text=True,
                          timeout=30, cwd=harness.ROOT)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["routes"] == ""                           # no route at all: nothing leaves the namespace
    lines = seen["addresses"].splitlines()
    assert all(line.split()[1] == "lo" for line in lines)  # lo is the only interface
    for address in (*Network().lo_addresses(), "127.0.0.1/8"):
        assert any(f"inet {address} " in line for line in lines), address
    if user:
        assert seen["uid"] == 0 and seen["uid_map"][0] == "0" and seen["uid_map"][2] == "1"  # one uid, as root
