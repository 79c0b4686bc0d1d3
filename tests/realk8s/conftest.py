"""One real control plane per test module (`ykshm realk8s run`, realplane.py): about 5 s to start."""

from __future__ import annotations

import pytest

from tests.realk8s import realplane


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    with realplane.running(tmp_path_factory.mktemp("realk8s")) as started:
        yield started
