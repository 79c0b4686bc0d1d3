"""Applications and tasks: our pods become applications, asks and existing allocations.

The first pod of an application defines it (queue, user, gang) across engine restarts; a
pending pod is asked for (after its gang's placeholders are placed), a bound one is an existing
allocation on a node the engine knows (else held until the node appears), a finished or deleted
one releases what the engine holds.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from si import messages
from si import protocol as si
from si import resources
from si.tags import (FORCE_CREATE_TAG, NAMESPACE_APP_TAG, NAMESPACE_TAG, PLACEMENT_TAG,
                     POD_NAME_TAG, label_tags)

from .. import mapping
from ..mapping import PodInfo
from ..state import ShimState
from . import nodes, placeholders, podevents
from .actions import KubeEvent, PodStatus
from .engine_view import EngineAllocation

if TYPE_CHECKING:
    from .coordinator import ShimCore

log = logging.getLogger("ykshm.shim")


def on_pod(core: ShimCore, event_type: str, obj: Mapping[str, Any]) -> None:
    """A pod watch event (ADDED / MODIFIED / DELETED)."""
    meta = obj.get("metadata") or {}
    key = f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
    uid = mapping.pod_uid(obj)
    old_uid = core.pod_keys.get(key)
    if old_uid is not None and old_uid != uid:  # same name, new object
        _forget_pod(core, old_uid)
        nodes.forget_other(core, old_uid)
    if event_type == "DELETED":
        _forget_pod(core, uid)
        core.pod_keys.pop(key, None)
        nodes.forget_other(core, uid)
        return
    core.pod_keys[key] = uid
    if not mapping.is_ours(obj):
        _forget_pod(core, uid)
        node = mapping.pod_node(obj)
        if node and not mapping.pod_finished(obj):
            nodes.set_other(core, uid, node, mapping.occupied_resource(obj))
        else:
            nodes.forget_other(core, uid)
        return
    try:
        info = mapping.pod_info(obj, core.pods.get(uid))
    except mapping.PodError as exc:
        reason = str(exc)
        previous = core.bad_pods.get(uid)
        _forget_pod(core, uid)
        core.bad_pods[uid] = reason
        if previous != reason:
            log.warning("pod %s skipped: %s", key, reason)
            core.actions.events.append(KubeEvent(
                "Pod", str(meta.get("namespace") or "default"), str(meta.get("name", "")),
                uid, "InvalidPod", f"pod cannot be scheduled: {reason}", "Warning"))
        return
    core.bad_pods.pop(uid, None)
    prev = core.pods.get(uid)
    core.pods[uid] = info
    _index_pod(core, prev, info)
    if prev is not None and not prev.finished and info.finished and info.node_name:
        podevents.completed(core, info)
    reconcile_pod(core, uid)
    if prev is not None and (prev.placement, prev.labels) != (info.placement, info.labels) \
            and uid in core.e_asks and core.engine_live():
        # tolerations or labels changed on a waiting pod: the engine replaces a re-sent ask's
        # placement and labels
        core.batch.asks.append(_ask_message(core, uid, info))


def _index_pod(core: ShimCore, prev: PodInfo | None, info: PodInfo | None) -> None:
    if prev is not None:
        if prev.node_name:
            members = core.by_node.get(prev.node_name)
            if members is not None:
                members.discard(prev.uid)
                if not members:
                    del core.by_node[prev.node_name]
        live = core.app_live.get(prev.app_id)
        if live is not None:
            live.discard(prev.uid)
            if not live:
                del core.app_live[prev.app_id]
        core.batch.touched_apps.add(prev.app_id)
    if info is not None:
        if info.node_name and not info.finished:
            core.by_node.setdefault(info.node_name, set()).add(info.uid)
        if not info.finished:
            core.app_live.setdefault(info.app_id, set()).add(info.uid)


def _forget_pod(core: ShimCore, uid: str) -> None:
    if uid in core.refused:
        core.refused.discard(uid)
        nodes.forget_other(core, uid)
    prev = core.pods.pop(uid, None)
    core.bad_pods.pop(uid, None)
    podevents.forget(core, uid)
    core.assumed.pop(uid, None)
    core.bind_failures.pop(uid, None)
    core.rejected_asks.pop(uid, None)
    core.dirty.discard(uid)
    if prev is not None:
        _index_pod(core, prev, None)
    release(core, uid, "pod deleted")


def release(core: ShimCore, uid: str, message: str) -> None:
    """The pod is gone or finished: release whatever the engine holds for it."""
    if not core.engine_live():
        return
    release_alloc(core, uid, message)
    release_ask(core, uid, message)


def release_alloc(core: ShimCore, uid: str, message: str) -> None:
    """Release the allocation the engine holds for uid, if any (the shim stopped it)."""
    alloc = core.e_allocs.pop(uid, None)
    if alloc is not None:
        core.batch.releases.append(messages.AllocationRelease(
            alloc.app_id, uid, core.partition, alloc.termination or si.TERMINATION_STOPPED_BY_RM,
            message))
        core.batch.touched_apps.add(alloc.app_id)


def release_ask(core: ShimCore, uid: str, message: str) -> None:
    """Release the ask the engine holds for uid, if any."""
    app = core.e_asks.pop(uid, None)
    if app is not None:
        core.batch.ask_releases.append(messages.AskRelease(app, uid, core.partition, message))
        core.batch.touched_apps.add(app)


def _app_tags(info: PodInfo, bound: bool) -> dict[str, str]:
    """YuniKorn's application tags: the namespace, and create-force when the pod that makes the
    application known is already bound (recovery: the engine then places what its rules no
    longer accept into root.@recovery@ rather than rejecting a running pod's application)."""
    return {NAMESPACE_APP_TAG: info.namespace, FORCE_CREATE_TAG: "true" if bound else "false"}


def _ensure_app(core: ShimCore, info: PodInfo) -> bool:
    if info.app_id in core.e_apps:
        return True
    if info.app_id in core.rejected_apps:
        return False
    # the first pod seen defines the application (queue, user, gang), and keeps defining it
    # across engine restarts, so recovery puts it in the same queue as before
    bound = bool(info.node_name)
    info = core.app_origin.setdefault(info.app_id, info)
    core.e_apps[info.app_id] = info.queue
    app = messages.AddApplication(
        info.app_id, info.queue, core.partition,
        messages.UserGroupInfo(info.user, tuple(info.groups)), _app_tags(info, bound))
    if info.task_groups:
        app = msgspec.structs.replace(
            app, placeholder_ask=resources.total(
                {name: value * group.min_member
                 for name, value in group.min_resource.items()}
                for group in info.task_groups),
            gang_scheduling_style=info.gang_style or si.GANG_SOFT,
            execution_timeout_ms=info.placeholder_timeout_s * 1000)
    core.batch.apps.append(app)
    return True


def reconcile_pod(core: ShimCore, uid: str) -> None:
    info = core.pods.get(uid)
    if not core.engine_live():
        if info is not None:
            core.dirty.add(uid)
        return
    if info is None or info.finished:
        release(core, uid, "pod finished" if info is not None else "pod deleted")
        if uid in core.refused:
            core.refused.discard(uid)
            nodes.forget_other(core, uid)
        return
    node = info.node_name or core.assumed.get(uid, "")
    if info.node_name:
        core.assumed.pop(uid, None)
    alloc = core.e_allocs.get(uid)
    if node:
        if alloc is not None and alloc.node == node:
            core.dirty.discard(uid)
            return
        if alloc is not None and uid not in core.binding:
            release(core, uid, f"pod is bound to {node}, not {alloc.node}")
        release_ask(core, uid, f"pod was bound to {node} elsewhere")
        if uid in core.rejected_asks:
            if uid in core.refused:
                nodes.set_other(core, uid, node, info.resource)
            core.dirty.discard(uid)
            return
        if node in core.e_nodes:
            if not _ensure_app(core, info):
                if core.state is ShimState.RUNNING or info.app_id in core.rejected_apps:
                    core.refused.add(uid)
                    nodes.set_other(core, uid, node, info.resource)
                return
            core.e_allocs[uid] = EngineAllocation(info.app_id, node)
            core.batch.allocations.append(messages.ExistingAllocation(
                uid, info.app_id, node, core.partition, info.resource, info.placeholder,
                info.task_group, info.priority, meta_tags(info), preemption_policy(info),
                originator(core, info)))
        # else: held until the node is known to the engine (orphan adoption)
        core.dirty.discard(uid)
        return
    # pending
    if uid in core.binding or alloc is not None or uid in core.e_asks:
        core.dirty.discard(uid)
        return
    if core.state is not ShimState.RUNNING:
        core.dirty.add(uid)
        return
    core.dirty.discard(uid)
    if uid in core.rejected_asks or info.deleting:
        return
    if not _ensure_app(core, info):
        return
    if info.task_groups and not info.placeholder:
        app_id = info.app_id
        if app_id not in core.placeholders_made:
            core.placeholders_made.add(app_id)
            if any(core.pods[u].node_name for u in core.app_live.get(app_id, ())):
                core.gang_started.add(app_id)  # already running (a restarted shim)
            else:
                core.actions.creates.extend(placeholders.placeholder_pods(info))
        if not placeholders.gang_ready(core, app_id):
            core.dirty.add(uid)                # held until the placeholders are placed
            return
    core.e_asks[uid] = info.app_id
    core.batch.asks.append(_ask_message(core, uid, info))
    podevents.queued(core, info)


def meta_tags(info: PodInfo) -> dict[str, str]:
    """The tags YuniKorn's shim puts on every ask and allocation (the UI names pods by them;
    the engine matches inter-pod terms against the labels), plus the placement tag: a running
    pod's anti-affinity terms keep other pods away."""
    tags = {NAMESPACE_TAG: info.namespace, POD_NAME_TAG: info.name, **label_tags(dict(info.labels))}
    if info.placement:
        tags[PLACEMENT_TAG] = info.placement
    return tags


def _ask_message(core: ShimCore, uid: str, info: PodInfo) -> messages.AllocationAsk:
    tags = meta_tags(info)
    return messages.AllocationAsk(uid, info.app_id, core.partition, info.resource,
                                  info.priority, info.placeholder, info.task_group, tags,
                                  preemption_policy(info), originator(core, info))


def originator(core: ShimCore, info: PodInfo) -> bool:
    """Whether the pod is its application's originator: the pod that defined the application
    (YuniKorn's shim makes that pod the owner of the app's placeholders and marks its task the
    originator), never a placeholder."""
    origin = core.app_origin.get(info.app_id)
    return not info.placeholder and origin is not None and origin.uid == info.uid


def preemption_policy(info: PodInfo) -> messages.PreemptionPolicy:
    """SI PreemptionPolicy of a pod, as YuniKorn's shim sends it on every ask and allocation."""
    return messages.PreemptionPolicy(info.allow_preempt_self, info.allow_preempt_other)


FINISHED_APP_STATES = frozenset({"Completed", "Failed", "Expired", "Rejected"})


def on_application_response(core: ShimCore, message: messages.ApplicationResponse) -> None:
    """Accepted applications are the engine's to end; rejected ones: their pods are told why and
    not asked for; a finished one is forgotten, so a new pod of the same ID adds it again."""
    core.e_accepted.update(message.accepted)
    for update in message.updated:
        if update.state in FINISHED_APP_STATES and not core.app_live.get(update.application_id):
            core.e_apps.pop(update.application_id, None)
            core.e_accepted.discard(update.application_id)
    for rejected in message.rejected:
        app = rejected.application_id
        reason = rejected.reason or "rejected"
        core.e_apps.pop(app, None)
        core.rejected_apps[app] = reason
        log.warning("application %s rejected: %s", app, reason)
        for uid in [u for u, a in core.e_asks.items() if a == app]:
            del core.e_asks[uid]
        fail_waiting_pods(core, app, reason)


APPLICATION_REJECTED = "ApplicationRejected"
"""YuniKorn's ApplicationRejectedFailure: the pod status reason of a rejected app's pods."""


def fail_waiting_pods(core: ShimCore, app: str, reason: str) -> None:
    """As YuniKorn's shim (application.go handleFailApplicationEvent): each pod of the rejected
    application that is not bound gets phase Failed, reason ApplicationRejected, and the Warning
    event ApplicationFailed; bound pods run on. The status message is YuniKorn's too: the text
    between the first and second ':' of "ApplicationRejected: <reason>"."""
    failure = f"{APPLICATION_REJECTED}: {reason}"
    for uid in sorted(core.app_live.get(app, ()))[:100]:
        info = core.pods[uid]
        if info.node_name or uid in core.assumed:
            continue
        core.actions.statuses.append(PodStatus(info.namespace, info.name, {
            "phase": "Failed", "reason": APPLICATION_REJECTED, "message": failure.split(":")[1]}))
        core.actions.events.append(KubeEvent(
            "Pod", info.namespace, info.name, uid, "ApplicationFailed",
            f"Application {app} scheduling failed, reason: {failure}", "Warning"))


def on_event_record(core: ShimCore, record: messages.EventRecord) -> None:
    """A request event about one of our pods becomes a Kubernetes Event on it."""
    info = core.pods.get(record.object_id)
    if info is not None:
        podevents.request_event(core, info, record.message)
