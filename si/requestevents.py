"""The request events' messages, written by the engine and read by the shim.

The engine explains a waiting ask with a REQUEST event (YuniKorn's ask_events.go texts); the shim
posts each as an `Informational` event on the pod and, as YuniKorn's shim does for the core's
container scheduling state, a `PodUnschedulable` event saying whether the queue's (or user's)
quota or the nodes' resources keep it waiting (`unschedulable`). One spelling, here, so the two
sides cannot drift apart.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

_QUEUE = "does not fit in queue"
_USER = "exceeds the available user quota"
_NODES = "does not fit on any of"


class Waiting(enum.Enum):
    """Why an ask waits, as YuniKorn's UpdateContainerSchedulingState tells its shim."""

    QUOTA = "skipped"      # SKIPPED: a queue or user quota (no autoscaling wanted)
    RESOURCES = "failed"   # FAILED: no node has room


def go_resource(resource: Mapping[str, int]) -> str:
    """A resource as YuniKorn's messages print it (Go's %v of a map: sorted keys)."""
    return "map[" + " ".join(f"{name}:{value}" for name, value in sorted(resource.items())) + "]"


def queue_quota(key: str, queue: str, requested: Mapping[str, int],
                available: Mapping[str, int]) -> str:
    return (f"Request '{key}' {_QUEUE} '{queue}' (requested {go_resource(requested)}, "
            f"available {go_resource(available)})")


def user_quota(key: str, queue: str, reason: str) -> str:
    return f"Request '{key}' {_USER} in queue '{queue}': {reason}"


def no_node(key: str, nodes: int, reasons: str) -> str:
    return f"Request '{key}' {_NODES} {nodes} nodes: 0/{nodes} nodes are available: {reasons}"


def unschedulable(message: str) -> Waiting | None:
    """What a request event's message says about why the ask waits (None: it does not wait)."""
    if not message.startswith("Request '"):
        return None
    if _QUEUE in message or _USER in message:
        return Waiting.QUOTA
    if _NODES in message:
        return Waiting.RESOURCES
    return None
