"""`PartitionState`: what one partition holds, and which module of the package changes what.

The functions of the other modules take this state as their first argument (`part`); the state
has no behaviour of its own, so every module can see it without importing another module that
would import it back. `coordinator.Partition` adds the entry points the scheduler calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from engine.metrics import EngineMetrics
from engine.config import PartitionConfig
from engine.objects import Application, Ask, Node, Queue
from engine.partition.interpod import InterPodIndex
from engine.partition.nodeindex import NodeIndex
from engine.partition.outbox import Outbox
from engine.partition.timers import Timers, Timing
from engine.ugm import UserGroupManager


class PartitionState:
    """One partition's objects, indexes, clocks and outputs (see the package map for the
    module that owns each field)."""

    root: Queue
    """The root queue, built by `queues.build` (the coordinator does, after this state)."""

    def __init__(self, config: PartitionConfig, sink: Any, outbox: Outbox,
                 *, clock: Callable[[], int] = time.monotonic_ns,
                 wall_clock: Callable[[], int] = time.time_ns,
                 timing: Timing | None = None, metrics: EngineMetrics | None = None) -> None:
        self.name = config.name
        self.metrics = metrics if metrics is not None else EngineMetrics()
        self.sink = sink
        self.emit = sink.emit
        self.ugm = UserGroupManager(config.name, sink.emit)
        self.out = outbox
        self.clock = clock
        self.wall_clock = wall_clock
        self.timing = timing or Timing()
        self.timers = Timers(clock)
        self.node_sort_policy = config.node_sort_policy
        self.placement_rules = config.placement_rules
        self.preemption_enabled = config.preemption_enabled
        self.preemptions = 0
        """Preemption decisions made (each released one or more victims)."""
        self.queues: dict[str, Queue] = {}
        self.apps: dict[str, Application] = {}
        self.terminated: dict[str, Application] = {}
        self.nodes: dict[str, Node] = {}
        self.index = NodeIndex(binpacking=config.node_sort_policy == "binpacking")
        self.interpod = InterPodIndex(self.nodes, loosened=self.index.placement_changed)
        self.capacity: dict[str, int] = {}
        self.reservations: dict[str, tuple[Application, Ask, Node]] = {}
        self.version = 0
        self.allocations_made = 0
