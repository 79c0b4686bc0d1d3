"""The notification board: the latest notification per PE per region, for PEs that poll.

Why a board: notifications also go out as UDP datagrams (udp.py), which may be lost; a PE that
polls `GET /api/consistentregion/pe/{peId}` always finds the latest one here (OpenStreams'
ConsistentRegionNotificationBoard). A region that becomes unhealthy clears its entries, so a PE
never acts on a drain or reset of a round that was abandoned. Pure data, no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable


@dataclasses.dataclass(frozen=True, slots=True)
class Notification:
    """`{type, message}` as the PE runtime reads it (type: triggerDrain, triggerReset,
    resumeSubmission, drained, resetFailed)."""

    type: str
    message: str

    def as_json(self) -> dict:
        return {"type": self.type, "message": self.message}


class NotificationBoard:
    """{pe: {region: Notification}}; a PE with no entry left is dropped (GET answers 404)."""

    def __init__(self) -> None:
        self._by_pe: dict[int, dict[int, Notification]] = {}

    def post(self, pes: Iterable[int], region: int, notification: Notification) -> None:
        for pe in pes:
            self._by_pe.setdefault(pe, {})[region] = notification

    def clear(self, pes: Iterable[int], region: int) -> None:
        for pe in pes:
            entries = self._by_pe.get(pe)
            if entries is None:
                continue
            entries.pop(region, None)
            if not entries:
                del self._by_pe[pe]

    def for_pe(self, pe: int) -> dict[int, Notification] | None:
        """Every region's latest notification for the PE, or None when it has none."""
        entries = self._by_pe.get(pe)
        return dict(entries) if entries else None

    def get(self, pe: int, region: int) -> Notification | None:
        return self._by_pe.get(pe, {}).get(region)
