"""The scheduler's configuration from YuniKorn's ConfigMaps, as YuniKorn's shim reads it.

`yunikorn-defaults` and `yunikorn-configs` in the scheduler's namespace (`--namespace`, default
$NAMESPACE, else `default`, as YuniKorn) are merged key by key, the later (`yunikorn-configs`)
winning, `data` before `binaryData` (a `.gz` binary key gunzipped, its suffix dropped): `flatten`.
The queue configuration is the key `<service.policyGroup>.yaml`; every other key goes to the
engine as extraConfig (`parse`). The shim's own keys are declared in `ShimSettings`
(common.configsection: Go's value rules, YuniKorn's defaults); the engine's in `si.config`;
`admissionController.*` are the admission controller's. Any other key is ignored, as YuniKorn's
shim reads only the keys it knows (its own Helm chart still renders `service.operatorPlugins`):
one warning per key when it first appears, and the key listed in the status (`ignoredKeys`). A
known key with a value Go would not parse is refused naming key and value; the engine's keys are
checked here too (`CoreKey.check`), so what the admission webhook accepts (it runs `parse`), the
shim sends and the engine takes are the same.

`ConfigMapSource` decides, without I/O, what a watch event means (hot refresh, YuniKorn's
`triggerReloadConfig`): with `service.enableConfigHotRefresh` false (as in force) a change is
ignored and said so; otherwise the maps are merged and parsed, an invalid result keeps the
running configuration (Warning event `ConfigRefused` on the ConfigMap, status), and a key read
only at start (`Apply`) keeps its old value and is reported (Warning event
`ConfigNotReloadable`, log, status). What is left goes to the engine (SI UpdateConfiguration);
its answer puts it in force (Normal event `ConfigReloaded`) or refuses it (`ConfigRefused`).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import logging
import os
import time
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from common.configsection import (ConfigError, GoBool, GoDuration, Int32, parse_section)
from si.config import CORE_KEYS, QUEUES_SUFFIX, Apply, apply_log_levels, is_log_key, log_level

from .core.actions import KubeEvent

log = logging.getLogger("ykshm.shim.config")

DEFAULTS = "yunikorn-defaults"
CONFIGS = "yunikorn-configs"
NAMES = (DEFAULTS, CONFIGS)
"""The two ConfigMaps, in merge order (the later wins)."""


def default_namespace() -> str:
    """YuniKorn's: $NAMESPACE (the Deployment sets it from metadata.namespace), else default."""
    return os.environ.get("NAMESPACE") or "default"


_SECOND = 1_000_000_000


class ShimSettings(msgspec.Struct, frozen=True):
    """The shim's keys (YuniKorn's schedulerconf.go) with YuniKorn's defaults."""

    cluster_id: str = msgspec.field(default="mycluster", name="service.clusterId")
    policy_group: str = msgspec.field(default="queues", name="service.policyGroup")
    scheduling_interval: GoDuration = msgspec.field(default=_SECOND,
                                                    name="service.schedulingInterval")
    volume_bind_timeout: GoDuration = msgspec.field(default=600 * _SECOND,
                                                    name="service.volumeBindTimeout")
    event_channel_capacity: Int32 = msgspec.field(default=1048576,
                                                  name="service.eventChannelCapacity")
    dispatch_timeout: GoDuration = msgspec.field(default=300 * _SECOND,
                                                 name="service.dispatchTimeout")
    disable_gang_scheduling: GoBool = msgspec.field(default=False,
                                                    name="service.disableGangScheduling")
    enable_config_hot_refresh: GoBool = msgspec.field(default=True,
                                                      name="service.enableConfigHotRefresh")
    placeholder_image: str = msgspec.field(default="registry.k8s.io/pause:3.7",
                                           name="service.placeholderImage")
    placeholder_run_as_user: Int32 = msgspec.field(default=0, name="service.placeholderRunAsUser")
    placeholder_run_as_group: Int32 = msgspec.field(default=0,
                                                    name="service.placeholderRunAsGroup")
    placeholder_fs_group: Int32 = msgspec.field(default=0, name="service.placeholderFsGroup")
    node_instance_type_label: str = msgspec.field(
        default="node.kubernetes.io/instance-type", name="service.nodeInstanceTypeNodeLabelKey")
    kubernetes_qps: Int32 = msgspec.field(default=1000, name="kubernetes.qps")
    kubernetes_burst: Int32 = msgspec.field(default=1000, name="kubernetes.burst")
    generate_unique_app_id: GoBool = msgspec.field(
        default=False, name="admissionController.filtering.generateUniqueAppId")


SHIM_KEYS: dict[str, Apply] = {name: Apply.NO_EFFECT
                               for name in ShimSettings.__struct_encode_fields__}
"""When each shim key takes effect in ykshm (YuniKorn: all but hot refresh need a restart)."""
SHIM_KEYS.update({"service.clusterId": Apply.SHIM_START, "service.policyGroup": Apply.SHIM_START,
                  "service.enableConfigHotRefresh": Apply.LIVE})

def apply_of(key: str) -> Apply | None:
    """When `key` takes effect; None for a queue configuration or a key not ours."""
    if key in SHIM_KEYS:
        return SHIM_KEYS[key]
    if key in CORE_KEYS:
        return CORE_KEYS[key].apply
    if is_log_key(key):
        return Apply.LIVE
    return None


# --- merge --------------------------------------------------------------------------------------

MAX_GUNZIPPED = 16 << 20
"""A `.gz` key expands to at most this (the engine's config-file limit, engine.config): a
ConfigMap (1 MiB) of gzip could otherwise expand to gigabytes in the shim."""


def _gunzip(raw: bytes) -> bytes:
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    out = inflater.decompress(raw, MAX_GUNZIPPED + 1)
    if len(out) > MAX_GUNZIPPED:
        raise ValueError(f"expands to more than {MAX_GUNZIPPED >> 20} MiB")
    if not inflater.eof:
        raise ValueError("truncated gzip data")
    return out


def _binary(name: str, key: str, value: object) -> tuple[str, str]:
    try:
        raw = base64.b64decode(str(value), validate=True)
        if key.endswith(".gz"):
            key, raw = key[:-3], _gunzip(raw)
        return key, raw.decode()
    except (binascii.Error, zlib.error, ValueError) as exc:
        raise ConfigError(f"{name}: binaryData.{key}", "...", f"cannot decode: {exc}") from None


def flatten(maps: Sequence[Mapping[str, Any] | None]) -> dict[str, str]:
    """YuniKorn's FlattenConfigMaps: the maps' keys, later maps winning, `data` then
    `binaryData` within each (`.gz` keys gunzipped, the suffix stripped)."""
    flat: dict[str, str] = {}
    for cm in maps:
        if cm is None:
            continue
        name = (cm.get("metadata") or {}).get("name", "?")
        for key, value in (cm.get("data") or {}).items():
            flat[str(key)] = "" if value is None else str(value)
        for key, value in (cm.get("binaryData") or {}).items():
            k, v = _binary(name, str(key), value)
            flat[k] = v
    return flat


# --- parse --------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class Parsed:
    """One merged configuration: what goes to the engine and what the shim reads of it."""

    flat: Mapping[str, str]
    shim: ShimSettings
    queues: str
    """The `<policyGroup>.yaml` value ("" = YuniKorn's default configuration)."""
    extra: Mapping[str, str]
    """Every key not ending in .yaml: the engine's extraConfig."""
    ignored: tuple[str, ...] = ()


def parse(flat: Mapping[str, str], policy_group: str | None = None) -> Parsed:
    """Check the merged keys (ConfigError names the first bad one). `policy_group`: the one in
    force (it is read at start only); None = the map's own."""
    shim_raw: dict[str, str] = {}
    ignored = []
    for key, value in flat.items():
        if key.endswith(QUEUES_SUFFIX) or key.startswith("admissionController."):
            if key in SHIM_KEYS:
                shim_raw[key] = value
            continue
        if key in SHIM_KEYS:
            shim_raw[key] = value
        elif is_log_key(key):
            log_level(key, value)
        elif key in CORE_KEYS:
            CORE_KEYS[key].check(value)
        else:
            ignored.append(key)
    shim = parse_section(ShimSettings, "", shim_raw)
    group = policy_group if policy_group is not None else shim.policy_group
    return Parsed(dict(flat), shim, flat.get(f"{group}{QUEUES_SUFFIX}", ""),
                  {k: v for k, v in flat.items() if not k.endswith(QUEUES_SUFFIX)},
                  tuple(sorted(ignored)))


def changed_keys(old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    """Keys whose value differs (added and removed ones too), sorted."""
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


# --- the source ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """What a watch event leads to: Events to post, and a configuration to send (or None)."""

    events: tuple[KubeEvent, ...] = ()
    send: Parsed | None = None


def _event(cm: Mapping[str, Any] | None, name: str, namespace: str, reason: str, message: str,
           type_: str = "Warning") -> KubeEvent:
    meta = (cm or {}).get("metadata") or {}
    return KubeEvent("ConfigMap", namespace, name, str(meta.get("uid") or ""), reason, message,
                     type_)


class ConfigMapSource:
    """The two ConfigMaps' slots, what is in force, and the decisions about changes."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.slots: list[Mapping[str, Any] | None] = [None, None]
        self.started: Parsed | None = None
        self.sent: Parsed | None = None
        """The last configuration sent (or to send with the next registration)."""
        self.in_force: Parsed | None = None
        self.in_force_since = 0.0
        self.trigger = DEFAULTS
        """The ConfigMap whose change produced `sent` (the one its answer's Event goes on)."""
        self.hot_refresh = True
        self.refused: dict[str, Any] | None = None
        self.not_applied: list[str] = []
        self.ignored_changes = 0

    def load(self, defaults: Mapping[str, Any] | None, configs: Mapping[str, Any] | None
             ) -> Parsed:
        """The maps read at start; ConfigError (fatal for the shim, as in YuniKorn)."""
        self.slots = [defaults, configs]
        parsed = parse(flatten(self.slots))
        _warn_ignored(parsed.ignored, ())
        self.started = self.sent = parsed
        self.hot_refresh = parsed.shim.enable_config_hot_refresh
        apply_log_levels(parsed.extra)
        self.trigger = CONFIGS if configs is not None else DEFAULTS
        return parsed

    def registration(self) -> Parsed:
        """What a (re-)registration carries: the last configuration sent or to send."""
        assert self.sent is not None, "load() first"
        return self.sent

    def on_event(self, event_type: str, cm: Mapping[str, Any]) -> Outcome:
        """A ConfigMap watch event (ADDED, MODIFIED, DELETED) in our namespace."""
        meta = cm.get("metadata") or {}
        name = meta.get("name")
        if name not in NAMES or (meta.get("namespace") or self.namespace) != self.namespace:
            return Outcome()
        index = NAMES.index(name)
        new = None if event_type == "DELETED" else cm
        if _same(self.slots[index], new):
            return Outcome()
        if not self.hot_refresh:
            self.ignored_changes += 1
            log.warning("hot-refresh disabled: the change of ConfigMap %s is not applied", name)
            return Outcome((_event(cm, name, self.namespace, "ConfigHotRefreshDisabled",
                                   "service.enableConfigHotRefresh is false: this change is not "
                                   "applied (restart the scheduler to apply it)"),))
        self.slots[index] = new  # stored first, as YuniKorn does, even if it is then refused
        return self._update(cm, name)

    def _update(self, cm: Mapping[str, Any], name: str) -> Outcome:
        assert self.started is not None and self.sent is not None
        try:
            flat = flatten(self.slots)
            parse(flat)
        except ConfigError as exc:
            return Outcome((self._refuse(cm, name, str(exc)),))
        if flat == self.sent.flat:  # e.g. a reverted key set back: nothing is left unapplied
            self.not_applied = []
            return Outcome()
        events, notices = [], []
        kept = dict(flat)
        for key in changed_keys(self.sent.flat, flat):
            apply = apply_of(key)
            if apply in (None, Apply.LIVE):
                continue
            notices.append(f"{key}: {flat.get(key, '(removed)')!r} not applied: {apply.value}")
            if apply is Apply.SHIM_START:  # YuniKorn reverts it to the value it started with
                if key in self.started.flat:
                    kept[key] = self.started.flat[key]
                else:
                    kept.pop(key, None)
        parsed = parse(kept, self.started.shim.policy_group)
        _warn_ignored(parsed.ignored, self.sent.ignored)
        self.not_applied = notices  # a reverted key differs from what was sent each time: kept
        if notices:
            log.warning("ignoring non-reloadable configuration change (restart required to "
                        "update): %s", "; ".join(notices))
            events.append(_event(cm, name, self.namespace, "ConfigNotReloadable",
                                 "; ".join(notices)))
        self.hot_refresh = parsed.shim.enable_config_hot_refresh
        apply_log_levels(parsed.extra, self.sent.extra)  # the shim's loggers; the engine: its own
        self.sent, self.trigger = parsed, name
        return Outcome(tuple(events), parsed)

    def _refuse(self, cm: Mapping[str, Any] | None, name: str, reason: str) -> KubeEvent:
        self.refused = {"time": time.time(), "configMap": name, "reason": reason}
        log.error("Unable to update configmap %s, ignoring changes: %s", name, reason)
        return _event(cm, name, self.namespace, "ConfigRefused",
                      f"configuration not applied, the running one stays in force: {reason}")

    def on_answer(self, parsed: Parsed, error: str | None) -> list[KubeEvent]:
        """The engine's answer to a configuration sent (registration or update)."""
        name = self.trigger
        cm = self.slots[NAMES.index(name)]
        if error is not None:
            if self.sent is parsed:
                self.sent = self.in_force or parsed
            return [self._refuse(cm, name, error)]
        self.in_force, self.in_force_since, self.refused = parsed, time.time(), None
        log.info("configuration from ConfigMaps in force (%d keys)", len(parsed.flat))
        return [_event(cm, name, self.namespace, "ConfigReloaded",
                       "configuration in force", "Normal")] if cm is not None else []

    def status(self) -> dict[str, Any]:
        """The `configMaps` section of the shim's status file."""
        force = self.in_force
        return {
            "namespace": self.namespace, "hotRefresh": self.hot_refresh,
            "inForce": None if force is None else {
                "since": self.in_force_since, "keys": len(force.flat),
                "resourceVersions": {n: ((cm or {}).get("metadata") or {}).get("resourceVersion")
                                     for n, cm in zip(NAMES, self.slots)}},
            "refused": self.refused, "notApplied": list(self.not_applied),
            "ignoredKeys": list(force.ignored if force else ()),
            "ignoredChanges": self.ignored_changes,
        }


def _warn_ignored(ignored: Sequence[str], before: Sequence[str]) -> None:
    """One warning per ignored key, when it first appears (not again on every reload)."""
    for key in ignored:
        if key not in before:
            log.warning("ignoring unknown configuration key %s (ykshm, as YuniKorn, reads only "
                        "the keys it knows)", key)


def _same(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    if old is None or new is None:
        return old is new
    return (old.get("data"), old.get("binaryData")) == (new.get("data"), new.get("binaryData"))
