"""common.gcpause: no cyclic collection inside a pause, the collector back on after it (also after
an error), and an inner pause never turns it back on early nor leaves it off."""

from __future__ import annotations

import gc

import pytest

from common.gcpause import paused_gc


class _Node:
    def __init__(self) -> None:
        self.peer = self


def _collections() -> int:
    return sum(s["collections"] for s in gc.get_stats())


def test_no_collection_inside_a_pause_and_on_again_after() -> None:
    assert gc.isenabled()
    with paused_gc():
        before = _collections()
        keep = [_Node() for _ in range(20_000)]       # far past every generation's threshold
        assert _collections() == before
        assert not gc.isenabled()
    assert gc.isenabled() and len(keep) == 20_000


def test_an_error_inside_still_turns_it_back_on() -> None:
    with pytest.raises(ValueError):
        with paused_gc():
            raise ValueError("boom")
    assert gc.isenabled()


def test_nested_and_decorated_pauses() -> None:
    @paused_gc()
    def inner() -> bool:
        return gc.isenabled()

    with paused_gc():
        assert inner() is False
        assert not gc.isenabled()                    # the inner pause did not re-enable it
    assert gc.isenabled()
    assert inner() is False and gc.isenabled()


def test_a_collector_switched_off_by_its_owner_stays_off() -> None:
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
