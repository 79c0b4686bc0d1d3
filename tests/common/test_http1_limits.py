"""common.http1.limits: the Gate admits per address and per worker, and makes room at the cap by
closing the connection that has waited longest for a request head."""

from __future__ import annotations

import pytest
import trio

from common.http1.limits import Gate, LimitError, Limits


def test_a_peer_over_its_cap_is_refused_and_others_still_admitted():
    gate = Gate(Limits(max_connections=10, max_per_peer=2))
    assert gate.admit("10.0.0.1") and gate.admit("10.0.0.1")
    assert not gate.admit("10.0.0.1")
    assert gate.admit("10.0.0.2")
    gate.release("10.0.0.1")
    assert gate.admit("10.0.0.1")
    assert (gate.total, gate.refused) == (3, 1)


async def test_at_the_worker_cap_the_longest_waiting_connection_makes_room():
    gate = Gate(Limits(max_connections=2, max_per_peer=10))
    first, second = trio.CancelScope(), trio.CancelScope()
    assert gate.admit("a") and gate.admit("b")
    with gate.waiting(first), gate.waiting(second):
        assert gate.admit("c")
        assert first.cancel_called and not second.cancel_called
        assert gate.admit("d")
        assert second.cancel_called
        assert not gate.admit("e")  # nobody waits for a head: a busy worker refuses


async def test_at_shutdown_waiting_connections_close_and_new_waits_end_at_once():
    gate = Gate(Limits())
    scope, later = trio.CancelScope(), trio.CancelScope()
    with gate.waiting(scope):
        gate.close_waiting()
        assert scope.cancel_called
    with gate.waiting(later):
        assert later.cancel_called


def test_limits_that_make_no_sense_name_the_setting_and_value():
    with pytest.raises(LimitError) as info:
        Limits(max_per_peer=0).check()
    assert (info.value.name, info.value.value) == ("max_per_peer", 0)
    with pytest.raises(LimitError, match="body_timeout must be more than 0 seconds, not 0"):
        Limits(body_timeout=0).check()
