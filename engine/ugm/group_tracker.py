"""The seed's groupTracker: usage of one group, shared by every user app linked to it.

Rules:
- `increase_resource` needs an application ID and adds it to `applications` (the apps linked
  to this group by any user), then updates the group's queue hierarchy.
- `decrease_resource` may have an empty application ID (usage only); with `remove_app` the app
  leaves `applications` and every level's running applications.
- The tracker is removable once no application is linked and no usage is left; the manager
  unlinks it in the same critical section as the decrease that emptied it (manager.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from engine.ugm.queue_tracker import QueueTracker


class GroupTracker:
    __slots__ = ("group_name", "applications", "queue")

    def __init__(self, group_name: str) -> None:
        if not group_name:
            raise ValueError("a group tracker needs a group name")
        self.group_name = group_name
        self.applications: set[str] = set()
        self.queue = QueueTracker()

    def increase_resource(self, queue_path: str, application_id: str, usage: Mapping[str, int]) -> None:
        if not application_id:
            raise ValueError("increase_resource needs an application ID")
        self.applications.add(application_id)
        self.queue.increase_resource(queue_path, application_id, usage)

    def decrease_resource(
        self, queue_path: str, application_id: str, usage: Mapping[str, int], remove_app: bool
    ) -> bool:
        """Decrease; True if the tracker is now removable."""
        self.queue.decrease_resource(queue_path, application_id, usage, remove_app)
        if remove_app:
            self.applications.discard(application_id)
        return self.is_removable()

    def is_removable(self) -> bool:
        return not self.applications and self.queue.is_empty()

    def __repr__(self) -> str:
        return f"GroupTracker({self.group_name!r}, apps={sorted(self.applications)})"
