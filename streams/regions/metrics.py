"""The 8 consistent-region metrics of OpenStreams, per job and region, in Prometheus text.

Names as ConsistentRegionOperatorMetric has them (average_drain_time_milliseconds, ...,
n_current_reset_attempts), labelled `job` and `region` (OpenStreams: one label
"ConsistentRegion_<n>"; a job label lets one Prometheus scrape many operators). Averages are over
the last 10 samples (vocabulary.MOVING_AVERAGE_SAMPLES). Each operator owns its CollectorRegistry: no
process-global state, so tests and several operators in one process do not collide.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .fsm import METRIC_NAMES

CONTENT_TYPE = CONTENT_TYPE_LATEST

HELP = {
    "average_drain_time_milliseconds": "average drain time for consistent region (last 10 drains)",
    "average_reset_time_milliseconds": "average reset time for consistent region (last 10 resets)",
    "last_consistent_state_time_milliseconds": "last time reaching a consistent state (epoch ms)",
    "last_reset_time_milliseconds": "last time to reset a consistent region (epoch ms)",
    "last_completed_drain_seq_id": "sequence id of the last completed drain",
    "last_completed_reset_seq_id": "sequence id of the last completed reset",
    "state": "state of the consistent region (0 STARTED .. 6 CHECKPOINT_PENDING)",
    "n_current_reset_attempts": "number of current reset attempts",
}


class RegionMetrics:
    """The gauges of one job's regions."""

    def __init__(self, job: str) -> None:
        self.job = job
        self.registry = CollectorRegistry(auto_describe=True)
        self._gauges = {name: Gauge(name, HELP[name], ["job", "region"], registry=self.registry)
                        for name in METRIC_NAMES}
        self._children: dict[int, dict] = {}

    def update(self, region: int, values: Iterable[tuple[str, float]]) -> None:
        children = self._children.get(region)
        if children is None:  # labels() is a locked lookup: once per region, not per event
            children = self._children[region] = {
                name: gauge.labels(self.job, str(region)) for name, gauge in self._gauges.items()}
        for name, value in values:
            children[name].set(value)

    def render(self) -> bytes:
        return generate_latest(self.registry)
