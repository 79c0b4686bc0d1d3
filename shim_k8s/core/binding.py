"""Binding: allocations from the engine become bindings; their results; releases and rejections.

A pod that already has `spec.nodeName` is never bound; a 409 from the binding is "already
bound"; a pod is bound at most MAX_BIND_ATTEMPTS (3) times in all: after its third failed
binding it is left alone and rejected as "binding failed 3 times".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from si import messages
from si import protocol as si

from . import nodes, placeholders, podevents, registration, tasks
from .actions import Bind, KubeEvent
from .engine_view import EngineAllocation

if TYPE_CHECKING:
    from .coordinator import ShimCore

MAX_BIND_ATTEMPTS = 3


def on_bind_result(core: ShimCore, bind: Bind, ok: bool, conflict: bool = False,
                   gone: bool = False, reason: str = "") -> None:
    """The POST binding finished: ok, 409 (already bound), 404 (pod gone) or failed."""
    core.binding.pop(bind.uid, None)
    if ok:
        core.bindings_done += 1
        core.bind_failures.pop(bind.uid, None)
        info = core.pods.get(bind.uid)
        if info is not None and not info.node_name:
            core.assumed[bind.uid] = bind.node
        podevents.bound(core, bind.namespace, bind.name, bind.uid, bind.node)
        tasks.reconcile_pod(core, bind.uid)
    elif conflict or gone:
        core.bind_conflicts += conflict
        # already bound (by us before a restart, or by someone else): the watch tells where
        tasks.reconcile_pod(core, bind.uid)
    else:
        core.bind_errors += 1
        failures = core.bind_failures.get(bind.uid, 0) + 1
        core.bind_failures[bind.uid] = failures
        if bind.generation == core.generation:
            tasks.release_alloc(core, bind.uid, f"binding failed: {reason}")
        core.actions.events.append(KubeEvent(
            "Pod", bind.namespace, bind.name, bind.uid, "FailedBinding",
            f"binding to node {bind.node} failed: {reason}", "Warning"))
        if failures < MAX_BIND_ATTEMPTS:
            tasks.reconcile_pod(core, bind.uid)
        else:
            core.rejected_asks[bind.uid] = f"binding failed {failures} times"
    registration.progress(core)


def on_allocation_response(core: ShimCore, message: messages.AllocationResponse) -> None:
    """New allocations are bound; engine-side releases delete preempted, replaced and timed-out
    pods (a preempted pod's end is confirmed to the engine); released or rejected asks are
    told to their pods."""
    for new in message.new:
        uid, app, node = new.allocation_key, new.application_id, new.node_id
        core.e_asks.pop(uid, None)
        core.e_allocs[uid] = EngineAllocation(app, node)
        info = core.pods.get(uid)
        if info is None or info.finished:
            tasks.release(core, uid, "pod is gone")
            continue
        bound = info.node_name or core.assumed.get(uid) or core.binding.get(uid)
        if bound:
            if bound != node:
                tasks.release(core, uid, f"pod is already bound to {bound}")
                tasks.reconcile_pod(core, uid)
            continue
        core.binding[uid] = node
        core.actions.binds.append(Bind(uid, info.namespace, info.name, node,
                                        core.generation))
        if info.placeholder:
            placeholders.gang_progress(core, info.app_id)
    for released in message.released:
        uid = released.allocation_key
        term = released.termination_type
        if term == si.TERMINATION_PREEMPTED:
            _preempted(core, uid, released.message)
            continue
        alloc = core.e_allocs.pop(uid, None)
        if alloc is not None:
            core.batch.touched_apps.add(alloc.app_id)
        info = core.pods.get(uid)
        if info is not None and term in (si.TERMINATION_PLACEHOLDER_REPLACED,
                                          si.TERMINATION_TIMEOUT):
            core.actions.deletes.append((info.namespace, info.name))
            # until the watch says it is gone, an update of the pod (bound, Running, terminating)
            # must not hand it back to the engine as an existing allocation (`reconcile_pod`
            # skips what the engine refused or released): a gang of 3 showed placeholderData 4
            core.rejected_asks[uid] = f"placeholder released by the scheduler ({term}): being deleted"
        if info is not None and info.placeholder:
            placeholders.gang_progress(core, info.app_id, gave_up=True)
    for released_ask in message.released_asks:
        uid = released_ask.allocation_key
        app = core.e_asks.pop(uid, None)
        if app is not None:
            core.batch.touched_apps.add(app)
        core.rejected_asks[uid] = released_ask.message or "ask released by the scheduler"
        info = core.pods.get(uid)
        if info is not None and info.placeholder:
            placeholders.gang_progress(core, info.app_id, gave_up=True)
        if info is not None:
            core.actions.events.append(KubeEvent(
                "Pod", info.namespace, info.name, uid, "AskReleased",
                core.rejected_asks[uid], "Warning"))
    for rejected in message.rejected:
        uid = rejected.allocation_key
        app = core.e_asks.pop(uid, None)
        if app is not None:
            core.batch.touched_apps.add(app)
        alloc = core.e_allocs.pop(uid, None)
        reason = rejected.reason or "rejected by the scheduler"
        core.rejected_asks[uid] = reason
        info = core.pods.get(uid)
        if alloc is not None:
            # an existing allocation the engine refused: the pod still runs there, so its
            # node counts it as occupied (never over-committed)
            core.batch.touched_apps.add(alloc.app_id)
            if info is not None and not info.finished:
                core.refused.add(uid)
                nodes.set_other(core, uid, alloc.node, info.resource)
        if info is not None and info.placeholder:
            placeholders.gang_progress(core, info.app_id, gave_up=True)
        if info is not None:
            core.actions.events.append(KubeEvent(
                "Pod", info.namespace, info.name, uid, "AskRejected", reason, "Warning"))


def _preempted(core: ShimCore, uid: str, message: str) -> None:
    """A preemption victim: the engine keeps its allocation until the pod is gone. The pod is
    marked `DisruptionTarget` (reason PreemptionByScheduler) and deleted (with a `Preempted`
    event on it, as kube-scheduler does with its victims), and its
    end -- the watch's DELETED, or finishing first -- is confirmed to the engine as
    PREEMPTED_BY_SCHEDULER (`tasks.release_alloc`). A pod already gone is confirmed at once."""
    alloc = core.e_allocs.get(uid)
    info = core.pods.get(uid)
    if alloc is None:
        return
    alloc.termination = si.TERMINATION_PREEMPTED
    if info is None or info.finished:
        tasks.release_alloc(core, uid, "pod already gone")
        return
    core.actions.deletes.append((info.namespace, info.name))
    core.actions.preempted.add((info.namespace, info.name))
    core.actions.events.append(KubeEvent(
        "Pod", info.namespace, info.name, uid, "Preempted",
        f"Preempted by the scheduler: {message or 'preempting allocations'}"))
