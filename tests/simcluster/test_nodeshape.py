"""`--node-cpu/--node-memory/--node-pods` mean the same to sim-cluster and the node agent, and a
bad value is the same one line, exit 2, before anything starts (simcluster/nodeshape.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tools.harness import ROOT

BAD = [(["--node-cpu", "abc"], "--node-cpu/--node-memory: invalid quantity 'abc'"),
       (["--node-memory", "12Qi"], "--node-cpu/--node-memory: invalid quantity '12Qi'"),
       (["--node-pods", "0"], "--node-pods must be at least 1, got 0")]


@pytest.mark.parametrize("command", [["sim-cluster"], ["node-agent", "--kubeconfig", "/dev/null"]])
@pytest.mark.parametrize("flags, message", BAD)
def test_a_bad_node_capacity_is_one_line_exit_2(command, flags, message):
    done = subprocess.run([sys.executable, "-m", "tools.cli", *command, *flags], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert (done.returncode, done.stderr) == (2, f"ykshm {command[0]}: error: {message}\n")
