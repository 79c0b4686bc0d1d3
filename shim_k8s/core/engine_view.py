"""The engine's view as the core believes it, from what the engine accepted."""

from __future__ import annotations

import dataclasses

from si.resources import Resource


@dataclasses.dataclass(slots=True)
class EngineNode:
    """A node as last sent to the engine."""

    allocatable: Resource
    occupied: Resource
    schedulable: bool
    attributes: dict[str, str]   # labels, taints and ready as last sent


@dataclasses.dataclass(slots=True)
class EngineAllocation:
    """An allocation the engine holds for a pod."""

    app_id: str
    node: str
    termination: str = ""
    """PREEMPTED_BY_SCHEDULER once the engine preempted it: the pod's end confirms that type."""
