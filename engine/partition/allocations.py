"""Allocations: booked on node, application and queues; released; recovered from the RM.

`book` is the one place an allocation is added (by the cycle, a placeholder replacement or
recovery) and `remove` the one place it goes: both keep node, application, queue usage and the
running-application counts in step and emit the APP and NODE rows. Limit checks happen before
`book` (`engine.partition.cycle`); recovered allocations are booked even above limits. What an
allocation does to its application's state is the lifecycle's (`apps.allocated` after a
booking, `apps.check_done` after a removal): the callers call it next.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.objects import Allocation, Application, Node
from engine.partition import asks
from engine.partition.eventcodes import ADD, APP, NODE, REMOVE
from engine.predicates import Placement, placement_of_tag
from shm.events import EventChangeDetail as Detail
from si import resources
from si.requests import DEFAULT_PREEMPTION
from si.tags import INSTANCE_TYPE_ATTRIBUTE, PLACEMENT_TAG

if TYPE_CHECKING:
    from engine.partition.state import PartitionState
    from si.messages import ExistingAllocation

TERMINATION_DETAIL = {
    "STOPPED_BY_RM": int(Detail.ALLOC_CANCEL),
    "UNKNOWN_TERMINATION_TYPE": int(Detail.ALLOC_CANCEL),
    "TIMEOUT": int(Detail.ALLOC_TIMEOUT),
    "PREEMPTED_BY_SCHEDULER": int(Detail.ALLOC_PREEMPT),
    "PLACEHOLDER_REPLACED": int(Detail.ALLOC_REPLACED),
}
"""The event detail of an RM-side release, by its SI terminationType."""

_APP_ALLOC, _NODE_ALLOC = int(Detail.APP_ALLOC), int(Detail.NODE_ALLOC)  # per allocation: hot


def book(part: PartitionState, app: Application, key: str, res: dict[str, int], node: Node, *,
         placeholder: bool, task_group: str, priority: int, recovered: bool = False,
         notify: bool = True, tags: dict[str, str] | None = None,
         preempt_self: bool = True, placement: Placement | None = None,
         meta: tuple[str, dict[str, str]] | None = None, originator: bool = False) -> Allocation:
    """Book an allocation everywhere and emit its events (no checks: callers did them).
    `meta`: the ask's namespace and labels if known (read from the same tags)."""
    alloc = Allocation(key, app.app_id, part.name, node.node_id, res, placeholder,
                       task_group, priority, recovered, create_time=part.wall_clock(), tags=tags,
                       placement=placement)
    alloc.allow_preempt_self = preempt_self
    alloc.meta = meta
    alloc.originator = originator
    node.allocations[key] = alloc
    node.ver += 1
    interpod = part.interpod
    if interpod.trackers or placement is not None:
        interpod.booked(alloc, node)  # (a pod with affinity to it may find a node now)
    nalloc, navail = node.allocated, node.available
    for name, value in res.items():
        nalloc[name] = nalloc.get(name, 0) + value
        navail[name] = navail.get(name, 0) - value
    app.allocations[key] = alloc
    app.ver += 1
    aalloc, max_used = app.allocated, app.max_used
    for name, value in res.items():
        used = aalloc[name] = aalloc.get(name, 0) + value
        if used > max_used.get(name, 0):  # only what this booking raised can pass its maximum
            max_used[name] = used
    q = app.queue
    first = not app.counted_running
    while q is not None:
        qa = q.allocated
        for name, value in res.items():
            qa[name] = qa.get(name, 0) + value
        if first:
            q.running_apps += 1
        if q.guaranteed:
            q.update_share()
        q = q.parent
    app.counted_running = True
    _app_share(part, app)
    part.emit(APP, ADD, _APP_ALLOC, app.app_id, key, "", res)
    part.emit(NODE, ADD, _NODE_ALLOC, node.node_id, key, "", res)
    if notify:
        part.out.alloc_new(app.rm_id, alloc)
    part.allocations_made += 1
    if not recovered:
        part.metrics.allocated[app.queue.path] += 1    # YuniKorn's container allocation counters
    part.version += 1
    return alloc


def _app_share(part: PartitionState, app: Application) -> None:
    base = app.queue.guaranteed or app.queue.max or part.capacity
    app.share = resources.share(app.allocated, base)


def remove(part: PartitionState, app: Application, alloc: Allocation, detail: int, *,
           termination: str = "", message: str = "", node_removed: bool = False,
           replacing: bool = False) -> None:
    """Unbook an allocation; `termination` set = tell the shim (an engine-side release)."""
    res = alloc.resource
    node = part.nodes.get(alloc.node_id)
    if node is not None and node.allocations.pop(alloc.key, None) is not None:
        node.ver += 1
        interpod = part.interpod
        if interpod.trackers or alloc.placement is not None:
            interpod.released(alloc, node)  # (a pod it kept away may find a node now)
        nalloc, navail = node.allocated, node.available
        for name, value in res.items():
            nalloc[name] = nalloc.get(name, 0) - value
            navail[name] = navail.get(name, 0) + value
        if not node_removed:
            part.emit(NODE, REMOVE, _NODE_ALLOC, node.node_id, alloc.key, message, res)
            if node.index_pos >= 0 and node.reserved_for is None:
                part.index.freed(node)
    del app.allocations[alloc.key]
    app.ver += 1
    app.track_released(alloc, node.attributes.get(INSTANCE_TYPE_ATTRIBUTE, "") if node else "",
                       part.wall_clock())
    aalloc = app.allocated
    for name, value in res.items():
        aalloc[name] = aalloc.get(name, 0) - value
    last = not app.allocations and not replacing
    preempted = alloc.preempted
    q = app.queue
    while q is not None:
        qa = q.allocated
        for name, value in res.items():
            qa[name] = qa.get(name, 0) - value
        if preempted:
            qp = q.preempting
            for name, value in res.items():
                qp[name] = qp.get(name, 0) - value
        if last and app.counted_running:
            q.running_apps -= 1
        if q.guaranteed:
            q.update_share()
        q = q.parent
    if last:
        app.counted_running = False
    _app_share(part, app)
    part.emit(APP, REMOVE, detail, app.app_id, alloc.key, message, res)
    part.metrics.released[app.queue.path] += 1
    part.ugm.decrease(app.queue.path, app.app_id, res, app.ugi, last)
    if termination:
        part.out.alloc_released(app.rm_id, alloc, termination, message)
    part.version += 1


def release(part: PartitionState, app_id: str, key: str, termination: str, message: str = "") -> int:
    """The shim released allocations (all of the app's if key is empty); how many (then the
    caller asks `apps.check_done` whether the application is done)."""
    app = part.apps.get(app_id)
    if app is None:
        return 0
    detail = TERMINATION_DETAIL.get(termination or "STOPPED_BY_RM", int(Detail.ALLOC_CANCEL))
    allocs = [app.allocations[key]] if key in app.allocations else (
        list(app.allocations.values()) if not key else [])
    for alloc in allocs:
        if alloc.key in app.allocations:
            if alloc.placeholder and detail == int(Detail.ALLOC_TIMEOUT):
                app.count_timedout(alloc.task_group)
            remove(part, app, alloc, detail, message=message)
    return len(allocs)


def add_existing(part: PartitionState,
                 request: ExistingAllocation) -> tuple[Allocation | None, str | None]:
    """A recovered, already bound allocation, booked even above the queue max: (the
    allocation, None), or (None, why not), or (None, None) for one already booked. The caller
    then tells the lifecycle (`apps.allocated`)."""
    app = part.apps.get(request.application_id)
    if app is None:
        return None, f"unknown application {request.application_id}"
    node = part.nodes.get(request.node_id)
    if node is None:
        return None, f"unknown node {request.node_id}"
    key = request.allocation_key
    if key in app.allocations:
        return None, None
    res = dict(request.resource_per_alloc)
    tags = dict(request.allocation_tags)
    ask = app.asks.get(key)
    if ask is not None:
        asks.remove(part, app, ask, int(Detail.APP_REQUEST), "bound before recovery")
    # an existing allocation: tracked even above a (since lowered) user/group limit
    part.ugm.increase(app.queue.path, app.app_id, res, app.ugi, force=True)
    if request.placeholder and ask is None:     # a pending one was counted when it was asked
        app.count_placeholder(request.task_group_name, res)
    policy = request.preemption_policy or DEFAULT_PREEMPTION
    alloc = book(part, app, key, res, node, placeholder=request.placeholder,
                 task_group=request.task_group_name, priority=request.priority, recovered=True,
                 notify=False, tags=tags, placement=_running_placement(tags),
                 preempt_self=policy.allow_preempt_self, originator=request.originator)
    return alloc, None


def _running_placement(tags: dict[str, str]) -> Placement | None:
    """A recovered pod's placement, for its anti-affinity terms; a malformed tag counts as
    none (the pod runs already: it is booked whatever its tag says)."""
    try:
        return placement_of_tag(tags[PLACEMENT_TAG]) if PLACEMENT_TAG in tags else None
    except ValueError:
        return None
