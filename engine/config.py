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
import hashlib
import re as _re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from common.quantity import QuantityError
from engine.ugm.limits import LimitConfig
from si import resources as _res

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


RETENTION_SECONDS = 3 * 24 * 3600
"""How long a finished application stays visible (YuniKorn's terminatedTimeout: 3 days)."""


def _service_events(data: Mapping[str, Any]) -> EventSettings:
    """`service.event.*` of a parsed file (`service` holds only that and the retention)."""
    service = _mapping("service", data.get("service"))
    for key in service:
        if key not in ("event", "applicationRetentionSeconds"):
            raise ConfigError(f"service.{key}", service[key], "unknown key")
    return parse_event_settings(service.get("event"))


def _retention(data: Mapping[str, Any]) -> int:
    """`service.applicationRetentionSeconds`: Completed/Failed/Rejected -> Expired after it."""
    value = _mapping("service", data.get("service")).get("applicationRetentionSeconds")
    if value is None:
        return RETENTION_SECONDS
    return parse_uint32("service.applicationRetentionSeconds", value)


def load_event_settings(path: str | Path | None) -> EventSettings:
    """The service settings of a config file (all defaults without a file).

    Used by readers (web) that need only `service.event.*`; the engine parses the whole file.
    """
    if path is None:
        return EventSettings()
    return _service_events(read_yaml(path))


def _ui_dir(data: Mapping[str, Any]) -> str:
    """`ui.dir`: a directory with a single-page UI build the web serves at `/` ("" = none)."""
    ui = _mapping("ui", data.get("ui"))
    _check_keys("ui", ui, {"dir"})
    value = ui.get("dir")
    if value is None:
        return ""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError("ui.dir", value, "must be a directory path")
    return value


def load_web_config(path: str | Path | None) -> tuple[EventSettings, str]:
    """What the web reads of a config file: the service settings and `ui.dir`."""
    if path is None:
        return EventSettings(), ""
    data = read_yaml(path)
    _check_keys("", data, _TOP_KEYS)
    return _service_events(data), _ui_dir(data)


# --- partitions and queues (YuniKorn queues.yaml) -----------------------------------------------

_QUEUE_NAME = _re.compile(r"^[a-zA-Z0-9_:#/@-]{1,64}$")
SORT_POLICIES = ("fifo", "fair")
_QUEUE_KEYS = {"name", "parent", "resources", "maxapplications", "limits", "properties", "queues",
               "submitacl", "adminacl", "childtemplate"}
_RESOURCE_KEYS = {"guaranteed", "max"}
_LIMIT_KEYS = {"limit", "users", "groups", "maxresources", "maxapplications"}
_TEMPLATE_KEYS = {"maxapplications", "properties", "resources"}
_PARTITION_KEYS = {"name", "queues", "placementrules", "limits", "nodesortpolicy", "preemption",
                   "statedumpfilepath"}
_PROPERTY_KEYS = {"application.sort.policy", "application.sort.priority", "priority.policy",
                  "priority.offset", "preemption.policy", "preemption.delay"}
_TOP_KEYS = {"partitions", "service", "ui"}


@dataclasses.dataclass(slots=True)
class QueueConfig:
    """One configured queue. `limits` are dicts `{limit, users, groups, maxresources,
    maxapplications}` with maxresources parsed (the UGM's input, as queues.yaml spells them)."""

    name: str
    path: str
    parent: bool = False
    guaranteed: dict[str, int] = dataclasses.field(default_factory=dict)
    max: dict[str, int] = dataclasses.field(default_factory=dict)
    max_applications: int = 0
    limits: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    properties: dict[str, str] = dataclasses.field(default_factory=dict)
    children: list["QueueConfig"] = dataclasses.field(default_factory=list)
    child_template: "QueueConfig | None" = None

    @property
    def sort_policy(self) -> str:
        return self.properties.get("application.sort.policy", "fifo")

    @property
    def is_leaf(self) -> bool:
        return not self.children and not self.parent

    def walk(self):
        yield self
        for child in self.children:
            yield from child.walk()


@dataclasses.dataclass(slots=True)
class PartitionConfig:
    name: str
    root: QueueConfig
    placement_rules: tuple[Any, ...] = ()
    """`engine.placement.Rule`s in order; empty: YuniKorn's implicit `provided create:false`."""
    node_sort_policy: str = "fair"
    preemption_enabled: bool = True
    """`preemption.enabled` (YuniKorn's default: true): whether asks may preempt at all."""


@dataclasses.dataclass(slots=True)
class EngineConfig:
    """Everything the engine reads from the file."""

    event: EventSettings
    partitions: list[PartitionConfig]
    source: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """The mapping as read from the file: what `GET /ws/v1/config` shows (engine.config_doc)."""
    checksum: str = ""
    """SHA-256 of the file's bytes in upper-case hex, as YuniKorn's `Checksum` ("" without a file)."""
    retention_s: int = RETENTION_SECONDS
    """`service.applicationRetentionSeconds`: how long finished applications stay visible."""


def default_partition(name: str = "default") -> PartitionConfig:
    """An unconfigured partition, as YuniKorn's default configuration: a `root` parent queue and
    the placement rule `tag namespace create:true` (an application goes to root.<namespace>)."""
    from engine.placement import parse_rules

    return PartitionConfig(name=name, root=QueueConfig(name="root", path="root", parent=True),
                           placement_rules=parse_rules("placementrules", DEFAULT_PLACEMENT_RULES))


DEFAULT_PLACEMENT_RULES = [{"name": "tag", "value": "namespace", "create": True}]
"""YuniKorn's default placement (configs/config.go): without a configuration file."""


def _mapping(key: str, value: object) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(key, value, "must be a mapping")
    return value


def _seq(key: str, value: object) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(key, value, "must be a list")
    return value


def _check_keys(key: str, raw: Mapping[str, Any], allowed: set[str]) -> None:
    for name in raw:
        if name not in allowed:
            raise ConfigError(f"{key}.{name}" if key else str(name), raw[name], "unknown key")


def _resource_map(key: str, raw: object) -> dict[str, int]:
    raw = _mapping(key, raw)
    result: dict[str, int] = {}
    for name, value in raw.items():
        try:
            result.update(_res.from_config({name: value}))
        except (QuantityError, TypeError, ValueError) as exc:
            raise ConfigError(f"{key}.{name}", value, str(exc)) from None
    return result


def _parse_resources(key: str, raw: object) -> tuple[dict[str, int], dict[str, int]]:
    raw = _mapping(key, raw)
    _check_keys(key, raw, _RESOURCE_KEYS)
    guaranteed = _resource_map(f"{key}.guaranteed", raw.get("guaranteed"))
    maximum = _resource_map(f"{key}.max", raw.get("max"))
    for name, value in guaranteed.items():
        if name in maximum and value > maximum[name]:
            raise ConfigError(f"{key}.guaranteed.{name}", raw["guaranteed"][name],
                              f"guaranteed is larger than max ({maximum[name]})")
    return guaranteed, maximum


def _max_applications(key: str, raw: Mapping[str, Any]) -> int:
    """`maxapplications` under `key` (0, no limit, when absent)."""
    value = raw.get("maxapplications")
    return 0 if value is None else parse_uint32(f"{key}.maxapplications", value)


PREEMPTION_POLICIES = ("default", "fence", "disabled")
PRIORITY_POLICIES = ("default", "fence")
PREEMPTION_DELAY_NS = 30 * 1_000_000_000
"""A queue's default `preemption.delay` (YuniKorn: 30s)."""

_DURATION_UNITS = {"ns": 1, "us": 1_000, "\u00b5s": 1_000, "\u03bcs": 1_000, "ms": 1_000_000,
                   "s": 1_000_000_000, "m": 60_000_000_000, "h": 3_600_000_000_000}
_DURATION_PART = _re.compile(r"([0-9]*(?:\.[0-9]*)?)([a-z\u00b5\u03bc]+)")


def parse_duration_ns(key: str, value: object) -> int:
    """A Go `time.ParseDuration` string ("30s", "1m30s", "1.5h", "0") as nanoseconds.

    Only what Go accepts is accepted (a sign, then one or more number+unit parts; units ns, us,
    ms, s, m, h; "0" alone needs no unit); anything else is a ConfigError naming key and value."""
    text = value if isinstance(value, str) else None
    if text is None or not text:
        raise ConfigError(key, value, "not a duration (use Go syntax: 30s, 1m30s, 1.5h)")
    body = text.lstrip("+-")
    sign = -1 if text.startswith("-") else 1
    if len(text) - len(body) > 1:
        raise ConfigError(key, value, "not a duration (use Go syntax: 30s, 1m30s, 1.5h)")
    if body == "0":
        return 0
    total = 0.0
    pos = 0
    while pos < len(body):
        match = _DURATION_PART.match(body, pos)
        if match is None or match.group(1) in ("", ".") or match.group(2) not in _DURATION_UNITS:
            raise ConfigError(key, value, "not a duration (use Go syntax: 30s, 1m30s, 1.5h)")
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if not body or total >= 2**63:
        raise ConfigError(key, value, "not a duration (use Go syntax: 30s, 1m30s, 1.5h)")
    return sign * int(total)


def _parse_int32(key: str, value: object) -> int:
    """A signed 32-bit decimal integer, as Go's strconv.ParseInt(s, 10, 32)."""
    text = str(value) if not isinstance(value, bool) else ""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits.isascii() or not digits.isdigit():
        raise ConfigError(key, value, "not a 32-bit integer")
    number = int(text)
    if not -2**31 <= number < 2**31:
        raise ConfigError(key, value, "out of range for a 32-bit integer")
    return number


def _check_choice(key: str, value: str | None, choices: tuple[str, ...]) -> None:
    if value is not None and value not in choices:
        raise ConfigError(key, value, f"must be one of {', '.join(choices)}")


def _parse_properties(key: str, raw: object) -> dict[str, str]:
    raw = _mapping(key, raw)
    props: dict[str, str] = {}
    for name, value in raw.items():
        if name not in _PROPERTY_KEYS:
            raise ConfigError(f"{key}.{name}", value, "unknown key")
        if value is None or isinstance(value, (dict, list)):
            raise ConfigError(f"{key}.{name}", value, "must be a single value")
        props[str(name)] = value if isinstance(value, str) else (
            str(value).lower() if isinstance(value, bool) else str(value))
    policy = props.get("application.sort.policy")
    if policy is not None and policy not in SORT_POLICIES:
        raise ConfigError(f"{key}.application.sort.policy", policy, "must be fifo or fair")
    _check_choice(f"{key}.preemption.policy", props.get("preemption.policy"), PREEMPTION_POLICIES)
    _check_choice(f"{key}.priority.policy", props.get("priority.policy"), PRIORITY_POLICIES)
    if "priority.offset" in props:
        _parse_int32(f"{key}.priority.offset", props["priority.offset"])
    if "preemption.delay" in props:
        delay = parse_duration_ns(f"{key}.preemption.delay", props["preemption.delay"])
        if delay <= 0:
            raise ConfigError(f"{key}.preemption.delay", props["preemption.delay"],
                              "must be a positive duration")
    return props


def _parse_limits(key: str, raw: object) -> list[dict[str, Any]]:
    limits = []
    seen: dict[str, set[str]] = {"users": set(), "groups": set()}
    for i, item in enumerate(_seq(key, raw)):
        lkey = f"{key}[{i}]"
        item = _mapping(lkey, item)
        _check_keys(lkey, item, _LIMIT_KEYS)
        users = _seq(f"{lkey}.users", item.get("users"))
        groups = _seq(f"{lkey}.groups", item.get("groups"))
        for field, names in (("users", users), ("groups", groups)):
            for j, name in enumerate(names):
                if not isinstance(name, str) or not name or name != name.strip():
                    raise ConfigError(f"{lkey}.{field}[{j}]", name, "must be a non-empty name")
                if name in seen[field]:
                    raise ConfigError(f"{lkey}.{field}[{j}]", name,
                                      "already has a limit in this queue")
                seen[field].add(name)
        if not users and not groups:
            raise ConfigError(lkey, dict(item), "a limit needs users or groups")
        max_res = _resource_map(f"{lkey}.maxresources", item.get("maxresources"))
        max_apps = _max_applications(lkey, item)
        if not max_res and not max_apps:
            raise ConfigError(lkey, dict(item), "a limit needs maxresources or maxapplications")
        limits.append({"limit": str(item.get("limit") or ""), "users": list(users),
                       "groups": list(groups), "maxresources": max_res,
                       "maxapplications": max_apps})
    return limits


def _parse_queue(key: str, raw: object, parent_path: str,
                 parent_max: dict[str, int] | None) -> QueueConfig:
    raw = _mapping(key, raw)
    _check_keys(key, raw, _QUEUE_KEYS)
    name = raw.get("name")
    if not isinstance(name, str) or not _QUEUE_NAME.match(name):
        raise ConfigError(f"{key}.name", name,
                          "must be 1-64 characters of letters, digits, _ : # / @ -")
    path = f"{parent_path}.{name}" if parent_path else name
    if not parent_path and name.lower() != "root":
        raise ConfigError(f"{key}.name", name, "the top queue must be root")
    if parent_path and name.lower() == "root":
        raise ConfigError(f"{key}.name", name, "root is reserved for the top queue")
    guaranteed, maximum = _parse_resources(f"{key}.resources", raw.get("resources"))
    if not parent_path and (guaranteed or maximum):
        raise ConfigError(f"{key}.resources", raw.get("resources"),
                          "the root queue's resources are the cluster's; do not set them")
    if parent_max:
        for rname, value in maximum.items():
            if rname in parent_max and value > parent_max[rname]:
                raise ConfigError(f"{key}.resources.max.{rname}", raw["resources"]["max"][rname],
                                  f"larger than the parent's max ({parent_max[rname]})")
    max_apps = _max_applications(key, raw)
    parent = False
    if raw.get("parent") is not None:
        parent = parse_bool(f"{key}.parent", raw["parent"])
    queue = QueueConfig(name=name, path=path, parent=parent, guaranteed=guaranteed, max=maximum,
                        max_applications=max_apps,
                        limits=_parse_limits(f"{key}.limits", raw.get("limits")),
                        properties=_parse_properties(f"{key}.properties", raw.get("properties")))
    if raw.get("childtemplate") is not None:
        tkey = f"{key}.childtemplate"
        traw = _mapping(tkey, raw["childtemplate"])
        _check_keys(tkey, traw, _TEMPLATE_KEYS)
        tg, tm = _parse_resources(f"{tkey}.resources", traw.get("resources"))
        queue.child_template = QueueConfig(
            name="", path="", guaranteed=tg, max=tm,
            max_applications=_max_applications(tkey, traw),
            properties=_parse_properties(f"{tkey}.properties", traw.get("properties")))
    seen: set[str] = set()
    for i, child_raw in enumerate(_seq(f"{key}.queues", raw.get("queues"))):
        child = _parse_queue(f"{key}.queues[{i}]", child_raw, path, maximum or parent_max)
        if child.name.lower() in seen:
            raise ConfigError(f"{key}.queues[{i}].name", child.name, "duplicate queue name")
        seen.add(child.name.lower())
        queue.children.append(child)
    if not parent_path:
        queue.name = queue.path = "root"
        queue.parent = True
    return queue


def _parse_partition(key: str, raw: object) -> PartitionConfig:
    raw = _mapping(key, raw)
    _check_keys(key, raw, _PARTITION_KEYS)
    name = raw.get("name", "default")
    if not isinstance(name, str) or not _QUEUE_NAME.match(name):
        raise ConfigError(f"{key}.name", name, "must be a partition name")
    queues = _seq(f"{key}.queues", raw.get("queues"))
    if not queues:
        root = QueueConfig(name="root", path="root", parent=True)
    elif len(queues) == 1 and isinstance(queues[0], Mapping) and \
            str(queues[0].get("name", "")).lower() == "root":
        root = _parse_queue(f"{key}.queues[0]", queues[0], "", None)
    else:
        for i, q in enumerate(queues):
            if isinstance(q, Mapping) and str(q.get("name", "")).lower() == "root":
                raise ConfigError(f"{key}.queues[{i}].name", q.get("name"),
                                  "root must be the only top-level queue")
        root = _parse_queue(key, {"name": "root", "queues": queues}, "", None)
    if raw.get("limits") is not None:
        root.limits = root.limits + _parse_limits(f"{key}.limits", raw["limits"])
    try:  # the UGM's rules have the last word (e.g. a user limited here and on root too)
        LimitConfig.parse({q.path: q.limits for q in root.walk() if q.limits})
    except ValueError as exc:
        raise ConfigError(f"{key}.limits", raw.get("limits"), str(exc)) from None
    policy = "fair"
    if raw.get("nodesortpolicy") is not None:
        nsp = _mapping(f"{key}.nodesortpolicy", raw["nodesortpolicy"])
        policy = str(nsp.get("type", "fair"))
        if policy not in ("fair", "binpacking"):
            raise ConfigError(f"{key}.nodesortpolicy.type", policy, "must be fair or binpacking")
    from engine.placement import parse_rules  # placement imports this module's ConfigError

    rules = parse_rules(f"{key}.placementrules", raw.get("placementrules"))
    return PartitionConfig(name=name, root=root, placement_rules=rules, node_sort_policy=policy,
                           preemption_enabled=_preemption_enabled(f"{key}.preemption",
                                                                  raw.get("preemption")))


def _preemption_enabled(key: str, raw: object) -> bool:
    """A partition's `preemption: {enabled}` (default true). YuniKorn's
    `quotapreemptionenabled` is accepted only as false: quota-change preemption is not built,
    and a config that asks for it must not load and then silently do nothing."""
    raw = _mapping(key, raw)
    _check_keys(key, raw, {"enabled", "quotapreemptionenabled"})
    if raw.get("quotapreemptionenabled") is not None and parse_bool(
            f"{key}.quotapreemptionenabled", raw["quotapreemptionenabled"]):
        raise ConfigError(f"{key}.quotapreemptionenabled", raw["quotapreemptionenabled"],
                          "quota-change preemption is not supported by ykshm")
    if raw.get("enabled") is None:
        return True
    return parse_bool(f"{key}.enabled", raw["enabled"])


def parse_config(data: Mapping[str, Any]) -> EngineConfig:
    """The engine's whole configuration from a parsed YAML mapping (ConfigError names the key)."""
    _check_keys("", data, _TOP_KEYS)
    events = _service_events(data)
    _ui_dir(data)
    partitions = []
    seen: set[str] = set()
    for i, raw in enumerate(_seq("partitions", data.get("partitions"))):
        part = _parse_partition(f"partitions[{i}]", raw)
        if part.name in seen:
            raise ConfigError(f"partitions[{i}].name", part.name, "duplicate partition name")
        seen.add(part.name)
        partitions.append(part)
    if not partitions:
        partitions.append(default_partition())
    return EngineConfig(event=events, partitions=partitions, source=dict(data), retention_s=_retention(data))


def load_config(path: str | Path | None) -> EngineConfig:
    """Read and parse the engine's config file (defaults without a file)."""
    if path is None:
        return parse_config({})
    config = parse_config(read_yaml(path))
    config.checksum = hashlib.sha256(Path(path).read_bytes()).hexdigest().upper()
    return config


def parse_config_text(text: str | bytes) -> EngineConfig:
    """Parse a whole configuration document (what `POST /ws/v1/validate-conf` receives)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError("file", "<request body>", f"not valid YAML ({exc.__class__.__name__})") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("file", "<request body>", "the top level must be a mapping")
    return parse_config(data)
