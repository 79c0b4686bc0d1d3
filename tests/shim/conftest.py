"""Fixtures of the shim's end-to-end tests."""

from __future__ import annotations

import pytest

from tools.harness import Cluster


@pytest.fixture
def cluster(ring_name):
    """A sim-cluster of 3 nodes, an engine and a shim (not started), stopped afterwards.

    test_simcluster.py overrides `cluster` with its own module fixture (a bare sim-cluster URL).
    """
    c = Cluster(ring_name, nodes=3)
    try:
        yield c
    finally:
        c.close()
