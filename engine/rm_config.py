"""The configuration an RM sends over SI (queues.yaml text + extraConfig) as the engine's.

YuniKorn's core receives the queue configuration as YAML text and the ConfigMaps' other keys as
`extraConfig` (RegisterResourceManager, UpdateConfiguration). Here the text is read as the
engine's config file is (engine.config: same parser, same limits), with only YuniKorn's
`partitions` at its top (service settings arrive as keys), and the keys of `si.config` become the
`service` settings they name, so `Scheduler.reload` (the SIGHUP path) applies the result. A bad
value is a ConfigError naming the ConfigMap key. Settings that are fixed when the engine starts
(the ring's and request store's sizes, retention: `Apply.ENGINE_FILE`) keep their running value;
a ConfigMap asking for another one gets a warning, shown in the snapshot (`ykshm status`, the
healthcheck), never silently dropped.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import msgspec

from common.configsection import ConfigError, parse_duration_ns
from common.safeyaml import YamlLimits
from engine.config import FILE_LIMITS, EngineConfig, load_document, parse_config
from si.config import CORE_KEYS, Apply, is_log_key, log_level

_BY_SETTING = {k.setting: k for k in CORE_KEYS.values() if k.setting}
_EVENT_FIELDS = {"service.event.requestStoreCapacity": "request_store_capacity",
                 "service.event.ringBufferCapacity": "ring_buffer_capacity"}
"""The event settings the engine keeps from its start (ENGINE_FILE keys: the shared-memory
sizes). The web's (RESTResponseSize, maxStreams, maxStreamsPerHost) are live: the snapshot
carries them to the web's workers (web.app.App.settings)."""


def _service_mapping(extra: Mapping[str, str]) -> dict[str, Any]:
    """The `service` section of ykshm's file that the engine's keys of `extra` spell."""
    service: dict[str, Any] = {}
    for name, value in extra.items():
        if is_log_key(name):
            log_level(name, value)
            continue
        key = CORE_KEYS.get(name)
        if key is None:
            continue  # the shim's keys (service.*, kubernetes.*) and the admission controller's
        if not key.setting:
            parse_duration_ns(name, value)  # health.checkInterval: checked, no effect
            continue
        node = service
        *parents, leaf = key.setting.split(".")[1:]
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return service


def _kept(config: EngineConfig, running: EngineConfig) -> EngineConfig:
    """`config` with the running values of what is fixed at the engine's start."""
    fixed = {f: getattr(running.event, f) for f in _EVENT_FIELDS.values()}
    config.event = msgspec.structs.replace(config.event, **fixed)
    config.retention_s = running.retention_s
    config.max_retained_apps = running.max_retained_apps
    return config


def _value(setting: str, config: EngineConfig) -> object:
    """A start-fixed setting's value in `config`."""
    if setting in _EVENT_FIELDS:
        return getattr(config.event, _EVENT_FIELDS[setting])
    if setting == "service.applicationRetentionSeconds":
        return config.retention_s
    return config.max_retained_apps


def _warnings(extra: Mapping[str, str], wanted: EngineConfig, running: EngineConfig
              ) -> tuple[list[str], dict[str, str]]:
    """Keys asking for a value that stays as it runs, and the extra map as in force."""
    warnings: list[str] = []
    shown = dict(extra)
    for name in sorted(extra):
        key = CORE_KEYS.get(name)
        if key is None or key.apply is not Apply.ENGINE_FILE:
            continue
        have = _value(key.setting, running)
        shown[name] = str(have)
        if _value(key.setting, wanted) != have:
            warnings.append(f"{name}: {extra[name]!r} is not in force ({have} is): "
                            f"{key.apply.value}")
    return warnings, shown


def queues_document(text: str | bytes, limits: YamlLimits = FILE_LIMITS) -> dict[str, Any]:
    """A ConfigMap's queues.yaml as a mapping: only `partitions` at its top, as YuniKorn's
    strict SchedulerConfig (ConfigError naming any other key). `POST /ws/v1/validate-conf`
    reads its body with this too, so it accepts what a ConfigMap would put in force."""
    data = load_document(text, "queues.yaml", limits) if text.strip() else {}
    for key, value in data.items():
        if key != "partitions":
            raise ConfigError(f"queues.yaml: {key}", value,
                              "unknown key (service settings are ConfigMap keys, e.g. "
                              "event.trackingEnabled)")
    return data


def from_rm(text: str, extra: Mapping[str, str], running: EngineConfig
            ) -> tuple[EngineConfig, list[str]]:
    """The configuration to apply, and the warnings about keys that keep their running value.
    ConfigError (naming the key) when the text or a key is invalid: nothing is applied."""
    data = queues_document(text)
    service = _service_mapping(extra)
    try:
        wanted = parse_config({"partitions": data.get("partitions"), "service": service})
    except ConfigError as exc:
        key = _BY_SETTING.get(exc.key)
        if key is None:
            raise
        raise ConfigError(key.name, exc.value, exc.reason) from None
    warnings, shown = _warnings(extra, wanted, running)
    config = _kept(wanted, running)
    config.source = {"partitions": data["partitions"]} if data.get("partitions") else {}
    config.checksum = hashlib.sha256(text.encode()).hexdigest().upper()
    config.extra = shown
    return config, warnings
