"""Events are rate-limited per object: a loop cannot flood the API or `kubectl describe`."""

from __future__ import annotations

import trio
import trio.testing

from streams.events import Events


def obj(name: str) -> dict:
    return {"kind": "ParallelRegion", "metadata": {"namespace": "default", "name": name}}


def test_a_burst_then_one_event_per_refill_period_per_object():
    async def main() -> None:
        events = Events(client=None, burst=3, refill_seconds=10.0)  # type: ignore[arg-type]
        assert [events.allow(obj("a")) for _ in range(5)] == [True, True, True, False, False]
        assert events.allow(obj("b"))                       # another object has its own bucket
        await trio.sleep(9.0)
        assert not events.allow(obj("a"))
        await trio.sleep(1.5)
        assert events.allow(obj("a")) and not events.allow(obj("a"))
        assert events.dropped == 4

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
