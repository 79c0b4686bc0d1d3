"""The admission controller's configuration: YuniKorn's `admissionController.*` keys, read from
the `yunikorn-defaults` and `yunikorn-configs` ConfigMaps of its namespace (merged key by key, the
second winning), with YuniKorn's defaults and its leniency: a bad boolean or regex is logged and
the default used (pkg/admission/conf/am_conf.go).

Regex lists are comma-separated, each entry trimmed, empty ones skipped, matched unanchored (Go's
`MatchString`, here `re.search`) unless written with ^ and $.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping

log = logging.getLogger("ykshm.admission")

PREFIX = "admissionController."
DEFAULTS: dict[str, str] = {
    "webHook.amServiceName": "yunikorn-admission-controller-service",
    "webHook.schedulerServiceAddress": "yunikorn-service:9080",
    "filtering.processNamespaces": "",
    "filtering.bypassNamespaces": "^kube-system$",
    "filtering.labelNamespaces": "",
    "filtering.noLabelNamespaces": "",
    "filtering.generateUniqueAppId": "false",
    "accessControl.bypassAuth": "false",
    "accessControl.trustControllers": "true",
    "accessControl.systemUsers": "^system:serviceaccount:kube-system:",
    "accessControl.externalUsers": "",
    "accessControl.externalGroups": "",
}
GO_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
GO_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def go_bool(key: str, text: str) -> bool:
    """strconv.ParseBool; anything else is logged and the default used."""
    if text in GO_TRUE or text in GO_FALSE:
        return text in GO_TRUE
    log.error("config %s%s: %r is not a boolean; using the default %s", PREFIX, key, text,
              DEFAULTS[key])
    return DEFAULTS[key] in GO_TRUE


def regexes(key: str, text: str) -> tuple[re.Pattern[str], ...]:
    """A comma-separated list of regexes; one that does not compile: logged, the default used."""
    try:
        return tuple(re.compile(p.strip()) for p in text.split(",") if p.strip())
    except re.error as exc:
        log.error("config %s%s: %r is not a regular expression (%s); using the default %r",
                  PREFIX, key, text, exc, DEFAULTS[key])
        return tuple(re.compile(p.strip()) for p in DEFAULTS[key].split(",") if p.strip())


@dataclasses.dataclass(frozen=True)
class AdmissionConf:
    """What the handlers need, parsed once per ConfigMap change."""

    namespace: str = "default"
    am_service_name: str = DEFAULTS["webHook.amServiceName"]
    scheduler_address: str = DEFAULTS["webHook.schedulerServiceAddress"]
    process_namespaces: tuple[re.Pattern[str], ...] = ()
    bypass_namespaces: tuple[re.Pattern[str], ...] = (re.compile("^kube-system$"),)
    label_namespaces: tuple[re.Pattern[str], ...] = ()
    no_label_namespaces: tuple[re.Pattern[str], ...] = ()
    generate_unique_app_id: bool = False
    bypass_auth: bool = False
    trust_controllers: bool = True
    system_users: tuple[re.Pattern[str], ...] = (re.compile("^system:serviceaccount:kube-system:"),)
    external_users: tuple[re.Pattern[str], ...] = ()
    external_groups: tuple[re.Pattern[str], ...] = ()
    hot_refresh: bool = True
    policy_group: str = "queues"

    @classmethod
    def parse(cls, data: Mapping[str, str], namespace: str) -> "AdmissionConf":
        def raw(key: str) -> str:
            value = data.get(PREFIX + key)
            return DEFAULTS[key] if value is None else str(value)

        return cls(
            namespace=namespace,
            am_service_name=raw("webHook.amServiceName"),
            scheduler_address=raw("webHook.schedulerServiceAddress"),
            process_namespaces=regexes("filtering.processNamespaces", raw("filtering.processNamespaces")),
            bypass_namespaces=regexes("filtering.bypassNamespaces", raw("filtering.bypassNamespaces")),
            label_namespaces=regexes("filtering.labelNamespaces", raw("filtering.labelNamespaces")),
            no_label_namespaces=regexes("filtering.noLabelNamespaces", raw("filtering.noLabelNamespaces")),
            generate_unique_app_id=go_bool("filtering.generateUniqueAppId",
                                           raw("filtering.generateUniqueAppId")),
            bypass_auth=go_bool("accessControl.bypassAuth", raw("accessControl.bypassAuth")),
            trust_controllers=go_bool("accessControl.trustControllers",
                                      raw("accessControl.trustControllers")),
            system_users=regexes("accessControl.systemUsers", raw("accessControl.systemUsers")),
            external_users=regexes("accessControl.externalUsers", raw("accessControl.externalUsers")),
            external_groups=regexes("accessControl.externalGroups", raw("accessControl.externalGroups")),
            hot_refresh=str(data.get("service.enableConfigHotRefresh", "true")) in GO_TRUE,
            policy_group=str(data.get("service.policyGroup") or "queues"),
        )


def matches(patterns: tuple[re.Pattern[str], ...], text: str) -> bool:
    return any(p.search(text) for p in patterns)


__all__ = ["AdmissionConf", "DEFAULTS", "matches"]
