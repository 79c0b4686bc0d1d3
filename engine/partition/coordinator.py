"""`Partition`: one partition's objects, and the entry points the scheduler calls.

The partition owns the objects of `engine.objects` and is the only code that changes them;
every change emits its event (the rows of the event-history seed's "Event overview" tables)
through the `EventSink` the scheduler gives it, and messages for the shim are queued on an
`Outbox`. No I/O happens here. The work is done by one module per concept (see
`engine.partition`) on the shared state (`state.PartitionState`, which this class extends);
each entry point here calls the concept's module, then tells the application lifecycle
(`apps`) what happened (a new ask, an allocation booked, one released), so that no module
below the lifecycle calls back into it.

Time comes from the injected clocks only: `clock` (monotonic ns: timers, the cycle's deadline)
and `wall_clock` (epoch ns: the timestamps readers see).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from engine.config import PartitionConfig
from engine.objects import Application, Queue
from engine.metrics import EngineMetrics
from engine.partition import allocations, apps, asks, cycle, nodes, queues
from engine.partition.outbox import Outbox
from engine.partition.state import PartitionState
from engine.partition.timers import Timing
from si.messages import AddApplication, AllocationAsk, ExistingAllocation, NodeChange


class Partition(PartitionState):
    """A partition's state and its entry points; see the module docstring."""

    def __init__(self, config: PartitionConfig, sink: Any, outbox: Outbox,
                 *, clock: Callable[[], int] = time.monotonic_ns,
                 wall_clock: Callable[[], int] = time.time_ns,
                 timing: Timing | None = None, metrics: EngineMetrics | None = None) -> None:
        super().__init__(config, sink, outbox, clock=clock, wall_clock=wall_clock,
                         timing=timing, metrics=metrics)
        self.root = queues.build(self, config.root, None)
        queues.push_limits(self)

    # --- queues (engine.partition.queues) ------------------------------------------------------

    def update_config(self, config: PartitionConfig) -> None:
        """Apply a changed queue configuration (SIGHUP reload); emits the QUEUE SET rows."""
        queues.update_config(self, config)
        self.placement_rules = config.placement_rules
        self.preemption_enabled = config.preemption_enabled

    def place_app(self, app: Application) -> tuple[Queue | None, str]:
        """The leaf for `app`: the configured placement rules, else `place(app.queue_name)`."""
        return queues.place_app(self, app)

    # --- applications (engine.partition.apps) --------------------------------------------------

    def add_app(self, rm_id: str, request: AddApplication) -> str | None:
        """Add an application; None if accepted, else the rejection reason (app is Rejected)."""
        return apps.add(self, rm_id, request)

    def remove_app(self, app_id: str, message: str = "removed by the RM") -> bool:
        """The RM removed the application; False if unknown."""
        return apps.remove(self, app_id, message)

    def tick(self) -> None:
        """Fire every timer that is due (placeholder, starting, completing, expiry)."""
        apps.fire_timers(self)

    # --- asks and allocations (engine.partition.asks, .allocations) ----------------------------

    def add_ask(self, rm_id: str, request: AllocationAsk) -> str | None:
        """Add a pending ask; None if accepted, else why not."""
        ask, reason = asks.add(self, rm_id, request)
        if ask is not None:
            apps.asked(self, self.apps[ask.app_id], ask)
        return reason

    def release_ask(self, app_id: str, key: str, message: str = "") -> bool:
        """The RM released an ask (all of the app's if key is empty); whether any was found."""
        found = asks.release(self, app_id, key, message)
        if found:
            apps.check_done(self, self.apps[app_id])
        return found

    def release_allocation(self, app_id: str, key: str, termination: str,
                           message: str = "") -> int:
        """The shim released allocations (all of the app's if key is empty); how many."""
        count = allocations.release(self, app_id, key, termination, message)
        if count:
            apps.check_done(self, self.apps[app_id])
        return count

    def add_existing(self, rm_id: str, request: ExistingAllocation) -> str | None:
        """A recovered, already bound allocation: booked even above the queue max."""
        alloc, reason = allocations.add_existing(self, request)
        if alloc is not None:
            apps.allocated(self, self.apps[alloc.app_id], alloc.key)
        return reason

    # --- nodes (engine.partition.nodes) --------------------------------------------------------

    def add_node(self, rm_id: str, request: NodeChange, *, drain: bool = False) -> str | None:
        """CREATE / CREATE_DRAIN; None if accepted, else why not."""
        return nodes.add(self, rm_id, request, drain=drain)

    def update_node(self, request: NodeChange) -> str | None:
        """UPDATE; None, or why not (nothing changed)."""
        return nodes.update(self, request)

    def set_schedulable(self, node_id: str, schedulable: bool) -> str | None:
        return nodes.set_schedulable(self, node_id, schedulable)

    def remove_node(self, node_id: str, *, notify: bool = True) -> str | None:
        return nodes.remove(self, node_id, notify=notify)

    def remove_rm(self, rm_id: str) -> None:
        """Forget everything an RM registered (re-registration: it will replay)."""
        for app in [a for a in self.apps.values() if a.rm_id == rm_id]:
            apps.remove(self, app.app_id, "resource manager re-registered")
        for app_id in [k for k, a in self.terminated.items() if a.rm_id == rm_id]:
            self.terminated.pop(app_id)
        for node_id in [k for k, n in self.nodes.items() if n.rm_id == rm_id]:
            nodes.remove(self, node_id, notify=False)

    # --- the cycle (engine.partition.cycle) ----------------------------------------------------

    def schedule(self, deadline_ns: int) -> int:
        """Allocate what fits until nothing more does or the deadline passes; how many."""
        return cycle.schedule(self, deadline_ns)

    # --- readers -------------------------------------------------------------------------------

    def all_apps(self) -> Iterator[Application]:
        """Running and terminated (not yet expired) applications."""
        yield from self.apps.values()
        yield from self.terminated.values()
