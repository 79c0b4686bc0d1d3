"""A process container's environment, as the kubelet builds it.

Order (later wins): the service links of the pod's namespace (`NAME_SERVICE_HOST`, `_PORT`,
`_PORT_<PORTNAME>`, unless `enableServiceLinks: false`), `KUBERNETES_SERVICE_HOST/PORT` (sim-cluster
itself), then `envFrom` (ConfigMaps, Secrets, with `prefix`), then `env` in order, each value's
`$(VAR)` expanded from the variables before it (`$$` is a literal `$`; an unknown reference stays).
`valueFrom`: `fieldRef` (metadata.name/namespace/uid, metadata.labels['k'], metadata.annotations['k'],
spec.nodeName, spec.serviceAccountName, status.hostIP, status.podIP, status.podIPs),
`secretKeyRef`, `configMapKeyRef` (a missing object or key is a `ConfigError` with the kubelet's
words unless `optional: true`), `resourceFieldRef` (limits/requests of cpu, memory,
ephemeral-storage with `divisor`, rounded up; a missing limit is the node's allocatable).

Names a process must not get from a pod (the dynamic loader's and Python's: `LD_*`, `PYTHON*` and
glibc's other unsecure variables) are a `ConfigError`: they would load code of the pod author's
choice into the pod's process (which runs as sim-cluster's user when sim-cluster is not root: `sandbox`).
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable
from typing import Any

from common.quantity import QuantityError, parse_milli, parse_quantity

Obj = dict[str, Any]
Lookup = Callable[[str, str, str], Obj | None]  # (bucket, namespace, name) -> object

UNSAFE_NAMES = frozenset({
    "GCONV_PATH", "GETCONF_DIR", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH", "MALLOC_TRACE", "NIS_PATH",
    "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TMPDIR", "TZDIR"})
_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")
_LABEL_REF = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")


class ConfigError(ValueError):
    """The container cannot be configured (CreateContainerConfigError; the message is kubelet's)."""


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: known names replaced, `$$` -> `$`, the rest kept."""
    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _REF.sub(one, text)


def check_name(name: str) -> None:
    if name.startswith(("LD_", "PYTHON")) or name in UNSAFE_NAMES:
        raise ConfigError(f"env {name}: not allowed in a process pod (it would load code into the process)")


def service_links(services: list[Obj]) -> dict[str, str]:
    """`NAME_SERVICE_HOST` / `_PORT` / `_PORT_<PORTNAME>` for each Service with an address."""
    env: dict[str, str] = {}
    for svc in services:
        spec = svc.get("spec") or {}
        ip = spec.get("clusterIP")
        ports = spec.get("ports") or []
        if not ip or ip == "None" or not ports:
            continue
        base = svc["metadata"]["name"].upper().replace("-", "_")
        env[f"{base}_SERVICE_HOST"] = ip
        env[f"{base}_SERVICE_PORT"] = str(ports[0].get("port"))
        for port in ports:
            if port.get("name"):
                env[f"{base}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}"] = str(port.get("port"))
    return env


def data_of(obj: Obj, kind: str) -> dict[str, bytes]:
    """A Secret's or a ConfigMap's values as bytes (Secret data and binaryData are base64)."""
    if kind == "Secret":
        return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    out = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
    out.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return out


def _data(obj: Obj, kind: str) -> dict[str, str]:
    """A Secret's or a ConfigMap's values as text."""
    return {k: v.decode("utf-8", "replace") for k, v in data_of(obj, kind).items()}


def _ref_object(lookup: Lookup, kind: str, ns: str, ref: Obj) -> Obj | None:
    bucket = "secrets" if kind == "Secret" else "configmaps"
    obj = lookup(bucket, ns, str(ref.get("name") or ""))
    if obj is None and not ref.get("optional"):
        raise ConfigError(f'{kind.lower()} "{ref.get("name")}" not found')
    return obj


def key_ref(lookup: Lookup, kind: str, ns: str, ref: Obj) -> str | None:
    """The value of a secretKeyRef / configMapKeyRef (None when optional and absent)."""
    obj = _ref_object(lookup, kind, ns, ref)
    if obj is None:
        return None
    data = _data(obj, kind)
    if ref.get("key") not in data:
        if ref.get("optional"):
            return None
        raise ConfigError(f"couldn't find key {ref.get('key')} in {kind} {ns}/{ref.get('name')}")
    return data[ref["key"]]


def field_ref(pod: Obj, path: str) -> str:
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    simple = {"metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
              "metadata.uid": meta.get("uid"), "spec.nodeName": spec.get("nodeName"),
              "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
              "status.hostIP": status.get("hostIP"), "status.podIP": status.get("podIP"),
              "status.podIPs": ",".join(i.get("ip", "") for i in status.get("podIPs") or []),
              "status.hostIPs": ",".join(i.get("ip", "") for i in status.get("hostIPs") or [])}
    if path in simple:
        return str(simple[path] or "")
    match = _LABEL_REF.match(path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ConfigError(f"unsupported fieldRef fieldPath {path!r}")


def resource_ref(container: Obj, ref: Obj, node_allocatable: Obj) -> str:
    """`resourceFieldRef`: the value divided by `divisor`, rounded up (cpu in cores by default)."""
    resource = str(ref.get("resource") or "")
    kind, _, name = resource.partition(".")
    if kind not in ("limits", "requests") or name not in ("cpu", "memory", "ephemeral-storage"):
        raise ConfigError(f"unsupported resourceFieldRef resource {resource!r}")
    res = container.get("resources") or {}
    raw = (res.get(kind) or {}).get(name)
    if raw is None and kind == "requests":
        raw = (res.get("limits") or {}).get(name)
    if raw is None:
        raw = node_allocatable.get(name, "0") if kind == "limits" else "0"
    try:
        if name == "cpu":
            value, divisor = parse_milli(raw), parse_milli(ref.get("divisor") or "1")
        else:
            value, divisor = parse_quantity(raw), parse_quantity(ref.get("divisor") or "1")
    except QuantityError as exc:
        raise ConfigError(f"resourceFieldRef {resource}: {exc}") from None
    return str(math.ceil(value / max(divisor, 1)))


def container_env(pod: Obj, container: Obj, lookup: Lookup, base: dict[str, str],
                  node_allocatable: Obj) -> dict[str, str]:
    """The environment of one container (see the module text); raises ConfigError."""
    ns = pod["metadata"]["namespace"]
    env = dict(base)
    for source in container.get("envFrom") or []:
        for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            if key in source:
                obj = _ref_object(lookup, kind, ns, source[key] or {})
                for name, value in (_data(obj, kind) if obj else {}).items():
                    check_name(source.get("prefix", "") + name)
                    env[source.get("prefix", "") + name] = value
    for item in container.get("env") or []:
        name = str(item.get("name") or "")
        check_name(name)
        value = _env_value(pod, container, item, lookup, env, node_allocatable)
        if value is not None:
            env[name] = value
    return env


def _env_value(pod: Obj, container: Obj, item: Obj, lookup: Lookup, env: dict[str, str],
               node_allocatable: Obj) -> str | None:
    source = item.get("valueFrom")
    if not source:
        return expand(str(item.get("value") or ""), env)
    ns = pod["metadata"]["namespace"]
    if "fieldRef" in source:
        return field_ref(pod, str((source["fieldRef"] or {}).get("fieldPath") or ""))
    if "secretKeyRef" in source:
        return key_ref(lookup, "Secret", ns, source["secretKeyRef"] or {})
    if "configMapKeyRef" in source:
        return key_ref(lookup, "ConfigMap", ns, source["configMapKeyRef"] or {})
    if "resourceFieldRef" in source:
        return resource_ref(container, source["resourceFieldRef"] or {}, node_allocatable)
    raise ConfigError(f"env {item.get('name')}: unsupported valueFrom")
