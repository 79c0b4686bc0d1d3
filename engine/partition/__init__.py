"""engine.partition: one partition's objects and the scheduling of its asks, one concept a module.

    coordinator  `Partition`: the shared state and the entry points the scheduler calls
    queues       the queue tree: configuration, dynamic queues, placement of applications,
                 queue limits (`max` resources, `maxapplications`: `room_for_running_app`)
    apps         application lifecycle: add/remove, state changes, timers firing, gang timeout
    timers       `TimerKind`, `Timing` (the timeouts) and the due-time heap
    asks         pending asks: add, release, a placement tag replaced, taken when allocated
    allocations  booking and unbooking allocations everywhere, RM releases, recovery
    nodes        nodes (add/update/drain/remove), reservations, `NodeIndex` (fast node choice)
    interpod     inter-pod affinity: counts of running pods by label per node and topology
                 domain (`InterPodIndex`), the `Probe` a node must pass for an ask
    cycle        the allocation cycle: pick an app, find a node, enforce limits, why asks wait
    preemption   YuniKorn's preemption: when an ask may preempt, which victims, on which node
    outbox       messages for the shims per rmID until the scheduler flushes them
    eventcodes   the event record/change type ints the partition emits

Each module is functions of a `Partition` (no module keeps state of its own; the indexes
`nodes.NodeIndex` and `interpod.InterPodIndex` are objects the partition holds). Where a rule
lives: a queue's maxapplications -> `queues.room_for_running_app`, called by `cycle.can_run`;
a queue's max resources -> `queues.fits`; the node choice -> `nodes.NodeIndex.find`;
kube-scheduler's InterPodAffinity filter -> `interpod.Probe.reason`; which pods an ask preempts ->
`preemption.Search`.
"""

from engine.partition.coordinator import Partition
from engine.partition.outbox import Outbox
from engine.partition.timers import TimerKind, Timing

__all__ = ["Outbox", "Partition", "TimerKind", "Timing"]
