"""What the core decided, for the driver to carry out: `Actions` and its parts."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..state import Transition


@dataclasses.dataclass(frozen=True, slots=True)
class Bind:
    """POST the binding of a pod to a node (`generation`: the SI connection that asked)."""

    uid: str
    namespace: str
    name: str
    node: str
    generation: int


@dataclasses.dataclass(frozen=True, slots=True)
class KubeEvent:
    """A Kubernetes Event to post about an object (a pod, or a node)."""

    kind: str
    namespace: str
    name: str
    uid: str
    reason: str
    message: str
    type: str = "Normal"


@dataclasses.dataclass(frozen=True, slots=True)
class PodStatus:
    """Patch a pod's status (strategic merge: conditions merge on `type`), as YuniKorn's shim
    does: phase Failed for the waiting pods of a rejected application
    (failTaskPodWithReasonAndMsg), `PodScheduled=False` for a pod that waits (updatePodCondition,
    what a cluster autoscaler looks at)."""

    namespace: str
    name: str
    status: dict[str, Any]


@dataclasses.dataclass(slots=True)
class Actions:
    """One batch: SI messages (wire dicts, in sending order), bindings, Events, pods to delete
    (namespace, name) or create, and the shim state transitions to log."""

    si: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    binds: list[Bind] = dataclasses.field(default_factory=list)
    events: list[KubeEvent] = dataclasses.field(default_factory=list)
    deletes: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    preempted: set[tuple[str, str]] = dataclasses.field(default_factory=set)
    """Of `deletes`, the preemption victims: marked `DisruptionTarget` before they are deleted."""
    creates: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    transitions: list[Transition] = dataclasses.field(default_factory=list)
    statuses: list[PodStatus] = dataclasses.field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.si or self.binds or self.events or self.deletes or self.creates
                    or self.transitions or self.statuses)
