"""common.backoff: the one retry schedule of every loop that retries (informers, the shim's SI
connector, the cr-operator supervisor, `ykshm run`'s restarts, the exporter)."""

from __future__ import annotations

import pytest

from common.backoff import Backoff


def test_doubles_to_the_cap_and_resets():
    b = Backoff(0.5, 10.0)
    assert [b.next() for _ in range(8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]
    b.reset()
    assert b.next() == 0.5 and b.current == 1.0


def test_jitter_spreads_each_delay_within_its_fraction():
    b = Backoff(0.8, 30.0, jitter=0.1)
    delays = [b.next() for _ in range(200)]
    for got, want in zip(delays, Backoff(0.8, 30.0).schedule() + [30.0] * 200):
        assert want * 0.9 <= got < want * 1.1
    assert len({round(d, 6) for d in delays[10:]}) > 50      # really spread, not one value


def test_schedule_is_the_kube_clients():
    assert Backoff(0.8, 30.0).schedule() == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0]


@pytest.mark.parametrize("args", [(0, 1), (2, 1), (1, 2, 1.0), (1, 2, -0.1)])
def test_nonsense_is_refused(args):
    with pytest.raises(ValueError):
        Backoff(*args)


def test_at_once_first_is_the_kubelets_restart_rule():
    b = Backoff(10.0, 300.0, at_once_first=True)
    assert [b.next() for _ in range(8)] == [0.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0]
    b.reset()
    assert b.next() == 0.0 and b.next() == 10.0
