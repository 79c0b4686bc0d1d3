"""The seed's queueTracker: usage and running applications along a sparse queue hierarchy.

A tree rooted at "root" that holds only the queues something is tracked in. Each node keeps the
resource usage and the running application IDs of one user or one group in that queue *and
below* (a parent's usage is the sum of its own direct usage and its children's).

Rules:
- `increase_resource(path, app, usage)` creates the nodes of `path` on demand and adds `usage`
  and `app` to every node from root to the leaf.
- `decrease_resource(path, app, usage, remove_app)` subtracts (never below zero) along the nodes
  that exist, drops `app` from every node when `remove_app`, then prunes every child that has
  become empty (zero usage, no running application, no children).
- A queueTracker belongs to exactly one user or group tracker and is never shared, so it has no
  lock of its own: the manager's lock covers it (see manager.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from si import resources
from si.resources import Resource

ROOT = "root"


def _string(queue_path: str) -> str:
    if not isinstance(queue_path, str) or not queue_path:
        raise ValueError(f"queue path must be a non-empty string, got {queue_path!r}")
    return queue_path


def split_path(queue_path: str) -> tuple[str, ...]:
    """"root.a.b" -> ("root", "a", "b"); raises ValueError for anything not under root."""
    return _split(_string(queue_path))


def path_prefixes(queue_path: str) -> tuple[str, ...]:
    """"root.a.b" -> ("root", "root.a", "root.a.b") (root first)."""
    return _prefixes(_string(queue_path))  # (validated by _split on a cache miss)


# Every allocation asks for the same few paths several times (manager and both trackers):
# parse each once. Only valid strings reach the caches (errors are never cached).
@functools.lru_cache(maxsize=4096)
def _split(queue_path: str) -> tuple[str, ...]:
    parts = tuple(queue_path.split("."))
    if parts[0] != ROOT or not all(parts):
        raise ValueError(f"queue path {queue_path!r}: must be 'root' or 'root.<name>...'")
    return parts


@functools.lru_cache(maxsize=4096)
def _prefixes(queue_path: str) -> tuple[str, ...]:
    parts = _split(queue_path)
    return tuple(".".join(parts[: i + 1]) for i in range(len(parts)))


class QueueTracker:
    """One node of the sparse hierarchy; the root is what a user or group tracker holds."""

    __slots__ = ("queue_name", "queue_path", "resource_usage", "running_applications", "child_queues")

    def __init__(self, queue_name: str = ROOT, queue_path: str = ROOT) -> None:
        self.queue_name = queue_name
        self.queue_path = queue_path
        self.resource_usage: Resource = {}
        self.running_applications: set[str] = set()
        self.child_queues: dict[str, QueueTracker] = {}

    # -- navigation ------------------------------------------------------------------------

    def nodes(self, queue_path: str) -> list[QueueTracker | None]:
        """The nodes along `queue_path`, root first; None for a level not tracked (yet)."""
        parts = split_path(queue_path)
        result: list[QueueTracker | None] = [self]
        node: QueueTracker | None = self
        for part in parts[1:]:
            node = node.child_queues.get(part) if node is not None else None
            result.append(node)
        return result

    def get(self, queue_path: str) -> QueueTracker | None:
        """The node tracking exactly `queue_path`, or None."""
        return self.nodes(queue_path)[-1]

    def walk(self) -> Iterator[QueueTracker]:
        """Every node, pre-order."""
        yield self
        for child in self.child_queues.values():
            yield from child.walk()

    def is_empty(self) -> bool:
        """Nothing tracked here or below: the node can be pruned (or the tracker dropped)."""
        return (
            resources.is_zero(self.resource_usage)
            and not self.running_applications
            and not self.child_queues
        )

    # -- the seed's interface --------------------------------------------------------------

    def increase_resource(self, queue_path: str, application_id: str, usage: Mapping[str, int]) -> None:
        """Add `usage` and mark `application_id` running on every level of `queue_path`."""
        if not application_id:
            raise ValueError("increase_resource needs an application ID")
        parts = split_path(queue_path)
        node = self
        node._add(application_id, usage)
        for part in parts[1:]:
            child = node.child_queues.get(part)
            if child is None:
                child = QueueTracker(part, f"{node.queue_path}.{part}")
                node.child_queues[part] = child
            child._add(application_id, usage)
            node = child

    def decrease_resource(
        self, queue_path: str, application_id: str, usage: Mapping[str, int], remove_app: bool
    ) -> bool:
        """Subtract along the tracked levels, optionally drop the app, prune; True if now empty.

        `application_id` may be empty when only usage is decreased (never with remove_app).
        """
        if remove_app and not application_id:
            raise ValueError("remove_app needs an application ID")
        trail = [node for node in self.nodes(queue_path) if node is not None]
        for node in trail:
            # a quantity that drops to zero stays, as 0 (YuniKorn's SubFrom; its REST shows it)
            node.resource_usage = resources.sub_floor(node.resource_usage, usage)
        if remove_app:
            # The whole tree, not just this path: an app that (wrongly) ran elsewhere too must
            # not stay "running" there after it is gone, or its tracker could never be removed.
            for node in self.walk():
                node.running_applications.discard(application_id)
            self._prune()
        else:
            # Prune bottom-up: a child is unlinked only once it tracks nothing at all.
            for parent, child in zip(reversed(trail[:-1]), reversed(trail[1:])):
                if child.is_empty():
                    del parent.child_queues[child.queue_name]
        return self.is_empty()

    def _prune(self) -> None:
        for name, child in list(self.child_queues.items()):
            child._prune()
            if child.is_empty():
                del self.child_queues[name]

    # -- internals and views ---------------------------------------------------------------

    def _add(self, application_id: str, usage: Mapping[str, int]) -> None:
        # in place, once per level of every allocation; usage holds no negative value
        current = self.resource_usage
        for name, value in usage.items():
            if value:
                current[name] = current.get(name, 0) + value
        self.running_applications.add(application_id)

    def to_json(self, limit_of: Callable[[str], tuple[Mapping[str, int], int] | None]) -> dict[str, Any]:
        """DESIGN.md's Q shape; `limit_of(path)` gives (maxResources, maxApplications) or None.

        A quantity once used keeps its key at 0, as YuniKorn's DAOMap shows it; empty keys are
        omitted; applications and children are sorted.
        """
        out: dict[str, Any] = {"queuePath": self.queue_path}
        usage = self.resource_usage
        if usage:
            out["resourceUsage"] = dict(sorted(usage.items()))
        if self.running_applications:
            out["runningApplications"] = sorted(self.running_applications)
        limit = limit_of(self.queue_path)
        if limit is not None:
            max_resources, max_applications = limit
            if max_resources:
                out["maxResources"] = dict(sorted(max_resources.items()))
            if max_applications:
                out["maxApplications"] = max_applications
        if self.child_queues:
            out["children"] = [
                self.child_queues[name].to_json(limit_of) for name in sorted(self.child_queues)
            ]
        return out
