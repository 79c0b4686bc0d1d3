"""Messages for the shims, per rmID, collected while a message or a cycle is applied.

The partition's modules add to the outbox; the scheduler flushes it into SI responses
(`take()`), so an SI request's effects go out before its Ack and the cycle's go out together.
"""

from __future__ import annotations

from typing import Any

from engine.objects import Allocation


class Outbox:
    """AllocationResponse and ApplicationResponse parts per rmID, until `take()`."""

    def __init__(self) -> None:
        self.alloc: dict[str, dict[str, list]] = {}
        self.app: dict[str, dict[str, list]] = {}

    def _alloc_box(self, rm: str) -> dict[str, list]:
        box = self.alloc.get(rm)
        if box is None:
            box = self.alloc[rm] = {"new": [], "released": [], "releasedAsks": [],
                                    "rejected": []}
        return box

    def _app_box(self, rm: str) -> dict[str, list]:
        box = self.app.get(rm)
        if box is None:
            box = self.app[rm] = {"accepted": [], "rejected": [], "updated": []}
        return box

    def alloc_new(self, rm: str, alloc: Allocation) -> None:
        self._alloc_box(rm)["new"].append(alloc.si())

    def alloc_released(self, rm: str, alloc: Allocation, termination: str, message: str) -> None:
        self._alloc_box(rm)["released"].append(
            {"allocationKey": alloc.key, "applicationID": alloc.app_id,
             "partitionName": alloc.partition, "terminationType": termination,
             "message": message})

    def ask_released(self, rm: str, app_id: str, key: str, message: str) -> None:
        self._alloc_box(rm)["releasedAsks"].append({"allocationKey": key, "applicationID": app_id,
                                                    "message": message})

    def alloc_rejected(self, rm: str, app_id: str, key: str, reason: str) -> None:
        self._alloc_box(rm)["rejected"].append({"allocationKey": key, "applicationID": app_id,
                                                "reason": reason})

    def app_update(self, rm: str, app_id: str, state: str, message: str) -> None:
        self._app_box(rm)["updated"].append({"applicationID": app_id, "state": state,
                                             "message": message})

    def forget(self, rm: str) -> None:
        """Drop what is queued for an RM (it re-registered and will replay)."""
        self.alloc.pop(rm, None)
        self.app.pop(rm, None)

    def take(self) -> dict[str, list[dict[str, Any]]]:
        """{rmID: [ApplicationResponse?, AllocationResponse?]} and empty the box."""
        out: dict[str, list[dict[str, Any]]] = {}
        for rm, box in self.app.items():
            if any(box.values()):
                out.setdefault(rm, []).append({"type": "ApplicationResponse", **box})
        for rm, box in self.alloc.items():
            if any(box.values()):
                out.setdefault(rm, []).append({"type": "AllocationResponse", **box})
        self.alloc = {}
        self.app = {}
        return out
