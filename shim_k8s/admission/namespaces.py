"""Which namespaces the admission controller touches (admission_controller.go, namespace_cache.go).

`shouldProcessNamespace`: the namespace annotation `yunikorn.apache.org/namespace.enableYuniKorn`
decides when present ("true" yes, anything else no); otherwise `processNamespaces` (empty = all)
and not `bypassNamespaces`. `shouldLabelNamespace`: likewise with
`yunikorn.apache.org/namespace.generateAppId`, `labelNamespaces` and `noLabelNamespaces`.
A namespace the cache has not seen counts as unannotated.
"""

from __future__ import annotations

from collections.abc import Mapping

from .conf import AdmissionConf, matches

ENABLE_YUNIKORN = "yunikorn.apache.org/namespace.enableYuniKorn"
GENERATE_APP_ID = "yunikorn.apache.org/namespace.generateAppId"


def _flag(annotations: Mapping[str, str] | None, key: str) -> bool | None:
    if not annotations or key not in annotations:
        return None
    return annotations[key] == "true"


def should_process(conf: AdmissionConf, namespace: str, annotations: Mapping[str, str] | None) -> bool:
    flag = _flag(annotations, ENABLE_YUNIKORN)
    if flag is not None:
        return flag
    return ((not conf.process_namespaces or matches(conf.process_namespaces, namespace))
            and not matches(conf.bypass_namespaces, namespace))


def should_label(conf: AdmissionConf, namespace: str, annotations: Mapping[str, str] | None) -> bool:
    flag = _flag(annotations, GENERATE_APP_ID)
    if flag is not None:
        return flag
    return ((not conf.label_namespaces or matches(conf.label_namespaces, namespace))
            and not matches(conf.no_label_namespaces, namespace))


__all__ = ["ENABLE_YUNIKORN", "GENERATE_APP_ID", "should_label", "should_process"]
