"""The events YuniKorn's shim posts on a pod, so `kubectl describe pod` explains it the same way.

From k8shim pkg/cache/task.go and context.go, with their reasons and texts (`alias` is
`namespace/name`):

- Scheduling (Normal): "<alias> is queued and waiting for allocation", when the pod's ask is
  first sent; a gang member also gets GangScheduling "Pod belongs to the taskGroup <tg>, it will
  be scheduled as a gang member".
- Scheduled and PodBindSuccessful (Normal) once bound: "Successfully assigned <alias> to node N",
  "Pod <alias> is successfully bound to node N".
- Informational (Normal): each request event the engine sends (why the ask waits, in YuniKorn's
  ask_events.go words), and once per kind the pod's condition `PodScheduled=False` (reason
  `SchedulingSkipped` or `Unschedulable`, the message the engine's) with PodUnschedulable
  (Normal): "Task <alias> is skipped
  from scheduling because the queue quota has been exceed" (a queue or user quota) or "Task
  <alias> is pending for the requested resources become available" (no node has room).
- TaskCompleted (Normal): "Task <alias> is completed", when a pod it scheduled ends.

Each is posted once per pod (`ShimCore.announced`, dropped with the pod), so a re-sent ask (an
engine restart) does not repeat them.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from si.requestevents import Waiting, unschedulable

from ..mapping import PodInfo
from .actions import KubeEvent, PodStatus

if TYPE_CHECKING:
    from .coordinator import ShimCore

_CONDITION_REASON = {Waiting.QUOTA: "SchedulingSkipped", Waiting.RESOURCES: "Unschedulable"}
"""YuniKorn's PodScheduled=False reasons (context.go HandleContainerStateUpdate)."""


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


_WAITING_TEXT = {
    Waiting.QUOTA: "Task {} is skipped from scheduling because the queue quota has been exceed",
    Waiting.RESOURCES: "Task {} is pending for the requested resources become available",
}


def _post(core: "ShimCore", info: PodInfo, reason: str, message: str, once: str = "") -> None:
    posted = core.announced.setdefault(info.uid, set())
    if (once or reason) in posted:
        return
    posted.add(once or reason)
    core.actions.events.append(KubeEvent("Pod", info.namespace, info.name, info.uid, reason,
                                         message))


def queued(core: "ShimCore", info: PodInfo) -> None:
    """The pod's ask goes to the scheduler for the first time."""
    _post(core, info, "Scheduling", f"{info.key} is queued and waiting for allocation")
    if info.task_group:
        _post(core, info, "GangScheduling", f"Pod belongs to the taskGroup {info.task_group}, "
                                            "it will be scheduled as a gang member")


def bound(core: "ShimCore", namespace: str, name: str, uid: str, node: str) -> None:
    """The binding succeeded (what kube-scheduler and YuniKorn's shim post on every bind)."""
    alias = f"{namespace}/{name}"
    for reason, message in (("Scheduled", f"Successfully assigned {alias} to node {node}"),
                            ("PodBindSuccessful",
                             f"Pod {alias} is successfully bound to node {node}")):
        core.actions.events.append(KubeEvent("Pod", namespace, name, uid, reason, message))


def request_event(core: "ShimCore", info: PodInfo, message: str) -> None:
    """A request event from the engine: Informational, and once per kind the pod's
    `PodScheduled=False` condition and PodUnschedulable."""
    core.actions.events.append(KubeEvent("Pod", info.namespace, info.name, info.uid,
                                         "Informational", message))
    waiting = unschedulable(message)
    if waiting is None or info.node_name:
        return
    once = f"PodUnschedulable/{waiting.value}"
    if once in core.announced.get(info.uid, ()):
        return
    core.actions.statuses.append(PodStatus(info.namespace, info.name, {"conditions": [{
        "type": "PodScheduled", "status": "False", "reason": _CONDITION_REASON[waiting],
        "message": message, "lastTransitionTime": _now()}]}))
    _post(core, info, "PodUnschedulable", _WAITING_TEXT[waiting].format(info.key), once=once)


def completed(core: "ShimCore", info: PodInfo) -> None:
    """A pod it scheduled ended (Succeeded or Failed)."""
    _post(core, info, "TaskCompleted", f"Task {info.key} is completed")


def forget(core: "ShimCore", uid: str) -> None:
    """The pod is gone: what was posted about it is forgotten with it."""
    core.announced.pop(uid, None)
