"""The user group manager (UGM): per-partition usage and running-app tracking for users and groups.

Self-contained by design (the seed): nothing here imports the engine's object model. The engine
calls `increase` when an allocation is added and `decrease` when one is released (with
`remove_app=True` when the application stops running); REST reads the `*_json` views.

Rules:
- **Trackers on the fly.** A user (group) tracker is created by the first increase that needs it
  and unlinked by the decrease that leaves it with no linked application and no usage.
- **App -> group link.** The first increase of an app fixes the group it counts against
  (`LimitConfig.select_group`, bottom-up over the limit config). No match -> the link is None:
  the app is never tracked against a group, and that is final. Later changes to the user's
  groups are ignored for that app; a new app uses the groups it is increased with. Decreases
  always follow the link, never the groups passed in.
- **Running applications.** The first increase of an app marks it running on every level of
  its queue path, for the user and for its group. Only `decrease(..., remove_app=True)` stops it.
- **Enforcement on increase.** Leaf to root, at each queue: the user's limit (explicit, else
  `*`), then -- unless the user has an explicit limit at that queue -- the group's limit
  (explicit, else `*`). A limit is exceeded when a resource the increase adds goes above its
  `maxresources` value, or when the app is not yet running there and one more running app would
  go above `maxapplications`. Any excess: nothing changes, False. Otherwise user and group are
  updated along the whole path and True is returned. Usage already above a lowered limit does
  not block increases of other resources.
- **Events** (emitted after the state change, outside the lock), type USERGROUP:
    UG_USER_RESOURCE / UG_GROUP_RESOURCE, ADD on increase, REMOVE on decrease:
        objectID user/group, referenceID app, message queue path, resource the delta
        (not emitted for an all-zero delta)
    UG_APP_LINK, ADD when an app is linked to a group tracker, REMOVE when unlinked:
        objectID group, referenceID app, message "user <name>" (a None link emits nothing)
    UG_USER_LIMIT / UG_GROUP_LIMIT, SET when a limit is added or changed, REMOVE when removed:
        objectID user/group name (may be "*"), referenceID queue path, message the limit,
        resource its maxresources

Concurrency (the seed's "update consistency"): one re-entrant lock per manager guards every
tracker. Tracker lookup, the limit checks, the updates of user *and* group, and the unlinking of
emptied trackers happen in one critical section, and no tracker reference leaves it. So an update
can never write into a tracker that a concurrent decrease has just unlinked (the seed's race),
user and group change together or not at all, and there is no lock ordering to get wrong. The
engine runs everything on one trio thread today; the lock costs one uncontended acquire and keeps
the manager correct if releases ever move to another thread. The emit callback is called after
the lock is released, so a slow or re-entrant sink cannot block or corrupt tracking.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from engine.ugm.group_tracker import GroupTracker
from engine.ugm.limits import Limit, LimitConfig
from engine.ugm.queue_tracker import QueueTracker, path_prefixes
from engine.ugm.security import UserGroup
from engine.ugm.user_tracker import UserTracker
from shm.events import EventChangeDetail, EventChangeType, EventRecordType
from si import resources
from si.resources import Resource

Emit = Callable[..., Any]
_Event = tuple[Any, ...]

# the codes of the events every allocation emits, as plain ints (the sink's hot path)
_USERGROUP = int(EventRecordType.USERGROUP)
_UG_USER_RESOURCE = int(EventChangeDetail.UG_USER_RESOURCE)
_UG_GROUP_RESOURCE = int(EventChangeDetail.UG_GROUP_RESOURCE)


def _check_usage(usage: Mapping[str, int]) -> Resource:
    # every allocation passes here: a plain dict of plain non-negative ints (what the engine
    # sends) is checked without the ABC and bool tests, anything else by the full rules below
    if type(usage) is dict:
        for value in usage.values():
            if type(value) is not int or value < 0:
                break
        else:
            return usage
    if not isinstance(usage, Mapping):
        raise ValueError("usage must be a mapping of resource name to integer")
    for name, value in usage.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"usage {name!r}: must be a non-negative integer, got {value!r}")
    return dict(usage)


def _check_args(queue_path: str, app_id: str, ugi: UserGroup) -> list[str]:
    if not isinstance(app_id, str) or not app_id:
        raise ValueError("application ID must be a non-empty string")
    if not isinstance(ugi, UserGroup) or not ugi.user:
        raise ValueError("a UserGroup with a non-empty user is required")
    return path_prefixes(queue_path)


def _exceeds(limit: Limit | None, node: QueueTracker | None, app_id: str, usage: Mapping[str, int]) -> str | None:
    """Why adding `usage` for `app_id` to `node` breaks `limit`, or None if it fits."""
    if limit is None:
        return None
    current = node.resource_usage if node is not None else {}
    for name, maximum in limit.max_resources.items():
        added = usage.get(name, 0)
        if added > 0 and current.get(name, 0) + added > maximum:
            return f"{name} {current.get(name, 0)}+{added} > {maximum}"
    if limit.max_applications:
        running = node.running_applications if node is not None else set()
        if app_id not in running and len(running) + 1 > limit.max_applications:
            return f"running applications {len(running)}+1 > {limit.max_applications}"
    return None


def _node(
    trackers: Mapping[str, UserTracker] | Mapping[str, GroupTracker], name: str, queue_path: str
) -> QueueTracker | None:
    """The queue node `queue_path` of the user's (group's) tracker, or None if not tracked."""
    tracker = trackers.get(name)
    return tracker.queue.get(queue_path) if tracker is not None else None


def _resource_events(
    events: list[_Event], change: Any, user: str, group: GroupTracker | None,
    app_id: str, queue_path: str, usage: Mapping[str, int],
) -> None:
    """Append the user's (and the linked group's) resource-change events for a non-zero usage."""
    delta = usage if 0 not in usage.values() else resources.strip_zero(usage)
    if delta:
        # YuniKorn's ugm_events.go: objectID the user (group), referenceID the queue path, no message.
        change = int(change)
        events.append((change, _UG_USER_RESOURCE, user, queue_path, "", delta))
        if group is not None:
            events.append((change, _UG_GROUP_RESOURCE, group.group_name, queue_path, "", delta))


class UserGroupManager:
    """Usage tracking and limit enforcement for the users and groups of one partition."""

    def __init__(self, partition: str, emit: Emit) -> None:
        self.partition = partition
        self._emit = emit
        self._lock = threading.RLock()
        self._users: dict[str, UserTracker] = {}
        self._groups: dict[str, GroupTracker] = {}
        self._limits = LimitConfig()

    # -- configuration ---------------------------------------------------------------------

    def update_limits(self, queue_configs: Mapping[str, list[dict[str, Any]]]) -> None:
        """Replace the whole limit configuration (ValueError: nothing changes).

        Existing usage is kept; it is judged against the new limits from the next increase on.
        """
        new = LimitConfig.parse(queue_configs)
        events: list[_Event] = []
        with self._lock:
            for kind, name, path, limit in self._limits.changes(new):
                detail = EventChangeDetail.UG_USER_LIMIT if kind == "user" else EventChangeDetail.UG_GROUP_LIMIT
                if limit is None:
                    events.append((EventChangeType.REMOVE, detail, name, path, "limit removed", None))
                else:
                    events.append(
                        (EventChangeType.SET, detail, name, path, limit.describe(), dict(limit.max_resources) or None)
                    )
            self._limits = new
        self._send(events)

    @property
    def limits(self) -> LimitConfig:
        return self._limits

    # -- enforcement and tracking ----------------------------------------------------------

    def can_run_app(self, queue_path: str, app_id: str, ugi: UserGroup) -> bool:
        """Would one more running app (this one) stay within maxapplications everywhere?"""
        levels = _check_args(queue_path, app_id, ugi)
        with self._lock:
            return self._refusal(levels, app_id, {}, ugi) is None

    def why_not(self, queue_path: str, app_id: str, usage: Mapping[str, int], ugi: UserGroup) -> str | None:
        """The reason `increase` would refuse this usage (for messages), or None if it fits."""
        levels = _check_args(queue_path, app_id, ugi)
        usage = _check_usage(usage)
        with self._lock:
            return self._refusal(levels, app_id, usage, ugi)

    def increase(
        self, queue_path: str, app_id: str, usage: Mapping[str, int], ugi: UserGroup, *, force: bool = False
    ) -> bool:
        """Track `usage` for the app's user and group, all levels; False (no change) if over a limit.

        `force` tracks the usage even over a limit: for allocations that already exist (recovery
        after a restart, a placeholder replaced by its real pod). Those are facts to account for,
        not requests to refuse, or usage after a restart would differ from usage before it.
        """
        levels = _check_args(queue_path, app_id, ugi)
        usage = _check_usage(usage)
        events: list[_Event] = []
        with self._lock:
            if not force and self._refusal(levels, app_id, usage, ugi) is not None:
                return False
            user = self._users.get(ugi.user)
            if user is None:
                user = self._users[ugi.user] = UserTracker(ugi.user)
            if not user.has_group_for_app(app_id):
                group_name = self._limits.select_group(levels[-1], ugi.groups)
                group = None
                if group_name is not None:
                    group = self._groups.get(group_name)
                    if group is None:
                        group = self._groups[group_name] = GroupTracker(group_name)
                    events.append(
                        (EventChangeType.SET, EventChangeDetail.UG_APP_LINK, group_name, app_id, "", None)
                    )
                user.set_group_for_app(app_id, group)
            group = user.group_for_app(app_id)
            user.increase_resource(queue_path, app_id, usage)
            if group is not None:
                group.increase_resource(queue_path, app_id, usage)
            _resource_events(events, EventChangeType.ADD, ugi.user, group, app_id, queue_path, usage)
        self._send(events)
        return True

    def decrease(
        self, queue_path: str, app_id: str, usage: Mapping[str, int], ugi: UserGroup, remove_app: bool = False
    ) -> bool:
        """Release `usage` (never below zero); `remove_app` ends the app's run and group link.

        Follows the app's group link, not `ugi.groups`. Returns False if the user is not tracked.
        """
        _check_args(queue_path, app_id, ugi)
        usage = _check_usage(usage)
        events: list[_Event] = []
        with self._lock:
            user = self._users.get(ugi.user)
            if user is None:
                return False
            group = user.group_for_app(app_id)
            if user.decrease_resource(queue_path, app_id, usage, remove_app):
                del self._users[ugi.user]
            if group is not None and group.decrease_resource(queue_path, app_id, usage, remove_app):
                del self._groups[group.group_name]
            _resource_events(events, EventChangeType.REMOVE, ugi.user, group, app_id, queue_path, usage)
            if remove_app and group is not None:
                events.append(
                    (EventChangeType.REMOVE, EventChangeDetail.UG_APP_LINK, group.group_name, app_id, "", None)
                )
        self._send(events)
        return True

    def clear(self) -> None:
        """Forget all tracked usage (RM re-registration); the limit configuration stays."""
        with self._lock:
            self._users.clear()
            self._groups.clear()

    # -- read accessors (copies; safe to keep) ---------------------------------------------

    def user_usage(self, user: str, queue_path: str = "root") -> Resource:
        """What the user uses there (quantities above zero; the REST shows zeros too)."""
        with self._lock:
            node = _node(self._users, user, queue_path)
            return resources.strip_zero(node.resource_usage) if node is not None else {}

    def group_usage(self, group: str, queue_path: str = "root") -> Resource:
        with self._lock:
            node = _node(self._groups, group, queue_path)
            return resources.strip_zero(node.resource_usage) if node is not None else {}

    def user_running_apps(self, user: str, queue_path: str = "root") -> set[str]:
        with self._lock:
            node = _node(self._users, user, queue_path)
            return set(node.running_applications) if node is not None else set()

    def group_running_apps(self, group: str, queue_path: str = "root") -> set[str]:
        with self._lock:
            node = _node(self._groups, group, queue_path)
            return set(node.running_applications) if node is not None else set()

    def app_group(self, user: str, app_id: str) -> str | None:
        """The group an app of `user` is tracked against (None: no group or not tracked)."""
        with self._lock:
            tracker = self._users.get(user)
            group = tracker.group_for_app(app_id) if tracker is not None else None
            return group.group_name if group is not None else None

    def user_names(self) -> list[str]:
        with self._lock:
            return sorted(self._users)

    def group_names(self) -> list[str]:
        with self._lock:
            return sorted(self._groups)

    # -- REST views (DESIGN.md shapes) -----------------------------------------------------

    def users_json(self) -> list[dict[str, Any]]:
        with self._lock:
            return [self._user_json(self._users[name]) for name in sorted(self._users)]

    def groups_json(self) -> list[dict[str, Any]]:
        with self._lock:
            return [self._group_json(self._groups[name]) for name in sorted(self._groups)]

    def user_json(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            tracker = self._users.get(name)
            return self._user_json(tracker) if tracker is not None else None

    def group_json(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            tracker = self._groups.get(name)
            return self._group_json(tracker) if tracker is not None else None

    # -- internals -------------------------------------------------------------------------

    def _refusal(self, levels: list[str], app_id: str, usage: Mapping[str, int], ugi: UserGroup) -> str | None:
        """Why the increase breaks a limit (leaf up, user before group), or None."""
        if not self._limits.limits_any(levels):
            return None  # no limit on the path (the common case): nothing can refuse
        user = self._users.get(ugi.user)
        if user is not None and user.has_group_for_app(app_id):
            group = user.group_for_app(app_id)
            group_name = group.group_name if group is not None else None
        else:
            group_name = self._limits.select_group(levels[-1], ugi.groups)
            group = self._groups.get(group_name) if group_name is not None else None
        user_nodes = user.queue.nodes(levels[-1]) if user is not None else [None] * len(levels)
        group_nodes = group.queue.nodes(levels[-1]) if group is not None else [None] * len(levels)
        for path, user_node, group_node in zip(reversed(levels), reversed(user_nodes), reversed(group_nodes)):
            limit, explicit = self._limits.user_limit(path, ugi.user)
            reason = _exceeds(limit, user_node, app_id, usage)
            if reason is not None:
                return f"user {ugi.user} queue {path}: {reason}"
            if group_name is not None and not explicit:
                reason = _exceeds(self._limits.group_limit(path, group_name), group_node, app_id, usage)
                if reason is not None:
                    return f"group {group_name} queue {path}: {reason}"
        return None

    def _user_json(self, tracker: UserTracker) -> dict[str, Any]:
        def limit_of(path: str) -> tuple[Mapping[str, int], int] | None:
            limit, _ = self._limits.user_limit(path, tracker.user_name)
            return (limit.max_resources, limit.max_applications) if limit is not None else None

        out: dict[str, Any] = {"userName": tracker.user_name}
        groups = {
            app: group.group_name for app, group in sorted(tracker.app_groups.items()) if group is not None
        }
        if groups:
            out["groups"] = groups
        out["queues"] = tracker.queue.to_json(limit_of)
        return out

    def _group_json(self, tracker: GroupTracker) -> dict[str, Any]:
        def limit_of(path: str) -> tuple[Mapping[str, int], int] | None:
            limit = self._limits.group_limit(path, tracker.group_name)
            return (limit.max_resources, limit.max_applications) if limit is not None else None

        out: dict[str, Any] = {"groupName": tracker.group_name}
        if tracker.applications:
            out["applications"] = sorted(tracker.applications)
        out["queues"] = tracker.queue.to_json(limit_of)
        return out

    def _send(self, events: list[_Event]) -> None:
        emit = self._emit
        for change_type, detail, object_id, reference_id, message, resource in events:
            emit(_USERGROUP, change_type, detail, object_id, reference_id, message, resource)
