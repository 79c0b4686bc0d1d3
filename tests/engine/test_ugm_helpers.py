"""Shared helpers for the UGM tests (no tests here): an event-collecting emit, a state snapshot."""

from __future__ import annotations

import dataclasses
from typing import Any

from engine.ugm import QueueTracker, UserGroupManager


@dataclasses.dataclass(frozen=True)
class Event:
    type: int
    change: int
    detail: int
    object_id: str
    reference_id: str = ""
    message: str = ""
    resource: dict[str, int] | None = None


class Recorder:
    """The engine's event sink, collecting into a list."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, type, change_type, detail, object_id, reference_id="", message="", resource=None) -> None:
        self.events.append(
            Event(int(type), int(change_type), int(detail), object_id, reference_id, message,
                  None if resource is None else dict(resource))
        )

    def take(self) -> list[Event]:
        out, self.events = self.events, []
        return out


def _tree(node: QueueTracker) -> Any:
    return (
        node.queue_path,
        tuple(sorted(node.resource_usage.items())),
        tuple(sorted(node.running_applications)),
        tuple(_tree(node.child_queues[name]) for name in sorted(node.child_queues)),
    )


def snapshot(m: UserGroupManager) -> Any:
    """Everything the manager tracks, including None group links that JSON does not show."""
    users = {
        name: (
            tuple(sorted((app, g.group_name if g else None) for app, g in ut.app_groups.items())),
            _tree(ut.queue),
        )
        for name, ut in m._users.items()
    }
    groups = {name: (tuple(sorted(gt.applications)), _tree(gt.queue)) for name, gt in m._groups.items()}
    return users, groups


def check_invariants(m: UserGroupManager) -> None:
    """No negative usage, parents cover children, no empty node below root, no removable tracker."""
    trackers = [*m._users.values(), *m._groups.values()]
    for tracker in trackers:
        assert not tracker.is_removable(), tracker
        for node in tracker.queue.walk():
            assert all(v >= 0 for v in node.resource_usage.values()), node.resource_usage
            for child in node.child_queues.values():
                assert not child.is_empty(), child.queue_path
                assert child.running_applications <= node.running_applications
                for name, value in child.resource_usage.items():
                    assert node.resource_usage.get(name, 0) >= value
            child_sum: dict[str, int] = {}
            for child in node.child_queues.values():
                for name, value in child.resource_usage.items():
                    child_sum[name] = child_sum.get(name, 0) + value
            for name, value in child_sum.items():
                assert node.resource_usage.get(name, 0) >= value
    for ut in m._users.values():
        for app, gt in ut.app_groups.items():
            assert app in ut.queue.running_applications
            if gt is not None:
                assert m._groups.get(gt.group_name) is gt, "linked group tracker was unlinked"
                assert app in gt.applications
