"""One real control plane per test module (`ykshm realk8s run`, realplane.py): about 5 s to start."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.realk8s import realplane


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("realk8s")
    running = realplane.start(tmp)
    try:
        yield running
    finally:
        code = running.finish()
        left = realplane.run_dir_processes(running.dir)
        assert code == 0 and not left, f"the run exited {code}, left {left}"
        assert not Path(running.dir).exists()  # the private directory went with the run
