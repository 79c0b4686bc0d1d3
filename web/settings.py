"""The event settings a web worker applies, and where they come from.

YuniKorn applies `event.RESTResponseSize`, `event.maxStreams` and `event.maxStreamsPerHost` from
its ConfigMaps on every update, and its REST answers 500 "Event tracking is disabled" as soon as
`event.trackingEnabled` is false. Here the engine holds the configuration and the web workers are
other processes: the engine publishes its event settings in its state snapshot
(`engine.eventSettings`), and a worker reads them from there, at most every `REFRESH_SECONDS`:

- the three web keys come from the engine when the engine is configured by an RM (the shim's
  ConfigMaps, `engine.configSource` "rm:..."); otherwise from the web's own `--config`, as
  before (a systemd deployment configures both from files);
- tracking is off when either side says so: an engine that does not write events leaves the
  ring's history stale, which must not be served as current;
- `RESTResponseSize: 0` means YuniKorn's default, 10000 (YuniKorn logs a warning and uses it).

`STREAM_SLOTS` is the floor of the shared stream-slot table (web.segment), sized at the web's
start: a `maxStreams` raised later above it holds at most that many streams (1024, or the web's
own `--config` value when larger).
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from engine.config import EventSettings

REFRESH_SECONDS = 0.5
DEFAULT_REST_RESPONSE_SIZE = 10_000
STREAM_SLOTS = 1024
_WEB_FIELDS = {"RESTResponseSize": "rest_response_size", "maxStreams": "max_streams",
               "maxStreamsPerHost": "max_streams_per_host"}


def stream_slots(own: EventSettings) -> int:
    """How many stream slots the web's shared segment holds."""
    return max(own.max_streams, STREAM_SLOTS)


def in_force(own: EventSettings, engine: dict[str, Any] | None) -> EventSettings:
    """The settings to apply, from the web's own and the snapshot's `engine` section."""
    theirs = (engine or {}).get("eventSettings")
    if not isinstance(theirs, dict):
        return own
    changes: dict[str, Any] = {}
    if str(engine.get("configSource", "")).startswith("rm:"):
        changes = {f: theirs[k] for k, f in _WEB_FIELDS.items() if isinstance(theirs.get(k), int)}
    if theirs.get("trackingEventsEnabled") is False or theirs.get("ringBufferCapacity") == 0:
        changes["tracking_events_enabled"] = False
    return msgspec.structs.replace(own, **changes) if changes else own


def rest_response_size(settings: EventSettings) -> int:
    """The largest batch: the setting, or YuniKorn's default for 0."""
    return settings.rest_response_size or DEFAULT_REST_RESPONSE_SIZE


class SettingsInForce:
    """One worker's view of the settings, refreshed from the snapshot at most twice a second."""

    def __init__(self, own: EventSettings, snapshot: Any) -> None:
        self.own = own
        self._snapshot = snapshot
        self._value = own
        self._at = -REFRESH_SECONDS

    def get(self) -> EventSettings:
        now = time.monotonic()
        if now - self._at >= REFRESH_SECONDS:
            self._at = now
            self._value = in_force(self.own, self._engine())
        return self._value

    def _engine(self) -> dict[str, Any] | None:
        try:
            doc = self._snapshot.doc()
        except Exception:  # no engine (Unavailable), or a replica's source down: our own file
            return None
        engine = doc.get("engine") if isinstance(doc, dict) else None
        return engine if isinstance(engine, dict) else None
