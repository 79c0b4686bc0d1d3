"""How many bytes per second one worker writes to its streams at most (a token bucket).

Why: the readers must not slow the engine. `--nice` keeps their CPU behind the engine's, but what
they send also costs the machine outside their nice level — the loopback/network stack, memory
bandwidth. Measured with `bench web` isolation (the writer publishing as fast as it can, 100
readers chasing it): readers sending ~480 MB/s (3.2 M events per 3 s window) cut the writer to
0.91-0.92 of its speed alone; capped near 250 MB/s, 0.95. Live streams need far less (100 streams
x 1,000 events/s or 1,000 x 100 are ~45 MB/s in all), so the cap only shapes floods and
catch-ups of long histories; a burst is free.
"""

from __future__ import annotations


class SendBudget:
    """Token bucket of bytes; `spend` says how long to pause before writing more."""

    RATE = 40 * 1024 * 1024
    """Bytes per second per worker (two workers: 80 MiB/s, ~190,000 events/s of the seed's mix)."""

    BURST = 8 * 1024 * 1024
    """What may go out at once after a quiet spell."""

    def __init__(self, rate: float = RATE, burst: float = BURST) -> None:
        self.rate = rate
        self.burst = burst
        self._level = burst
        self._at: float | None = None

    def spend(self, nbytes: int, now: float) -> float:
        """Record `nbytes` written at `now`; the seconds to wait before the next write (0 if none)."""
        if self._at is not None:
            self._level = min(self.burst, self._level + (now - self._at) * self.rate)
        self._at = now
        self._level -= nbytes
        return 0.0 if self._level >= 0 else -self._level / self.rate
