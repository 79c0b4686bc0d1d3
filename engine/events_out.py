"""Where the engine's events go: the `EventSink` interface and its implementations.

Every engine object that records a change calls `sink.emit(type, change_type, detail, object_id,
reference_id="", message="", resource=None)` with the `shm.events` enums. Request events for the
shim (REQUEST / NONE: insufficient queue resources, placeholder size mismatch, no node fits, ...)
go through `sink.request(object_id, reference_id, message, resource=None)`; the engine later
forwards `sink.take_requests()` to the shim as `EventRecords`.

Implementations:

- `RingEventSink` wraps `shm.RingWriter`: `emit` -> `publish` (only if tracking is enabled),
  `request` -> `publish_request` (only if request events are enabled).
- `MemoryEventSink` keeps everything in lists; tests and the scheduler benchmark's "no ring"
  mode use it.

`emit` never blocks and never raises for a full ring (the ring overwrites its oldest record).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

from shm.events import EventChangeDetail, EventChangeType, EventRecordType
from si.messages import EventRecord


class EmittedEvent(NamedTuple):
    """One event as MemoryEventSink keeps it."""

    type: int
    change_type: int
    detail: int
    object_id: str
    reference_id: str
    message: str
    resource: dict[str, int] | None


class RequestEvent(NamedTuple):
    """One request event waiting for the shim."""

    object_id: str
    reference_id: str
    message: str
    timestamp_nano: int
    resource: dict[str, int] | None = None


class EventSink(Protocol):
    """The interface the scheduler objects write to."""

    tracking: bool
    requests_enabled: bool

    def emit(self, type: int, change_type: int, detail: int, object_id: str,
             reference_id: str = "", message: str = "",
             resource: Mapping[str, int] | None = None) -> None: ...

    def request(self, object_id: str, reference_id: str, message: str,
                resource: Mapping[str, int] | None = None) -> None: ...

    def take_requests(self, max_events: int = 1000) -> list[RequestEvent]: ...


def request_records(events: list[Any]) -> list[EventRecord]:
    """Request events (RequestEvent or shm Event) as the SI `EventRecords.events` entries."""
    return [EventRecord(int(EventRecordType.REQUEST), ev.object_id, ev.reference_id, ev.message,
                        ev.timestamp_nano, int(EventChangeType.NONE),
                        int(EventChangeDetail.DETAILS_NONE)) for ev in events]


class MemoryEventSink:
    """Keeps events in memory (`events`, `requests`); the sink of tests and `bench sched`."""

    def __init__(self, tracking: bool = True, requests_enabled: bool = True,
                 keep: bool = True) -> None:
        self.tracking = tracking
        self.requests_enabled = requests_enabled
        self.keep = keep
        self.events: list[EmittedEvent] = []
        self.requests: list[RequestEvent] = []
        self.count = 0

    def emit(self, type: int, change_type: int, detail: int, object_id: str,
             reference_id: str = "", message: str = "",
             resource: Mapping[str, int] | None = None) -> None:
        if not self.tracking:
            return
        self.count += 1
        if self.keep:
            self.events.append(EmittedEvent(int(type), int(change_type), int(detail), object_id,
                                            reference_id, message,
                                            dict(resource) if resource else None))

    def request(self, object_id: str, reference_id: str, message: str,
                resource: Mapping[str, int] | None = None) -> None:
        if not self.requests_enabled:
            return
        self.requests.append(RequestEvent(object_id, reference_id, message, time.time_ns(),
                                          dict(resource) if resource else None))

    def take_requests(self, max_events: int = 1000) -> list[RequestEvent]:
        taken, self.requests = self.requests[:max_events], self.requests[max_events:]
        return taken

    def clear(self) -> None:
        self.events.clear()
        self.requests.clear()

    def of(self, type: int | None = None, change_type: int | None = None,
           detail: int | None = None, object_id: str | None = None) -> list[EmittedEvent]:
        """The kept events matching every given field (test helper)."""
        return [e for e in self.events
                if (type is None or e.type == type)
                and (change_type is None or e.change_type == change_type)
                and (detail is None or e.detail == detail)
                and (object_id is None or e.object_id == object_id)]


class RingEventSink:
    """The production sink: events into `shm.RingWriter`, honouring service.event.* switches.

    tracking off -> `emit` does nothing (no ring events); requests off -> `request` does nothing.
    """

    def __init__(self, writer: Any, tracking: bool = True, requests_enabled: bool = False) -> None:
        self.writer = writer
        self.tracking = tracking
        self.requests_enabled = requests_enabled
        self._publish = writer.publish
        self.count = 0

    def emit(self, type: int, change_type: int, detail: int, object_id: str,
             reference_id: str = "", message: str = "",
             resource: Mapping[str, int] | None = None) -> None:
        if self.tracking:
            self.count += 1
            self._publish(type, change_type, detail, object_id, reference_id, message, resource)

    def request(self, object_id: str, reference_id: str, message: str,
                resource: Mapping[str, int] | None = None) -> None:
        if self.requests_enabled:
            self.writer.publish_request(object_id, reference_id, message, resource)

    def take_requests(self, max_events: int = 1000) -> list[Any]:
        if not self.requests_enabled:
            return []
        return self.writer.take_requests(max_events)
