"""The application lifecycle's timeouts: their lengths (`Timing`) and the due-time heap.

Times come from the partition's injected monotonic clock only, so tests move time with a fake
clock. What a timer does when it fires is the lifecycle's business (`engine.partition.apps`).
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections.abc import Callable, Iterator

from engine.config import MAX_RETAINED_APPS, RETENTION_SECONDS


class TimerKind(enum.Enum):
    """Why an application's timer was set (the seed's lifecycle timeouts)."""

    PLACEHOLDER = "placeholder"  # gang placeholders not all replaced in time
    STARTING = "starting"        # Starting -> Running without a second allocation
    COMPLETING = "completing"    # Completing -> Completed unless a new ask arrives
    EXPIRE = "expire"            # a terminated application is forgotten by readers


class Timing:
    """Timeouts of the application lifecycle, in nanoseconds (tests shorten them)."""

    def __init__(self, placeholder_default_ms: int = 15 * 60 * 1000,
                 starting_s: float = 300.0, completing_s: float = 30.0,
                 retention_s: float = RETENTION_SECONDS, max_retained: int = MAX_RETAINED_APPS) -> None:
        self.placeholder_default_ns = placeholder_default_ms * 1_000_000
        self.starting_ns = int(starting_s * 1e9)
        self.completing_ns = int(completing_s * 1e9)
        self.retention_ns = int(retention_s * 1e9)
        self.max_retained = max_retained
        """Finished applications kept for readers at most (oldest expired first; age: retention)."""


class Timers:
    """A heap of (due, seq, kind, app_id); equal due times fire in the order they were set."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock
        self._heap: list[tuple[int, int, TimerKind, str]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def set(self, delay_ns: int, kind: TimerKind, app_id: str) -> None:
        heapq.heappush(self._heap, (self.clock() + delay_ns, next(self._seq), kind, app_id))

    def due(self) -> Iterator[tuple[TimerKind, str]]:
        """Pop every timer due now, in due order; timers set while iterating may be yielded."""
        now = self.clock()
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, kind, app_id = heapq.heappop(heap)
            yield kind, app_id
