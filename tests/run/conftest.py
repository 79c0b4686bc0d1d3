"""Fixtures of the `ykshm run` tests (the harness is runharness.py)."""

from __future__ import annotations

import pytest

from runharness import RunInstance


@pytest.fixture
def make_run(ring_name):
    """make_run(name=None, **kw) -> a started RunInstance (banner read); all closed afterwards."""
    made: list[RunInstance] = []

    def make(name: str | None = None, **kw) -> RunInstance:
        inst = RunInstance(name or ring_name, **kw)
        made.append(inst)
        inst.read_banner()
        return inst

    yield make
    for inst in made:
        inst.close()
