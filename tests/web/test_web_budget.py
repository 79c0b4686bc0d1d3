"""web.budget: a worker's send budget lets a burst through and then paces to its rate."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from web.budget import SendBudget


def test_a_burst_is_free_then_sends_are_paced_to_the_rate():
    budget = SendBudget(rate=1000, burst=500)
    assert budget.spend(500, now=0.0) == 0.0  # the burst
    assert budget.spend(250, now=0.0) == 0.25  # 250 bytes over: a quarter second at 1000 B/s
    assert budget.spend(0, now=0.25) == 0.0  # paid back
    assert budget.spend(100, now=10.0) == 0.0  # a quiet spell refills, up to the burst only
    assert budget.spend(500, now=10.0) == 0.1


@given(sends=st.lists(st.tuples(st.integers(0, 10_000), st.floats(0, 1)), max_size=50))
def test_following_the_pauses_never_beats_the_rate_by_more_than_the_burst(sends):
    budget = SendBudget(rate=1000, burst=2000)
    now = 0.0
    total = 0
    for nbytes, think in sends:
        now += think
        total += nbytes
        now += budget.spend(nbytes, now)
        assert total <= 2000 + 1000 * now + 1e-6
