"""Pending asks: added by the RM, released by it, taken by the cycle when allocated.

An ask counts in its application's and every ancestor queue's pending resources and
`pending_count` from `add` until `take` (allocated) or `remove` (cancelled, with its event).
A pending ask sent again is a replay, except for its placement tag and labels, which replace
the ask's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.app_state import SCHEDULABLE_STATES, AppState
from engine.objects import Application, Ask
from engine.partition import reservations
from engine.partition.eventcodes import ADD, APP, REMOVE
from engine.predicates import placement_of_tag
from shm.events import EventChangeDetail as Detail
from si import resources
from si.requests import DEFAULT_PREEMPTION
from si.tags import LABEL_TAG_PREFIX, PLACEMENT_TAG

if TYPE_CHECKING:
    from engine.partition.state import PartitionState
    from si.messages import AllocationAsk


def add(part: PartitionState, rm_id: str,
        request: AllocationAsk) -> tuple[Ask | None, str | None]:
    """Add a pending ask: (the new ask, None), or (None, why not), or (None, None) for a
    replay. What a new ask does to its application is `apps.asked`, the caller's next step."""
    app = part.apps.get(request.application_id)
    if app is None:
        return None, f"unknown application {request.application_id}"
    key = request.allocation_key
    if key in app.asks:
        return None, _replace_placement(part, app, app.asks[key], request)
    if key in app.allocations:
        return None, None  # a replay of what we have: idempotent
    if app.fsm.state not in SCHEDULABLE_STATES and app.fsm.state is not AppState.NEW:
        return None, f"application {app.app_id} is {app.fsm.state.value}"
    res = dict(request.resource_ask)
    tags = dict(request.allocation_tags)
    try:
        placement = placement_of_tag(tags[PLACEMENT_TAG]) if PLACEMENT_TAG in tags else None
    except ValueError as exc:
        return None, f"ask {key}: allocationTags.{PLACEMENT_TAG}: {exc}"
    ask = Ask(key, app.app_id, res, request.priority, request.placeholder,
              request.task_group_name, tags, create_time=part.wall_clock(), rm_id=rm_id,
              placement=placement)
    policy = request.preemption_policy or DEFAULT_PREEMPTION
    ask.allow_preempt_self = policy.allow_preempt_self
    ask.allow_preempt_other = policy.allow_preempt_other
    ask.originator = request.originator
    ask.queued_ns = part.clock()
    app.asks[key] = ask
    if placement is not None:
        part.interpod.track(ask)
    app.pending.add(ask)
    if ask.priority:
        app.queue.prioritized += 1
    app.ver += 1
    app.pending_res = resources.add(app.pending_res, res)
    for q in app.queue.ancestors():
        q.pending_count += 1
        q.pending = resources.add(q.pending, res)
    part.emit(APP, ADD, int(Detail.APP_REQUEST), app.app_id, key, "", res)
    part.version += 1
    return ask, None


def release(part: PartitionState, app_id: str, key: str, message: str = "") -> bool:
    """The RM released an ask (every ask of the app if key is empty); whether any was found
    (then the caller asks `apps.check_done` whether the application is done)."""
    app = part.apps.get(app_id)
    if app is None:
        return False
    keys = [key] if key else list(app.asks)
    found = False
    for k in keys:
        ask = app.asks.get(k)
        if ask is not None:
            remove(part, app, ask, int(Detail.APP_REQUEST), message)
            found = True
    return found


def _replace_placement(part: PartitionState, app: Application, ask: Ask,
                       request: AllocationAsk) -> str | None:
    """A pending ask sent again: a replay, except for its placement tag and its label tags,
    which replace the ask's (a pod's tolerations or labels may change while it waits, e.g. to
    let it onto a tainted node). A bad new tag rejects the ask, which is then gone (as the RM
    is told)."""
    tags = request.allocation_tags
    tag = tags.get(PLACEMENT_TAG)
    labels = {k: v for k, v in tags.items() if k.startswith(LABEL_TAG_PREFIX)}
    old_labels = {k: v for k, v in ask.tags.items() if k.startswith(LABEL_TAG_PREFIX)}
    if tag == ask.tags.get(PLACEMENT_TAG) and labels == old_labels:
        return None
    try:
        placement = placement_of_tag(tag) if tag is not None else None
    except ValueError as exc:
        remove(part, app, ask, int(Detail.REQUEST_CANCEL), "placement tag rejected")
        return f"ask {ask.key}: allocationTags.{PLACEMENT_TAG}: {exc}"
    part.interpod.forget(ask)
    for key in old_labels:
        del ask.tags[key]
    ask.tags.update(labels)
    ask.meta = None
    ask.set_placement(placement, tag)
    part.interpod.track(ask)
    ask.reported.discard("reserve")
    ask.reported.discard("nonode")
    app.ver += 1
    part.version += 1
    return None


def remove(part: PartitionState, app: Application, ask: Ask, detail: int, message: str = "") -> None:
    """An ask leaves without an allocation (cancelled, timed out): APP / REMOVE emitted."""
    take(part, app, ask)
    part.emit(APP, REMOVE, detail, app.app_id, ask.key, message, ask.resource)
    part.version += 1


def take(part: PartitionState, app: Application, ask: Ask) -> None:
    """An ask leaves the pending list because it is being allocated (no event)."""
    if ask.reserved_node:
        reservations.unreserve(part, ask)
    if ask.interpod is not None:
        part.interpod.forget(ask)
    del app.asks[ask.key]
    pending = app.pending
    if pending and pending[0] is ask:
        pending.pop(0)  # the usual case (asks go in order): no bisect by key
    else:
        pending.remove(ask)
    if ask.priority:
        app.queue.prioritized -= 1
    app.ver += 1
    res = ask.resource
    pr = app.pending_res
    for name, value in res.items():
        pr[name] = pr.get(name, 0) - value
    q = app.queue
    while q is not None:
        q.pending_count -= 1
        qp = q.pending
        for name, value in res.items():
            qp[name] = qp.get(name, 0) - value
        q = q.parent
