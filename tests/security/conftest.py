"""The security tests start real servers: the web's harness (tests/web/webharness.py) and the CLI
helpers (tests/tools/ykcli.py: stop a process by pid) and the exporter's (tests/export/exportharness.py)
are theirs too."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.simcluster.test_simcluster import start_cluster, stop_cluster

for folder in ("web", "tools", "export"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / folder))


@pytest.fixture
def api_only_sim():
    """A sim-cluster with one node and no process pods, for tests that need only its API (the
    Streams objects and Secrets an endpoint reads); its URL. Stopped by pid."""
    proc, url = start_cluster("--nodes", "1", "--no-process-pods")
    try:
        yield url
    finally:
        stop_cluster(proc)
