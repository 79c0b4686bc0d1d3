"""What the webhooks look up, kept by informers (YuniKorn's informers.go, namespace_cache.go,
priority_class_cache.go, am_conf.go): namespaces' annotations, PriorityClasses' allow-preemption,
and the two yunikorn ConfigMaps of the controller's namespace, from which the configuration is
parsed again on every change (`service.enableConfigHotRefresh: false` freezes it after start-up,
as YuniKorn's handler does).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from common.configsection import ConfigError

from ..configmaps import CONFIGS, DEFAULTS, flatten
from ..mapping import ANN_ALLOW_PREEMPTION
from .conf import AdmissionConf

log = logging.getLogger("ykshm.admission")
Obj = dict[str, Any]


def _meta(obj: Obj) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _str_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


class ClusterCache:
    """The informers' view; `apply(kind, events)` takes a kube.client.WatchBatch's events."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.namespaces: dict[str, dict[str, str]] = {}
        self.priority_classes: dict[str, dict[str, str]] = {}
        self.configmaps: dict[str, Obj | None] = {DEFAULTS: None, CONFIGS: None}
        self.conf = AdmissionConf.parse({}, namespace)
        self.started = False

    # Cluster protocol (mutate.Cluster)
    def namespace_annotations(self, namespace: str) -> Mapping[str, str] | None:
        return self.namespaces.get(namespace)

    def preemption_allowed(self, priority_class: str) -> bool:
        """isPreemptSelfAllowed: only an annotation "false" on a known class says no."""
        annotations = self.priority_classes.get(priority_class) or {}
        return annotations.get(ANN_ALLOW_PREEMPTION) != "false"

    def apply(self, kind: str, events: list[tuple[str, Obj]]) -> None:
        for etype, obj in events:
            name = str(_meta(obj).get("name") or "")
            gone = etype == "DELETED"
            if kind == "namespaces":
                self._put(self.namespaces, name, None if gone else _str_map(_meta(obj).get("annotations")))
            elif kind == "priorityclasses":
                self._put(self.priority_classes, name,
                          None if gone else _str_map(_meta(obj).get("annotations")))
            elif kind == "configmaps" and name in self.configmaps:
                self.configmaps[name] = None if gone else obj
                self._reload()

    @staticmethod
    def _put(table: dict[str, dict[str, str]], name: str, value: dict[str, str] | None) -> None:
        if value is None:
            table.pop(name, None)
        else:
            table[name] = value

    def _reload(self) -> None:
        if self.started and not self.conf.hot_refresh:
            log.info("service.enableConfigHotRefresh is false: configuration change ignored")
            return
        try:
            flat = flatten([self.configmaps[DEFAULTS], self.configmaps[CONFIGS]])
        except ConfigError as exc:
            log.error("yunikorn ConfigMaps: %s; keeping the configuration in force", exc)
            return
        self.conf = AdmissionConf.parse(flat, self.namespace)
        if self.started:
            log.info("admission controller configuration reloaded")


__all__ = ["ClusterCache"]
