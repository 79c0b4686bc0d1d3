"""YuniKorn's internal metrics history: running applications and containers, sampled each minute.

YuniKorn's core stores one record every 60 s in a ring of 1,440 (24 hours) and serves it at
`/ws/v1/history/apps` and `/ws/v1/history/containers`; the web UI draws its dashboard charts from
them. The engine keeps the same ring and publishes it in the state snapshot, so every web worker
answers the same. One difference, so a new dashboard is not blank for a minute: the first sample
is taken when the engine starts (YuniKorn's first is a minute after start).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

from engine.app_state import AppState

SAMPLE_SECONDS = 60.0
CAPACITY = 1440


@dataclasses.dataclass(frozen=True, slots=True)
class Sample:
    timestamp_nano: int
    running_applications: int
    running_containers: int


class MetricsHistory:
    """A ring of `Sample`s, the oldest dropped when full."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.samples: collections.deque[Sample] = collections.deque(maxlen=capacity)

    def sample(self, scheduler: Any, now_nano: int) -> Sample:
        """Record what `scheduler` runs now (YuniKorn counts apps in Running, allocations held)."""
        apps = containers = 0
        for part in scheduler.partitions.values():
            for app in part.all_apps():
                if app.fsm.state is AppState.RUNNING:
                    apps += 1
                containers += len(app.allocations)
        record = Sample(now_nano, apps, containers)
        self.samples.append(record)
        return record

    def document(self) -> list[list[int]]:
        """The snapshot's compact form: `[timestamp, apps, containers]` per sample, oldest first."""
        return [[s.timestamp_nano, s.running_applications, s.running_containers] for s in self.samples]
