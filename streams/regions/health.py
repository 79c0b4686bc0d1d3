"""The region health rule (OpenStreams Utils.checkRegion), pure: what the health source answers.

A region is healthy when every PE in pesInRegion exists with connectivity Full and its current
pod (the one matching job, PE id, the PE's launchCount and uid) exists with phase Running. A PE or
pod that is missing makes the health unknown (None), whatever the others say: the FSM ignores the
update until the monitors see the region whole again. A PE launched more than once
(launchCount > 1) means the region did not have a clean start, so its first healthy update resets.

A PE whose launchCount moved since the last answer was relaunched: its operators' state is gone,
so the region must reset even when the monitors never caught it unhealthy (the new pod may be
Running, and its peers Full again, before the operator looks). `Relaunches` remembers the launch
counts per region and reports such a move once.

The Kubernetes side (informer caches of ProcessingElement and Pod objects) builds one `PeView` per
PE and calls `region_health`; the operator calls that through its health source.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

FULL = "Full"
RUNNING = "Running"


@dataclasses.dataclass(frozen=True, slots=True)
class Health:
    """healthy: True, False, or None (unknown); clean_start False when a PE was relaunched."""

    healthy: bool | None
    clean_start: bool = True


@dataclasses.dataclass(frozen=True, slots=True)
class PeView:
    """What the rule needs of one PE: its connectivity ("Full" when every connection is up), its
    launchCount, and the phase of its current pod (None when that pod does not exist)."""

    connectivity: str
    launch_count: int
    pod_phase: str | None


def region_health(pes: Iterable[int], views: Mapping[int, PeView]) -> Health:
    """The region's health from its PEs' views (a PE missing from `views` does not exist)."""
    healthy, clean, unknown = True, True, False
    for pe in pes:
        view = views.get(pe)
        if view is None:
            unknown = True
            continue
        if view.connectivity != FULL:
            healthy = False
        if view.launch_count > 1:
            clean = False
        if view.pod_phase is None:
            unknown = True
        elif view.pod_phase != RUNNING:
            healthy = False
    return Health(None if unknown else healthy, clean)


class Relaunches:
    """The launch counts each region's PEs had at its last health answer."""

    def __init__(self) -> None:
        self._seen: dict[int, dict[int, int]] = {}

    def moved(self, region: int, views: Mapping[int, PeView]) -> bool:
        """Record the views' launch counts; True when a PE seen before has another one now."""
        before = self._seen.setdefault(region, {})
        moved = any(pe in before and before[pe] != v.launch_count for pe, v in views.items())
        before.update((pe, v.launch_count) for pe, v in views.items())
        return moved
