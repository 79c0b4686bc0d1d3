"""The ykshm configuration file: YuniKorn's queues.yaml schema plus `service.event.*` settings.

One YAML file. Service settings parse as Go's strconv would (booleans as `ParseBool`, integers as
`ParseUint(s, 10, 32)`), so a value YuniKorn accepts is accepted here and nothing else is.
Unknown keys are rejected loudly, naming the key: a typo must not silently fall back to a default.
A setting changes on restart; there is no live reload.

Errors: `ConfigError` (never raised for anything but a bad file) carries the key and the value;
`str(err)` is the one line a user sees.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


class ConfigError(Exception):
    """The configuration file is unreadable or a key has a value we do not accept."""

    def __init__(self, key: str, value: object, reason: str) -> None:
        super().__init__(f"config: {key}: invalid value {value!r}: {reason}")
        self.key = key
        self.value = value
        self.reason = reason


def parse_bool(key: str, value: object) -> bool:
    """Accept exactly what Go's strconv.ParseBool accepts (and YAML booleans)."""
    if isinstance(value, bool):
        return value
    text = str(value)
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(key, value, "not a boolean (use true/false, 1/0, t/f)")


def parse_uint32(key: str, value: object) -> int:
    """Accept exactly what Go's strconv.ParseUint(s, 10, 32) accepts: decimal digits, < 2**32."""
    if isinstance(value, bool):
        raise ConfigError(key, value, "not an unsigned 32-bit integer")
    text = str(value)
    if not text.isascii() or not text.isdigit():
        raise ConfigError(key, value, "not an unsigned 32-bit integer")
    number = int(text)
    if number >= 2**32:
        raise ConfigError(key, value, "out of range for an unsigned 32-bit integer")
    return number


@dataclasses.dataclass(frozen=True, slots=True)
class EventSettings:
    """`service.event.*`: the seed's settings plus ykshm's stream limits."""

    request_events_enabled: bool = False
    tracking_events_enabled: bool = True
    request_store_capacity: int = 1000
    ring_buffer_capacity: int = 100_000
    rest_response_size: int = 10_000
    max_streams: int = 100
    max_streams_per_host: int = 15

    @property
    def tracking_active(self) -> bool:
        """Tracking is on only if enabled and the ring has room (capacity 0 turns it off)."""
        return self.tracking_events_enabled and self.ring_buffer_capacity > 0


_EVENT_KEYS: dict[str, tuple[str, Any]] = {
    "requestEventsEnabled": ("request_events_enabled", parse_bool),
    "trackingEventsEnabled": ("tracking_events_enabled", parse_bool),
    "requestStoreCapacity": ("request_store_capacity", parse_uint32),
    "ringBufferCapacity": ("ring_buffer_capacity", parse_uint32),
    "RESTResponseSize": ("rest_response_size", parse_uint32),
    "maxStreams": ("max_streams", parse_uint32),
    "maxStreamsPerHost": ("max_streams_per_host", parse_uint32),
}


def parse_event_settings(raw: object) -> EventSettings:
    """Parse the mapping under `service.event` (None means all defaults)."""
    if raw is None:
        return EventSettings()
    if not isinstance(raw, Mapping):
        raise ConfigError("service.event", raw, "must be a mapping")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in _EVENT_KEYS:
            raise ConfigError(f"service.event.{key}", value, "unknown key")
        field, parse = _EVENT_KEYS[key]
        values[field] = parse(f"service.event.{key}", value)
    return EventSettings(**values)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read the file as a YAML mapping; an empty file is an empty mapping."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("file", str(path), exc.strerror or str(exc)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError("file", str(path), f"not valid YAML ({exc.__class__.__name__})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("file", str(path), "the top level must be a mapping")
    return data


def load_event_settings(path: str | Path | None) -> EventSettings:
    """The service settings of a config file (all defaults without a file).

    Used by readers (web) that need only `service.event.*`; the engine parses the whole file.
    """
    if path is None:
        return EventSettings()
    data = read_yaml(path)
    service = data.get("service") or {}
    if not isinstance(service, Mapping):
        raise ConfigError("service", service, "must be a mapping")
    for key in service:
        if key != "event":
            raise ConfigError(f"service.{key}", service[key], "unknown key")
    return parse_event_settings(service.get("event"))
