"""What the apiserver does for the simpler built-in kinds beyond `objects`: Services,
ServiceAccounts, Leases, PodDisruptionBudgets, PriorityClasses (and pods' Priority admission,
`priority`), and the objects every namespace gets.

- A **Service** gets a ClusterIP from 10.96.0.0/12 (the lowest address no Service holds; the
  `kubernetes` Service in `default` holds 10.96.0.1), `clusterIPs`, `ipFamilies`, `type ClusterIP`,
  `sessionAffinity None`, each port's `protocol TCP` and `targetPort` = `port`. An update keeps the
  allocated address when the body leaves it out and refuses to change it (422 "field is immutable").
  `clusterIP: None` is a headless service. Ports are required (except ExternalName / headless).
- A **namespace** gets, when created, the `default` ServiceAccount and the `kube-root-ca.crt`
  ConfigMap (a self-signed CA certificate: sim-cluster serves plain HTTP, nobody verifies against
  it, but in-cluster clients expect the key `ca.crt`).
- A **PodDisruptionBudget** needs `spec.selector` and exactly one of `minAvailable` /
  `maxUnavailable` (an integer or a percentage); its status is computed by `eviction`.
- A **Lease** has `spec.holderIdentity`, durations and MicroTime renew/acquire times (see `timestamps`).

Allocation is stateless (a scan of the stored Services), so there is nothing to keep in step.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from . import disruption, priority, rbacobjects, webhookconfig, workloads
from .errors import Invalid
from .objects import Cause, invalid, required
from .resources import (CONFIGMAPS, LEASES, MUTATING_WEBHOOKS, PDBS, PODS, PRIORITYCLASSES, SERVICEACCOUNTS, SERVICES,
                        VALIDATING_WEBHOOKS, Resource)
from .store import Store

Obj = dict[str, Any]

SERVICE_CIDR = ipaddress.IPv4Network("10.96.0.0/12")
ROOT_CA_NAME = "kube-root-ca.crt"
ROOT_CA_DESCRIPTION = ("Contains a CA bundle that can be used to verify the kube-apiserver when using internal "
                       "endpoints such as the internal service IP or kubernetes.default.svc. No other usage is "
                       "guaranteed across distributions of Kubernetes clusters.")
# A self-signed certificate (CN=kubernetes, key discarded): sim-cluster speaks HTTP, this is only the shape.
ROOT_CA_PEM = """-----BEGIN CERTIFICATE-----
MIIBfjCCASWgAwIBAgIUVG0Xrz2t/7ODklEA8KffXVzl07cwCgYIKoZIzj0EAwIw
FTETMBEGA1UEAwwKa3ViZXJuZXRlczAeFw0yNjExMjQyMjI5MzhaFw0zNjExMjEy
MjI5MzhaMBUxEzARBgNVBAMMCmt1YmVybmV0ZXMwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAASIKKNDUztPQuimyXO/34AR5TKy78RxxyUjIICHN0d4EhPTl1Zpldwu
nzW7+0V+f20IeQIKq5DYm1v7lOoeV8Xbo1MwUTAdBgNVHQ4EFgQU/EIs5Vcis1mt
9sQ8OOQZ6MGUQkcwHwYDVR0jBBgwFoAU/EIs5Vcis1mt9sQ8OOQZ6MGUQkcwDwYD
VR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNHADBEAiBo7Tg2WXzZLfHQHxBZDLu3
FIhgBn6FxnaFmjYeW9Ri8AIgGoDelklHv40+sg7Oz1CmW2w+Wz2zG7m1XoofSJeh
vm8=
-----END CERTIFICATE-----
"""
_SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName")
_PROTOCOLS = ("TCP", "UDP", "SCTP")
_PERCENT = re.compile(r"^[0-9]+%$")


# -- namespaces ----------------------------------------------------------------------------------

def namespace_objects(namespace: str, ca_pem: str = ROOT_CA_PEM) -> list[tuple[Resource, Obj]]:
    """What a new namespace gets at once (the service-account and root-CA controllers' work);
    `ca_pem` is the cluster's CA when sim-cluster serves HTTPS (`authconfig`)."""
    return [
        (SERVICEACCOUNTS, {"metadata": {"name": "default", "namespace": namespace}}),
        (CONFIGMAPS, {"metadata": {"name": ROOT_CA_NAME, "namespace": namespace,
                                   "annotations": {"kubernetes.io/description": ROOT_CA_DESCRIPTION}},
                      "data": {"ca.crt": ca_pem}}),
    ]


def kubernetes_service() -> Obj:
    """`service/kubernetes` in `default`, as the apiserver keeps it (it takes the first address)."""
    return {"metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"clusterIP": str(SERVICE_CIDR.network_address + 1),
                     "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]}}


# -- hooks (called by the Api around objects.prepare_create / prepare_update) ---------------------

def on_create(store: Store, res: Resource, obj: Obj) -> None:
    """Validate and default a new object of one of these kinds (in place)."""
    if res is SERVICES:
        _validate_service(obj)
        _default_service(store, obj)
    elif res is PDBS:
        _validate_pdb(obj)
        obj["status"] = disruption.status_for(store, obj)
    elif res is LEASES:
        _validate_lease(obj)
    elif res is PRIORITYCLASSES:
        priority.validate_class(store, obj)
    elif res is PODS:
        priority.admit_pod(store, obj)
    elif res in (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS):
        webhookconfig.validate(res.kind, obj)
    elif res in workloads.KINDS:
        workloads.on_create(res, obj)
    else:
        rbacobjects.validate(res, obj)


def on_update(store: Store, res: Resource, new: Obj, old: Obj) -> None:
    if res is SERVICES:
        spec, old_spec = new.setdefault("spec", {}), old.get("spec") or {}
        for key in ("clusterIP", "clusterIPs"):
            if not spec.get(key) and key in old_spec:  # left out or "": the allocated one stays
                spec[key] = old_spec[key]
        if spec.get("clusterIP") != old_spec.get("clusterIP"):
            raise Invalid.fields("Service", new["metadata"]["name"], [
                invalid("spec.clusterIPs[0]", spec.get("clusterIP") or "", "may not change once set")])
        _validate_service(new)
        _default_ports(spec)
    elif res is PDBS:
        _validate_pdb(new)
    elif res is LEASES:
        _validate_lease(new)
    elif res is PRIORITYCLASSES:
        priority.validate_class(store, new, old)
    elif res in (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS):
        webhookconfig.validate(res.kind, new)
    elif res in workloads.KINDS:
        workloads.on_update(res, new, old)
    else:
        rbacobjects.validate(res, new, old)


# -- services --------------------------------------------------------------------------------------

def _validate_service(obj: Obj) -> None:
    causes: list[Cause] = []
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        spec = {}
    kind = spec.get("type", "ClusterIP")
    if kind not in _SERVICE_TYPES:
        causes.append(("FieldValueNotSupported", "spec.type", f'Unsupported value: "{kind}": supported values: '
                       + ", ".join(f'"{t}"' for t in _SERVICE_TYPES)))
    ports = spec.get("ports")
    if ports is not None and not isinstance(ports, list):
        causes.append(invalid("spec.ports", "", "must be a list"))
        ports = []
    if not ports and kind != "ExternalName" and spec.get("clusterIP") != "None":
        causes.append(required("spec.ports"))
    for i, port in enumerate(ports or []):
        where = f"spec.ports[{i}]"
        if not isinstance(port, dict):
            causes.append(invalid(where, "", "must be an object"))
            continue
        number = port.get("port")
        if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= 65535:
            causes.append(invalid(f"{where}.port", number if number is not None else "",
                                  "must be between 1 and 65535, inclusive"))
        if port.get("protocol", "TCP") not in _PROTOCOLS:
            causes.append(("FieldValueNotSupported", f"{where}.protocol",
                           f'Unsupported value: "{port["protocol"]}": supported values: "SCTP", "TCP", "UDP"'))
        if len(ports) > 1 and not port.get("name"):
            causes.append(required(f"{where}.name"))
    ip = spec.get("clusterIP")
    if ip not in (None, "", "None"):
        try:
            ipaddress.IPv4Address(ip)
        except ValueError:
            causes.append(invalid("spec.clusterIPs[0]", ip, "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"))
    if causes:
        raise Invalid.fields("Service", str(obj["metadata"].get("name") or ""), causes)


def _default_ports(spec: Obj) -> None:
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))


def allocate_cluster_ip(store: Store) -> str:
    """The lowest address of 10.96.0.0/12 that no Service holds."""
    used = {(s.get("spec") or {}).get("clusterIP") for s in store.list(SERVICES.bucket)[0]}
    for host in SERVICE_CIDR.hosts():
        if str(host) not in used:
            return str(host)
    raise Invalid.fields("Service", "", [invalid("spec.clusterIPs", "", "failed to allocate IP: range is full")])


def _default_service(store: Store, obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    kind = spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    _default_ports(spec)
    if kind != "ExternalName":
        if not spec.get("clusterIP"):
            spec["clusterIP"] = allocate_cluster_ip(store)
        elif spec["clusterIP"] != "None" and any(
                (s.get("spec") or {}).get("clusterIP") == spec["clusterIP"] for s in store.list(SERVICES.bucket)[0]):
            raise Invalid.fields("Service", obj["metadata"]["name"], [
                invalid("spec.clusterIPs", [spec["clusterIP"]], f"failed to allocate IP {spec['clusterIP']}: "
                        "provided IP is already allocated")])
        spec["clusterIPs"] = [spec["clusterIP"]]
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
    obj["status"] = {"loadBalancer": {}}


# -- PodDisruptionBudgets ----------------------------------------------------------------------------

def _int_or_percent(where: str, value: Any, causes: list[Cause]) -> None:
    if isinstance(value, bool) or not (isinstance(value, int) and value >= 0
                                       or isinstance(value, str) and _PERCENT.match(value)):
        causes.append(invalid(where, value, "must be a non-negative integer or a percentage (e.g. '50%')"))


def _validate_pdb(obj: Obj) -> None:
    causes: list[Cause] = []
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    has_min, has_max = "minAvailable" in spec, "maxUnavailable" in spec
    if has_min and has_max:
        causes.append(invalid("spec", "", "minAvailable and maxUnavailable cannot be both set"))
    for key in ("minAvailable", "maxUnavailable"):
        if key in spec:
            _int_or_percent(f"spec.{key}", spec[key], causes)
    selector = spec.get("selector")
    if selector is not None and not isinstance(selector, dict):
        causes.append(invalid("spec.selector", "", "must be a label selector"))
    if causes:
        raise Invalid.fields("PodDisruptionBudget", str(obj["metadata"].get("name") or ""), causes, PDBS.group)


# -- Leases ------------------------------------------------------------------------------------------

def _validate_lease(obj: Obj) -> None:
    causes: list[Cause] = []
    spec = obj.get("spec") or {}
    if not isinstance(spec, dict):
        causes.append(invalid("spec", "", "must be an object"))
        spec = {}
    for key in ("leaseDurationSeconds", "leaseTransitions"):
        value = spec.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            causes.append(invalid(f"spec.{key}", value, "must be greater than or equal to 0"))
    if spec.get("holderIdentity") is not None and not isinstance(spec["holderIdentity"], str):
        causes.append(invalid("spec.holderIdentity", spec["holderIdentity"], "must be a string"))
    if causes:
        raise Invalid.fields("Lease", str(obj["metadata"].get("name") or ""), causes, LEASES.group)
