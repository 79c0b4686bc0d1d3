"""Messages for the shims, per rmID, collected while a message or a cycle is applied.

The partition's modules add typed parts (`si.messages`); the scheduler flushes them into
SI responses (`take()`, in wire form), so an SI request's effects go out before its Ack and the
cycle's go out together.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from engine.objects import Allocation
from si import messages


@dataclasses.dataclass(slots=True)
class _AllocationParts:
    new: list[messages.NewAllocation] = dataclasses.field(default_factory=list)
    released: list[messages.AllocationRelease] = dataclasses.field(default_factory=list)
    released_asks: list[messages.AskRelease] = dataclasses.field(default_factory=list)
    rejected: list[messages.RejectedAllocation] = dataclasses.field(default_factory=list)

    def message(self) -> messages.AllocationResponse | None:
        if not (self.new or self.released or self.released_asks or self.rejected):
            return None
        return messages.AllocationResponse(tuple(self.new), tuple(self.released),
                                           tuple(self.released_asks), tuple(self.rejected))


class Outbox:
    """AllocationResponse and ApplicationResponse parts per rmID, until `take()`."""

    def __init__(self) -> None:
        self.alloc: dict[str, _AllocationParts] = {}
        self.app: dict[str, list[messages.UpdatedApplication]] = {}

    def _alloc_parts(self, rm: str) -> _AllocationParts:
        parts = self.alloc.get(rm)
        if parts is None:
            parts = self.alloc[rm] = _AllocationParts()
        return parts

    def alloc_new(self, rm: str, alloc: Allocation) -> None:
        self._alloc_parts(rm).new.append(messages.NewAllocation(
            alloc.key, alloc.app_id, alloc.partition, alloc.node_id, alloc.resource,
            alloc.placeholder, alloc.task_group))

    def alloc_released(self, rm: str, alloc: Allocation, termination: str, message: str) -> None:
        self._alloc_parts(rm).released.append(messages.AllocationRelease(
            alloc.app_id, alloc.key, alloc.partition, termination, message))

    def ask_released(self, rm: str, app_id: str, key: str, message: str) -> None:
        self._alloc_parts(rm).released_asks.append(
            messages.AskRelease(app_id, key, message=message))

    def alloc_rejected(self, rm: str, app_id: str, key: str, reason: str) -> None:
        self._alloc_parts(rm).rejected.append(messages.RejectedAllocation(key, app_id, reason))

    def app_update(self, rm: str, app_id: str, state: str, message: str) -> None:
        self.app.setdefault(rm, []).append(messages.UpdatedApplication(app_id, state, message))

    def forget(self, rm: str) -> None:
        """Drop what is queued for an RM (it re-registered and will replay)."""
        self.alloc.pop(rm, None)
        self.app.pop(rm, None)

    def take(self) -> dict[str, list[dict[str, Any]]]:
        """{rmID: [ApplicationResponse?, AllocationResponse?]} in wire form; empties the box."""
        out: dict[str, list[dict[str, Any]]] = {}
        for rm, updated in self.app.items():
            if updated:
                out.setdefault(rm, []).append(
                    messages.ApplicationResponse(updated=tuple(updated)).to_si())
        for rm, parts in self.alloc.items():
            message = parts.message()
            if message is not None:
                out.setdefault(rm, []).append(message.to_si())
        self.alloc = {}
        self.app = {}
        return out
