"""The configuration an RM hands the engine: YuniKorn's ConfigMap keys both sides read.

YuniKorn's shim sends its core the queue configuration (the `<policyGroup>.yaml` value of the
merged ConfigMaps) and every other key as `extraConfig` (strings), in RegisterResourceManager and
UpdateConfiguration. The keys the core reads are declared here once, with YuniKorn's default, the
ykshm setting each becomes and when it takes effect (`Apply`): the shim uses the table to know
which keys are the engine's (any other `service.*` key it does not know is refused), the engine
(`engine.rm_config`) to turn them into its configuration. `log.*` keys are read by both roles
(`log_level`). Source: research yunikorn-deploy.md §2 (core configs.go, shim schedulerconf.go).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Callable, Mapping

from common.configsection import ConfigError, parse_bool, parse_duration_ns, parse_uint32


class Apply(enum.Enum):
    """When a key's value takes effect in ykshm."""

    LIVE = "applied on every update"
    SHIM_START = "read when the shim starts (YuniKorn: non-reloadable, restart required)"
    ENGINE_FILE = ("a size fixed when the engine starts: set it in `ykshm engine --config` "
                   "(restart required)")
    NO_EFFECT = "accepted and shown; it has no effect in ykshm"


@dataclasses.dataclass(frozen=True, slots=True)
class CoreKey:
    """One key of YuniKorn's core ExtraConfig (or ykshm's own engine setting)."""

    name: str
    default: str
    setting: str
    """The path of the same setting in ykshm's config file ("" when it has none)."""
    apply: Apply
    parse: Callable[[str, object], object] = parse_uint32
    """Go's rule for its value (ConfigError names key and value): the shim checks it before
    sending, so the admission webhook, the shim and the engine refuse the same values."""

    def check(self, value: str) -> None:
        """ConfigError when `value` is not one this key takes."""
        self.parse(self.name, value)


CORE_KEYS: dict[str, CoreKey] = {k.name: k for k in (
    CoreKey("health.checkInterval", "30s", "", Apply.NO_EFFECT, parse_duration_ns),
    CoreKey("event.trackingEnabled", "true", "service.event.trackingEventsEnabled", Apply.LIVE,
            parse_bool),
    CoreKey("event.requestCapacity", "1000", "service.event.requestStoreCapacity",
            Apply.ENGINE_FILE),
    CoreKey("event.ringBufferCapacity", "100000", "service.event.ringBufferCapacity",
            Apply.ENGINE_FILE),
    CoreKey("event.maxStreams", "100", "service.event.maxStreams", Apply.LIVE),
    CoreKey("event.maxStreamsPerHost", "15", "service.event.maxStreamsPerHost", Apply.LIVE),
    CoreKey("event.RESTResponseSize", "10000", "service.event.RESTResponseSize", Apply.LIVE),
    # ykshm's own engine settings (no YuniKorn key), under their config-file names
    CoreKey("service.event.requestEventsEnabled", "true", "service.event.requestEventsEnabled",
            Apply.LIVE, parse_bool),
    CoreKey("service.applicationRetentionSeconds", "259200",
            "service.applicationRetentionSeconds", Apply.ENGINE_FILE),
    CoreKey("service.maxRetainedApplications", "10000", "service.maxRetainedApplications",
            Apply.ENGINE_FILE),
)}
"""YuniKorn's core keys (core:pkg/common/configs/configs.go) and ykshm's engine keys."""

QUEUES_SUFFIX = ".yaml"
"""A key ending in it is a queue configuration (`<policyGroup>.yaml`), never extraConfig."""

LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
              "warning": logging.WARNING, "error": logging.ERROR, "dpanic": logging.CRITICAL,
              "panic": logging.CRITICAL, "fatal": logging.CRITICAL}
"""YuniKorn's (zap's) level names; also -1..5 as numbers, in this order."""

_NUMERIC = ("debug", "info", "warn", "error", "dpanic", "panic", "fatal")


def is_log_key(name: str) -> bool:
    """`log.level` or `log.<logger>.level`."""
    return name == "log.level" or (name.startswith("log.") and name.endswith(".level")
                                   and len(name) > len("log..level"))


def log_level(name: str, value: str) -> int:
    """The Python logging level of a YuniKorn log level (text, or -1..5); ConfigError else."""
    text = str(value).strip().lower()
    if text.lstrip("-").isdigit() and -1 <= int(text) <= 5:
        text = _NUMERIC[int(text) + 1]
    if text not in LOG_LEVELS:
        raise ConfigError(name, value, "not a log level (debug, info, warn, error, dpanic, panic,"
                                       " fatal or -1..5)")
    return LOG_LEVELS[text]


def logger_name(key: str, root: str = "ykshm") -> str:
    """The Python logger a `log.*` key sets: `log.level` -> ykshm, `log.shim.level` ->
    ykshm.shim (YuniKorn's logger names below ours)."""
    if key == "log.level":
        return root
    return f"{root}.{key[len('log.'):-len('.level')]}"


def apply_log_levels(extra: Mapping[str, str], before: Mapping[str, str] | None = None) -> None:
    """Set this process's loggers from the `log.*` keys of `extra` (validated: ConfigError);
    a logger whose key was in `before` but is gone goes back to inheriting its level."""
    for key in before or {}:
        if is_log_key(key) and key not in extra:
            logging.getLogger(logger_name(key)).setLevel(logging.NOTSET)
    for key, value in extra.items():
        if is_log_key(key):
            logging.getLogger(logger_name(key)).setLevel(log_level(key, value))
