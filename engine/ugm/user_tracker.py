"""The seed's userTracker: usage of one user, and which group each of their apps counts against.

Rules:
- `app_groups` maps application ID -> GroupTracker or None. It is set once per application by
  `set_group_for_app` (a second call is a no-op, even over a None link) and removed only by
  `decrease_resource(..., remove_app=True)`.
- `has_group_for_app` answers on the key alone: a None link still counts as "has a group".
- `increase_resource` needs an application ID; the user's queue hierarchy is updated from root
  to the leaf. The group's own tracker is updated by the manager, never from here, so that the
  manager can check both before changing either.
- The tracker is removable once no application is linked and nothing is tracked in its queues.
"""

from __future__ import annotations

from collections.abc import Mapping

from engine.ugm.group_tracker import GroupTracker
from engine.ugm.queue_tracker import QueueTracker


class UserTracker:
    __slots__ = ("user_name", "app_groups", "queue")

    def __init__(self, user_name: str) -> None:
        if not user_name:
            raise ValueError("a user tracker needs a user name")
        self.user_name = user_name
        self.app_groups: dict[str, GroupTracker | None] = {}
        self.queue = QueueTracker()

    def has_group_for_app(self, application_id: str) -> bool:
        return application_id in self.app_groups

    def set_group_for_app(self, application_id: str, group_tracker: GroupTracker | None) -> bool:
        """Link an app to a group tracker (or to no group); True if linked now, False if no-op."""
        if not application_id:
            raise ValueError("set_group_for_app needs an application ID")
        if application_id in self.app_groups:
            return False
        self.app_groups[application_id] = group_tracker
        return True

    def group_for_app(self, application_id: str) -> GroupTracker | None:
        return self.app_groups.get(application_id)

    def increase_resource(self, queue_path: str, application_id: str, usage: Mapping[str, int]) -> None:
        if not application_id:
            raise ValueError("increase_resource needs an application ID")
        self.queue.increase_resource(queue_path, application_id, usage)

    def decrease_resource(
        self, queue_path: str, application_id: str, usage: Mapping[str, int], remove_app: bool
    ) -> bool:
        """Decrease; with remove_app also drop the app's group link. True if now removable."""
        if not application_id:
            raise ValueError("decrease_resource needs an application ID")
        self.queue.decrease_resource(queue_path, application_id, usage, remove_app)
        if remove_app:
            self.app_groups.pop(application_id, None)
        return self.is_removable()

    def is_removable(self) -> bool:
        return not self.app_groups and self.queue.is_empty()

    def __repr__(self) -> str:
        return f"UserTracker({self.user_name!r}, apps={sorted(self.app_groups)})"
