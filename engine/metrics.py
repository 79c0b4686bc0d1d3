"""The scheduler's own Prometheus figures, kept as YuniKorn's core keeps them (pkg/metrics).

What only the engine sees happen is counted here, in the engine: allocations made and released
(`container_allocation_attempt_total{state}`, per queue `<queue>_queue_container{state}`),
application submissions (`application_submission_total{result}`), applications reaching a
terminal state per queue (`queue_app_total{queue,state}`), and the time of each scheduling cycle
and of each preemption attempt (histograms in YuniKorn's buckets, observed in seconds under
YuniKorn's `_milliseconds` names, as YuniKorn does). `document()` goes into the state snapshot
(`metrics`); `ykshm web` renders it, and derives the gauges (applications and nodes by state,
queue resources) from the rest of the snapshot (web.yunikorn_metrics). Counting costs a dict
increment per event; no lock (the engine is one thread).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections import Counter
from typing import Any

LATENCY_BUCKETS = tuple(round(0.0001 * 10 ** i, 4) for i in range(8))
"""prometheus.ExponentialBuckets(0.0001, 10, 8): 0.1 ms to 1000 s."""


@dataclasses.dataclass
class Histogram:
    """Counts per bucket (not cumulative), their sum and count."""

    counts: list[int] = dataclasses.field(default_factory=lambda: [0] * len(LATENCY_BUCKETS))
    total: float = 0.0
    count: int = 0

    def observe(self, seconds: float) -> None:
        index = bisect.bisect_left(LATENCY_BUCKETS, seconds)
        if index < len(self.counts):
            self.counts[index] += 1
        self.total += seconds
        self.count += 1

    def document(self) -> dict[str, Any]:
        return {"counts": list(self.counts), "sum": self.total, "count": self.count}


@dataclasses.dataclass
class EngineMetrics:
    """One engine's counters and histograms (all partitions)."""

    allocated: Counter[str] = dataclasses.field(default_factory=Counter)
    """Allocations made per queue path; the total is their sum (derived in `document`)."""
    released: Counter[str] = dataclasses.field(default_factory=Counter)
    """Allocations given back per queue path."""
    submissions: Counter[str] = dataclasses.field(default_factory=Counter)
    queue_terminal: dict[str, Counter[str]] = dataclasses.field(default_factory=dict)
    scheduling: Histogram = dataclasses.field(default_factory=Histogram)
    preemption: Histogram = dataclasses.field(default_factory=Histogram)

    def submitted(self, result: str) -> None:
        """An application submission: "new", then "accepted" or "rejected"."""
        self.submissions[result] += 1

    def terminal(self, queue: str, state: str) -> None:
        """An application of `queue` reached "completed", "failed" or "rejected"."""
        self.queue_terminal.setdefault(queue, Counter())[state] += 1

    def document(self) -> dict[str, Any]:
        queues = {q: {"allocated": n} for q, n in self.allocated.items()}
        for q, n in self.released.items():
            queues.setdefault(q, {})["released"] = n
        containers = {"allocated": sum(self.allocated.values()), "released": sum(self.released.values())}
        return {"containers": {k: v for k, v in containers.items() if v},
                "submissions": dict(self.submissions),
                "queueContainers": queues,
                "queueTerminal": {q: dict(c) for q, c in self.queue_terminal.items()},
                "schedulingLatency": self.scheduling.document(),
                "preemptionLatency": self.preemption.document(),
                "buckets": list(LATENCY_BUCKETS)}
