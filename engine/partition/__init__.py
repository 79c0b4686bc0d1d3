"""engine.partition: one partition's objects and the scheduling of its asks, one concept a module.

    coordinator  `Partition`: the entry points the scheduler calls (extends the state)
    state        `PartitionState`: every field the modules share, no behaviour
    queues       the queue tree: configuration, dynamic queues, placement of applications,
                 queue limits (`max` resources, `maxapplications`: `room_for_running_app`)
    apps         application lifecycle: add/remove, state changes, timers firing, gang timeout,
                 and what asks and allocations do to an application (`asked`, `allocated`,
                 `check_done`)
    timers       `TimerKind`, `Timing` (the timeouts) and the due-time heap
    asks         pending asks: add, release, a placement tag replaced, taken when allocated
    allocations  booking and unbooking allocations everywhere, RM releases, recovery
    nodes        nodes: add/update/drain/remove
    reservations a node held for one ask: reserve, unreserve
    nodeindex    `NodeIndex`: the usable nodes, a cursor, the largest-free bound (fast node choice)
    interpod     inter-pod affinity: counts of running pods by label per node and topology
                 domain (`InterPodIndex`), the `Probe` a node must pass for an ask
    cycle        the allocation cycle: pick an app, find a node, enforce limits, why asks wait
    preemption   YuniKorn's preemption: when an ask may preempt, which victims, on which node
    outbox       messages for the shims per rmID until the scheduler flushes them
    eventcodes   the event record/change type ints the partition emits

Who changes what (the fields of `PartitionState` and the objects in them):

    queues        `queues`, `root`, each queue's configuration and limits
    apps          `apps`, `terminated`, `timers`, an application's state (its machine, state log)
    asks          an application's `asks`/`pending` and the pending totals of it and its queues
    allocations   the allocations of nodes and applications, the allocated totals of nodes,
                  applications and queues, running-application counts, `allocations_made`
    nodes         `nodes`, `capacity`, a node's attributes, taints, readiness, schedulability
    reservations  `reservations`, a node's `reserved_for`, an ask's `reserved_node`
    preemption    `preemptions`, the victims' `preempted` marks and the queues' `preempting`
    `index` (a `NodeIndex`) and `interpod` (an `InterPodIndex`) keep their own state; the
    modules above tell them what changed. Every module emits events, queues shim messages on
    `out` and bumps `version`.

The modules call down, never back up (`tests/tools/test_layering.py` checks there is no import
cycle, lazy imports included): state (with nodeindex, interpod, timers, outbox, eventcodes) <-
queues, reservations <- asks <- allocations <- apps <- nodes, preemption <- cycle <-
coordinator. An ask or allocation never changes its application's state itself: the caller
tells `apps` next (`coordinator.Partition.add_ask` calls `asks.add`, then `apps.asked`).

Where a rule lives: a queue's maxapplications -> `queues.room_for_running_app`, called by
`cycle.can_run`; a queue's max resources -> `queues.fits`; the node choice ->
`nodeindex.NodeIndex.find`; kube-scheduler's InterPodAffinity filter -> `interpod.Probe.reason`;
which pods an ask preempts -> `preemption.Search`.
"""

from engine.partition.coordinator import Partition
from engine.partition.outbox import Outbox
from engine.partition.timers import TimerKind, Timing

__all__ = ["Outbox", "Partition", "TimerKind", "Timing"]
