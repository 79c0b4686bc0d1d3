"""Limit configuration: YuniKorn's queue `limits` entries, validated and indexed for lookups.

Input (already YAML-loaded, resources already parsed to integers):
    {"root.a": [{"limit": "desc", "users": ["sue", "*"], "groups": ["dev"],
                 "maxresources": {"memory": 1024, "vcore": 2000}, "maxapplications": 2}]}

Rules:
- A limit applies to each named user/group *separately* (a limit on users [a, b] gives a and b
  one limit each, not a shared one). `*` gives the same separate limit to every user (group)
  that has no explicit entry at that queue.
- In `maxresources` a missing name is unlimited (0 is a real limit: none of it);
  `maxapplications` 0 means no application limit. A limit must set at least one of them.
- Precedence at one queue: an explicit user limit replaces every group limit for that user at
  that queue (the seed: "user limit settings always have the higher precedence"). A `*` user
  limit is not explicit: it applies together with the group limit.
- Group selection for an app (`select_group`): from the leaf queue up to root, the first queue
  whose limits name a group of the user wins; within that queue the configuration order decides
  (never the order of the user's groups, which the seed says is not stable). A queue with only a
  `*` group limit selects the shared group `*`, as YuniKorn does: every user whose groups are not
  named shares that one tracker and its limit (picking one of the user's groups instead made the
  outcome depend on their unstable order). No match anywhere: the app is not tracked against any
  group.
- Validation raises ValueError naming the queue path and the field; nothing is half-applied.
  What YuniKorn's validator refuses (configvalidator.go checkLimit) is refused with its message:
  a user or group name outside its `UserRegExp`/`GroupRegExp`, a name in two limits of one queue,
  a named user (group) after the `*` one, a `*` group limit without a named group limit before
  it, `maxresources` with no quantity above zero, a limit with neither maximum.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from engine.ugm.queue_tracker import split_path
from engine.ugm.security import GROUP_RE, USER_RE

WILDCARD = "*"
_KEYS = frozenset({"limit", "users", "groups", "maxresources", "maxapplications"})


@dataclasses.dataclass(frozen=True, slots=True)
class Limit:
    """One effective limit for one user or group at one queue."""

    description: str
    max_resources: Mapping[str, int]
    max_applications: int

    def describe(self) -> str:
        parts = []
        if self.description:
            parts.append(f"limit {self.description!r}")
        if self.max_resources:
            parts.append("maxresources " + ",".join(f"{k}={v}" for k, v in sorted(self.max_resources.items())))
        if self.max_applications:
            parts.append(f"maxapplications {self.max_applications}")
        return " ".join(parts)


@dataclasses.dataclass(frozen=True, slots=True)
class QueueLimits:
    """All limits of one queue: user/group name (or `*`) -> Limit; dicts keep config order."""

    users: Mapping[str, Limit]
    groups: Mapping[str, Limit]


def _names(queue_path: str, index: int, field: str, raw: object) -> list[str]:
    if raw is None:
        return []
    if isinstance(raw, str) or not isinstance(raw, (list, tuple)):
        raise ValueError(f"queue {queue_path!r} limit #{index}: {field} must be a list of names")
    names = []
    for name in raw:
        if not isinstance(name, str) or not name.strip() or name != name.strip():
            raise ValueError(f"queue {queue_path!r} limit #{index}: {field} has an invalid name {name!r}")
        names.append(name)
    return names


def _limit(queue_path: str, index: int, entry: object) -> tuple[list[str], list[str], Limit]:
    where = f"queue {queue_path!r} limit #{index}"
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: must be a mapping")
    unknown = sorted(str(k) for k in entry if k not in _KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown field {unknown[0]!r}")
    description = entry.get("limit") or ""
    if not isinstance(description, str):
        raise ValueError(f"{where}: limit must be a string")
    users = _names(queue_path, index, "users", entry.get("users"))
    groups = _names(queue_path, index, "groups", entry.get("groups"))
    if not users and not groups:
        raise ValueError(f"{where}: users/groups: a limit needs at least one user or group")
    raw_max = entry.get("maxresources") or {}
    if not isinstance(raw_max, Mapping):
        raise ValueError(f"{where}: maxresources must be a mapping of resource name to integer")
    max_resources: dict[str, int] = {}
    for name, value in raw_max.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}: maxresources has an invalid resource name {name!r}")
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{where}: maxresources.{name} must be a non-negative integer, got {value!r}")
        max_resources[name] = value
    max_apps = entry.get("maxapplications", 0)
    if max_apps is None:
        max_apps = 0
    if not isinstance(max_apps, int) or isinstance(max_apps, bool) or max_apps < 0:
        raise ValueError(f"{where}: maxapplications must be a non-negative integer, got {max_apps!r}")
    if max_resources and not any(max_resources.values()):
        raise ValueError(f"{where}: maxresources: MaxResources should be greater than zero in "
                         f"'{description}' limit")
    if not max_resources and not max_apps:
        raise ValueError(f"{where}: maxresources/maxapplications: invalid resource combination "
                         f"for limit {description} all resource limits are null")
    return users, groups, Limit(description, dict(max_resources), max_apps)


_KINDS = {"users": ("user", USER_RE), "groups": ("group", GROUP_RE)}


def _register(where: str, field: str, names: list[str], table: dict[str, Limit],
              limit: Limit) -> None:
    """Add the names of one limit to its queue's table, as YuniKorn checks them (in order)."""
    kind, pattern = _KINDS[field]
    for name in names:
        if name != WILDCARD and not pattern.match(name):
            raise ValueError(f"{where}: {field}: invalid limit {kind} name '{name}' in limit "
                             "definition")
        if name in table:
            raise ValueError(f"{where}: {field}: duplicated {kind} name '{name}'"
                             + (", already exists" if kind == "user" else ""))
        if WILDCARD in table:
            raise ValueError(f"{where}: {field}: should not set no wildcard {kind} {name} after "
                             f"wildcard {kind} limit")
        table[name] = limit
    if field == "groups" and list(table) == [WILDCARD]:
        raise ValueError(f"{where}: groups: should not specify only one group limit that is "
                         "using the wildcard. There must be at least one limit with a group "
                         "name defined")


class LimitConfig:
    """The validated limit configuration of one partition (immutable once built)."""

    __slots__ = ("_queues",)

    def __init__(self, queues: Mapping[str, QueueLimits] | None = None) -> None:
        self._queues: dict[str, QueueLimits] = dict(queues or {})

    @classmethod
    def parse(cls, queue_configs: Mapping[str, list[dict[str, Any]]]) -> LimitConfig:
        if not isinstance(queue_configs, Mapping):
            raise ValueError("limits: expected a mapping of queue path to a list of limits")
        queues: dict[str, QueueLimits] = {}
        for queue_path, entries in queue_configs.items():
            try:
                split_path(queue_path)
            except ValueError:
                raise ValueError(f"queue {queue_path!r}: invalid queue path") from None
            if entries is None:
                continue
            if not isinstance(entries, (list, tuple)):
                raise ValueError(f"queue {queue_path!r}: limits must be a list")
            users: dict[str, Limit] = {}
            groups: dict[str, Limit] = {}
            for index, entry in enumerate(entries):
                entry_users, entry_groups, limit = _limit(queue_path, index, entry)
                where = f"queue {queue_path!r} limit #{index}"
                _register(where, "users", entry_users, users, limit)
                if entry_groups:
                    _register(where, "groups", entry_groups, groups, limit)
            if users or groups:
                queues[queue_path] = QueueLimits(users, groups)
        return cls(queues)

    # -- lookups ---------------------------------------------------------------------------

    def queues(self) -> Mapping[str, QueueLimits]:
        return self._queues

    def limits_any(self, queue_paths: tuple[str, ...]) -> bool:
        """Whether any of these queues has a limit (none: no increase there can be refused)."""
        queues = self._queues
        if queues:
            for path in queue_paths:
                if path in queues:
                    return True
        return False

    def user_limit(self, queue_path: str, user: str) -> tuple[Limit | None, bool]:
        """(the limit for `user` at exactly this queue, whether it is an explicit entry)."""
        queue = self._queues.get(queue_path)
        if queue is None:
            return None, False
        limit = queue.users.get(user)
        if limit is not None:
            return limit, True
        return queue.users.get(WILDCARD), False

    def group_limit(self, queue_path: str, group: str) -> Limit | None:
        """The limit for `group` at exactly this queue: explicit, else `*`, else None."""
        queue = self._queues.get(queue_path)
        if queue is None:
            return None
        limit = queue.groups.get(group)
        return limit if limit is not None else queue.groups.get(WILDCARD)

    def select_group(self, queue_path: str, groups: tuple[str, ...]) -> str | None:
        """The group an app in `queue_path` is tracked against (module rules), or None."""
        if not groups:
            return None
        member = set(groups)
        parts = split_path(queue_path)
        for depth in range(len(parts), 0, -1):
            queue = self._queues.get(".".join(parts[:depth]))
            if queue is None:
                continue
            for name in queue.groups:
                if name != WILDCARD and name in member:
                    return name
            if WILDCARD in queue.groups:
                return WILDCARD
        return None

    def changes(self, new: LimitConfig) -> list[tuple[str, str, str, Limit | None]]:
        """(kind "user"/"group", name, queue path, new limit or None if removed), sorted."""
        out: list[tuple[str, str, str, Limit | None]] = []
        for path in sorted(set(self._queues) | set(new._queues)):
            old_q = self._queues.get(path, QueueLimits({}, {}))
            new_q = new._queues.get(path, QueueLimits({}, {}))
            for kind, old_t, new_t in (("user", old_q.users, new_q.users), ("group", old_q.groups, new_q.groups)):
                for name in sorted(set(old_t) | set(new_t)):
                    before, after = old_t.get(name), new_t.get(name)
                    if before != after:
                        out.append((kind, name, path, after))
        return out
