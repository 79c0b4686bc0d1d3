"""The ykshm configuration file: YuniKorn's queues.yaml schema plus `service.event.*` settings.

One YAML file. Service settings parse as Go's strconv would (booleans as `ParseBool`, integers as
`ParseUint(s, 10, 32)`), so a value YuniKorn accepts is accepted here and nothing else is.
Unknown keys are rejected loudly, naming the key: a typo must not silently fall back to a default.
A setting changes on restart; SIGHUP reloads the queues, and a configuration an RM sends over
SI (its ConfigMaps, engine.rm_config) is applied the same way.

Errors: `ConfigError` (never raised for anything but a bad file) carries the key and the value;
`str(err)` is the one line a user sees. The sections (`service`, `service.event`, `service.cors`,
`ui`, a partition's `preemption`) are declared as msgspec Structs with Go's value rules
(common.configsection); the queue tree and limits are parsed by hand with the same helpers.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re as _re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import msgspec
import yaml

from common import safeyaml
from common.configsection import (ConfigError, GoBool, Uint32, check_keys, choice, mapping,
                                  parse_bool, parse_duration_ns, parse_int32, parse_section,
                                  parse_uint32, parsed_by, seq)
from common.quantity import QuantityError
from common.safeyaml import YamlLimitError, YamlLimits
from si import resources as _res
from engine.ugm.limits import LimitConfig
from si import resources as _res


class ConfigLimitError(ConfigError):
    """The document is over a parsing limit (common.safeyaml); `limit` names it."""

    def __init__(self, where: str, exc: YamlLimitError) -> None:
        super().__init__("file", where, str(exc))
        self.limit = exc.limit


class EventSettings(msgspec.Struct, frozen=True, rename="camel"):
    """`service.event.*`: the seed's settings plus ykshm's stream limits."""

    request_events_enabled: GoBool = True
    """The seed: "the default mirrors the current default in the code"; YuniKorn's code today
    always sends request events to its shim, so on (README, decisions)."""
    tracking_events_enabled: GoBool = True
    request_store_capacity: Uint32 = 1000
    ring_buffer_capacity: Uint32 = 100_000
    rest_response_size: Uint32 = msgspec.field(default=10_000, name="RESTResponseSize")
    max_streams: Uint32 = 100
    max_streams_per_host: Uint32 = 15

    @property
    def tracking_active(self) -> bool:
        """Tracking is on only if enabled and the ring has room (capacity 0 turns it off)."""
        return self.tracking_events_enabled and self.ring_buffer_capacity > 0


def parse_event_settings(raw: object) -> EventSettings:
    """Parse the mapping under `service.event` (None means all defaults)."""
    return parse_section(EventSettings, "service.event", raw)


FILE_LIMITS = YamlLimits(max_bytes=16 << 20, max_nodes=500_000)
"""The config file is the operator's own: larger than validate-conf's limits (web.cluster), but an
alias bomb in it still stops at the load, naming the limit, instead of hanging the engine's start."""


def read_yaml(path: str | Path, limits: YamlLimits = FILE_LIMITS) -> dict[str, Any]:
    """Read the file as a YAML mapping (common.safeyaml's limits); an empty file is an empty mapping."""
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError("file", str(path), exc.strerror or str(exc)) from None
    return _document(text, str(path), limits)


def load_document(text: str | bytes, where: str, limits: YamlLimits = FILE_LIMITS) -> dict[str, Any]:
    """A YAML mapping from text, read as the config file is (an RM's queues.yaml)."""
    return _document(text, where, limits)


def _position(exc: Exception) -> str:
    """`, line L column C: what PyYAML says` for a syntax error it located (1-based, as editors
    count), else ""."""
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return ""
    problem = getattr(exc, "problem", None)
    return f", line {mark.line + 1} column {mark.column + 1}" + (f": {problem}" if problem else "")


def _document(text: str | bytes, where: str, limits: YamlLimits) -> dict[str, Any]:
    """One YAML mapping; ConfigLimitError over a limit, ConfigError if not a YAML mapping."""
    try:
        data = safeyaml.load(text, limits)
    except YamlLimitError as exc:
        raise ConfigLimitError(where, exc) from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError("file", where, f"not valid YAML ({exc.__class__.__name__}{_position(exc)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("file", where, "the top level must be a mapping")
    return data


RETENTION_SECONDS = 3 * 24 * 3600
"""How long a finished application stays visible (YuniKorn's terminatedTimeout: 3 days)."""

MAX_RETAINED_APPS = 10_000
"""Finished applications kept visible at most per partition; the oldest expires first."""

_ORIGIN = _re.compile(r"^https?://[^/\s?#]+$")


def _origins(key: str, raw: object) -> tuple[str, ...]:
    """`*` (YuniKorn's default) or origins `scheme://host[:port]`."""
    origins = seq(key, raw)
    for i, origin in enumerate(origins):
        if not isinstance(origin, str) or not (origin == "*" or _ORIGIN.match(origin)):
            raise ConfigError(f"{key}[{i}]", origin,
                              "must be * or an origin such as https://ui.example.com:8443")
    return tuple(origins)


class CorsSettings(msgspec.Struct, frozen=True, rename="camel"):
    """`service.cors`: which browser origins the web answers (web.responses.Cors)."""

    allowed_origins: Annotated[tuple[str, ...], parsed_by(_origins)] = ("*",)


def _proxies(key: str, raw: object) -> tuple[str, ...]:
    """Addresses or CIDRs (common.http1.forwarded)."""
    from common.http1.forwarded import ProxyConfigError, TrustedProxies

    entries = seq(key, raw)
    for i, entry in enumerate(entries):
        try:
            TrustedProxies.parse([entry])
        except ProxyConfigError as exc:
            raise ConfigError(f"{key}[{i}]", entry, "not an IP address or CIDR (e.g. 10.0.0.0/8)") from exc
    return tuple(entries)


class WebServiceSettings(msgspec.Struct, frozen=True, rename="camel"):
    """`service.web`: TLS of the REST and stream API, and the proxies whose X-Forwarded-For counts
    (web.main; `ykshm web --certfile ...` overrides). "" = unset."""

    cert_file: str = ""
    key_file: str = ""
    ca_certs: str = ""
    """Verify client certificates signed by these CAs (a client without one is still served)."""
    require_client_cert: GoBool = False
    trusted_proxies: Annotated[tuple[str, ...], parsed_by(_proxies)] = ()


class ServiceSettings(msgspec.Struct, frozen=True, rename="camel"):
    """`service`: the event settings, the retention of finished applications, CORS, the web."""

    event: EventSettings = msgspec.field(default_factory=EventSettings)
    application_retention_seconds: Uint32 = RETENTION_SECONDS
    """Completed/Failed/Rejected -> Expired after it."""
    max_retained_applications: Uint32 = MAX_RETAINED_APPS
    """0: none kept; finished apps expire at once."""
    cors: CorsSettings = msgspec.field(default_factory=CorsSettings)
    web: WebServiceSettings = msgspec.field(default_factory=WebServiceSettings)


def _service(data: Mapping[str, Any]) -> ServiceSettings:
    return parse_section(ServiceSettings, "service", data.get("service"))


def load_event_settings(path: str | Path | None) -> EventSettings:
    """The service settings of a config file (all defaults without a file).

    Used by readers (web) that need only `service.event.*`; the engine parses the whole file.
    """
    if path is None:
        return EventSettings()
    return _service(read_yaml(path)).event


def _ui_dir(key: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(key, value, "must be a directory path")
    return value


class UiSettings(msgspec.Struct, frozen=True):
    """`ui.dir`: a directory with a single-page UI build the web serves at `/` ("" = none)."""

    dir: Annotated[str, parsed_by(_ui_dir)] = ""


def _ui(data: Mapping[str, Any]) -> UiSettings:
    return parse_section(UiSettings, "ui", data.get("ui"))


@dataclasses.dataclass(frozen=True, slots=True)
class WebConfig:
    """What the web reads of a config file."""

    event: EventSettings = dataclasses.field(default_factory=EventSettings)
    ui_dir: str = ""
    cors_origins: tuple[str, ...] = ("*",)
    web: WebServiceSettings = dataclasses.field(default_factory=WebServiceSettings)


def load_web_config(path: str | Path | None) -> WebConfig:
    """What the web reads of a config file: the service settings, `ui.dir`, the CORS origins."""
    if path is None:
        return WebConfig()
    data = read_yaml(path)
    check_keys("", data, _TOP_KEYS)
    service = _service(data)
    return WebConfig(service.event, _ui(data).dir, service.cors.allowed_origins, service.web)


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
    max_retained_apps: int = MAX_RETAINED_APPS
    """`service.maxRetainedApplications`: how many finished applications stay visible at most."""
    extra: Mapping[str, str] | None = None
    """The keys of a configuration an RM sent (engine.rm_config), as in force; None from a file."""


def default_partition(name: str = "default") -> PartitionConfig:
    """An unconfigured partition, as YuniKorn's default configuration: a `root` parent queue and
    the placement rule `tag namespace create:true` (an application goes to root.<namespace>)."""
    from engine.placement import parse_rules

    return PartitionConfig(name=name, root=QueueConfig(name="root", path="root", parent=True),
                           placement_rules=parse_rules("placementrules", DEFAULT_PLACEMENT_RULES))


DEFAULT_PLACEMENT_RULES = [{"name": "tag", "value": "namespace", "create": True}]
"""YuniKorn's default placement (configs/config.go): without a configuration file."""


def _resource_map(key: str, raw: object) -> dict[str, int]:
    raw = mapping(key, raw)
    result: dict[str, int] = {}
    for name, value in raw.items():
        try:
            result.update(_res.from_config({name: value}))
        except (QuantityError, TypeError, ValueError) as exc:
            raise ConfigError(f"{key}.{name}", value, str(exc)) from None
    return result


def _parse_resources(key: str, raw: object) -> tuple[dict[str, int], dict[str, int]]:
    raw = mapping(key, raw)
    check_keys(key, raw, _RESOURCE_KEYS)
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

def _parse_properties(key: str, raw: object) -> dict[str, str]:
    raw = mapping(key, raw)
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
    choice(f"{key}.preemption.policy", props.get("preemption.policy"), PREEMPTION_POLICIES)
    choice(f"{key}.priority.policy", props.get("priority.policy"), PRIORITY_POLICIES)
    if "priority.offset" in props:
        parse_int32(f"{key}.priority.offset", props["priority.offset"])
    if "preemption.delay" in props:
        delay = parse_duration_ns(f"{key}.preemption.delay", props["preemption.delay"])
        if delay <= 0:
            raise ConfigError(f"{key}.preemption.delay", props["preemption.delay"],
                              "must be a positive duration")
    return props


def _parse_limits(key: str, raw: object) -> list[dict[str, Any]]:
    limits = []
    seen: dict[str, set[str]] = {"users": set(), "groups": set()}
    for i, item in enumerate(seq(key, raw)):
        lkey = f"{key}[{i}]"
        item = mapping(lkey, item)
        check_keys(lkey, item, _LIMIT_KEYS)
        users = seq(f"{lkey}.users", item.get("users"))
        groups = seq(f"{lkey}.groups", item.get("groups"))
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
    raw = mapping(key, raw)
    check_keys(key, raw, _QUEUE_KEYS)
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
        traw = mapping(tkey, raw["childtemplate"])
        check_keys(tkey, traw, _TEMPLATE_KEYS)
        tg, tm = _parse_resources(f"{tkey}.resources", traw.get("resources"))
        queue.child_template = QueueConfig(
            name="", path="", guaranteed=tg, max=tm,
            max_applications=_max_applications(tkey, traw),
            properties=_parse_properties(f"{tkey}.properties", traw.get("properties")))
    seen: set[str] = set()
    for i, child_raw in enumerate(seq(f"{key}.queues", raw.get("queues"))):
        child_name = child_raw.get("name") if isinstance(child_raw, Mapping) else None
        if isinstance(child_name, str) and child_name.lower() in seen:  # before its subtree is walked
            raise ConfigError(f"{key}.queues[{i}].name", child_name, "duplicate queue name")
        child = _parse_queue(f"{key}.queues[{i}]", child_raw, path, maximum or parent_max)
        seen.add(child.name.lower())
        queue.children.append(child)
    if not parent_path:
        queue.name = queue.path = "root"
        queue.parent = True
    return queue


def _parse_partition(key: str, raw: object) -> PartitionConfig:
    raw = mapping(key, raw)
    check_keys(key, raw, _PARTITION_KEYS)
    name = raw.get("name", "default")
    if not isinstance(name, str) or not _QUEUE_NAME.match(name):
        raise ConfigError(f"{key}.name", name, "must be a partition name")
    queues = seq(f"{key}.queues", raw.get("queues"))
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
        nsp = mapping(f"{key}.nodesortpolicy", raw["nodesortpolicy"])
        policy = str(nsp.get("type", "fair"))
        if policy not in ("fair", "binpacking"):
            raise ConfigError(f"{key}.nodesortpolicy.type", policy, "must be fair or binpacking")
    from engine.placement import parse_rules  # placement imports this module's ConfigError

    rules = parse_rules(f"{key}.placementrules", raw.get("placementrules"))
    return PartitionConfig(name=name, root=root, placement_rules=rules, node_sort_policy=policy,
                           preemption_enabled=_preemption_enabled(f"{key}.preemption",
                                                                  raw.get("preemption")))


class PreemptionSettings(msgspec.Struct, frozen=True):
    """A partition's `preemption` (YuniKorn's default: enabled)."""

    enabled: GoBool = True
    quotapreemptionenabled: GoBool = False


def _preemption_enabled(key: str, raw: object) -> bool:
    """A partition's `preemption: {enabled}`. YuniKorn's `quotapreemptionenabled` is accepted
    only as false: quota-change preemption is not built, and a config that asks for it must not
    load and then silently do nothing."""
    section = parse_section(PreemptionSettings, key, raw)
    if section.quotapreemptionenabled:
        raise ConfigError(f"{key}.quotapreemptionenabled", mapping(key, raw)["quotapreemptionenabled"],
                          "quota-change preemption is not supported by ykshm")
    return section.enabled


def parse_config(data: Mapping[str, Any]) -> EngineConfig:
    """The engine's whole configuration from a parsed YAML mapping (ConfigError names the key)."""
    check_keys("", data, _TOP_KEYS)
    service = _service(data)
    _ui(data)
    partitions = []
    seen: set[str] = set()
    for i, raw in enumerate(seq("partitions", data.get("partitions"))):
        part = _parse_partition(f"partitions[{i}]", raw)
        if part.name in seen:
            raise ConfigError(f"partitions[{i}].name", part.name, "duplicate partition name")
        seen.add(part.name)
        partitions.append(part)
    if not partitions:
        partitions.append(default_partition())
    return EngineConfig(event=service.event, partitions=partitions, source=dict(data),
                        retention_s=service.application_retention_seconds,
                        max_retained_apps=service.max_retained_applications)


def load_config(path: str | Path | None) -> EngineConfig:
    """Read and parse the engine's config file (defaults without a file)."""
    if path is None:
        return parse_config({})
    config = parse_config(read_yaml(path))
    config.checksum = hashlib.sha256(Path(path).read_bytes()).hexdigest().upper()
    return config

