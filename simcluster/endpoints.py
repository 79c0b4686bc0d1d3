"""The endpoints and EndpointSlice controllers: each Service's ready pods, kept current.

For every Service with a `selector`, the pods of its namespace that match it, have a pod IP and are
neither finished nor being deleted become its endpoints: `Endpoints` (v1, the Service's name and
labels; `subsets` of `addresses` (Ready pods, or every pod with `publishNotReadyAddresses`) and
`notReadyAddresses`, grouped by the resolved ports) and one `EndpointSlice`
(discovery.k8s.io/v1, `NAME-xxxxx`, labels `kubernetes.io/service-name` and
`endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io`, owned by the Service
so it goes with it; `addressType: IPv4`, `conditions.ready/serving/terminating` per pod). A
`targetPort` that names a port is looked up in each pod's containerPorts. `default/kubernetes` gets
sim-cluster's own address and port, as the apiserver writes it. Services without a selector are left
alone (their Endpoints are the user's). Headless Services get endpoints too.

Like the disruption controller: the store listener only marks Services, a task recomputes them and
writes what changed (create through the API, replace/delete in the store).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from .disruption import selector_matches
from .resources import ENDPOINTS, ENDPOINTSLICES, PODS, SERVICES, Resource
from .store import Change, Store

log = logging.getLogger("ykshm.sim-cluster.endpoints")
Obj = dict[str, Any]
Key = tuple[str, str]
SERVICE_NAME = "kubernetes.io/service-name"
MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
CONTROLLER = "endpointslice-controller.k8s.io"
Create = Callable[[Resource, str, Obj], Obj]


def _ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _pod_port(pod: Obj, target: Any) -> int | None:
    if isinstance(target, int) and not isinstance(target, bool):
        return target
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == target:
                return p.get("containerPort")
    return None


def _ref(pod: Obj) -> Obj:
    meta = pod["metadata"]
    return {"kind": "Pod", "namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]}


def members(store: Store, svc: Obj) -> list[Obj]:
    selector = (svc.get("spec") or {}).get("selector")
    ns = svc["metadata"]["namespace"]
    return [p for p in store.list(PODS.bucket, ns)[0]
            if selector_matches({"matchLabels": selector}, p["metadata"].get("labels") or {})
            and (p.get("status") or {}).get("podIP") and not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]


def _ports(svc: Obj, pod: Obj) -> tuple[tuple[str, int, str], ...]:
    out = []
    for port in (svc.get("spec") or {}).get("ports") or []:
        number = _pod_port(pod, port.get("targetPort", port.get("port")))
        if number is not None:
            out.append((port.get("name") or "", number, port.get("protocol") or "TCP"))
    return tuple(out)


def _port_list(ports: tuple[tuple[str, int, str], ...]) -> list[Obj]:
    return [{**({"name": n} if n else {}), "port": p, "protocol": proto} for n, p, proto in ports]


def desired(store: Store, svc: Obj, api_address: tuple[str, int]) -> tuple[list[Obj], list[Obj], list[Obj]] | None:
    """(subsets, slice endpoints, slice ports) for a Service, None when it has no selector."""
    meta = svc["metadata"]
    if (meta["namespace"], meta["name"]) == ("default", "kubernetes"):
        ip, port = api_address
        ports = (("https", port, "TCP"),)
        return ([{"addresses": [{"ip": ip}], "ports": _port_list(ports)}],
                [{"addresses": [ip], "conditions": {"ready": True, "serving": True, "terminating": False}}],
                _port_list(ports))
    if not (svc.get("spec") or {}).get("selector"):
        return None
    publish = bool((svc.get("spec") or {}).get("publishNotReadyAddresses"))
    groups: dict[tuple, Obj] = {}
    slice_eps, slice_ports = [], None
    for pod in members(store, svc):
        ports = _ports(svc, pod)
        ready = publish or _ready(pod)
        addr = {"ip": pod["status"]["podIP"], "nodeName": pod["spec"].get("nodeName", ""), "targetRef": _ref(pod)}
        group = groups.setdefault(ports, {"addresses": [], "notReadyAddresses": [], "ports": _port_list(ports)})
        group["addresses" if ready else "notReadyAddresses"].append(addr)
        slice_eps.append({"addresses": [addr["ip"]], "conditions": {"ready": ready, "serving": ready,
                                                                    "terminating": False},
                          "nodeName": addr["nodeName"], "targetRef": _ref(pod)})
        slice_ports = slice_ports if slice_ports is not None else _port_list(ports)
    subsets = [{k: v for k, v in g.items() if v} for _, g in sorted(groups.items())]
    return subsets, slice_eps, slice_ports or []


class EndpointsController:
    """Keeps Endpoints and EndpointSlices current (see the module text)."""

    def __init__(self, store: Store, create: Create, api_address: tuple[str, int]) -> None:
        self.store = store
        self.create = create
        self.api_address = api_address
        self._dirty: set[Key] = set()
        self._wake = trio.Event()
        store.listeners.append(self._on_change)

    def _on_change(self, change: Change) -> None:
        meta = change.obj["metadata"]
        if change.bucket == SERVICES.bucket:
            self._dirty.add((meta["namespace"], meta["name"]))
        elif change.bucket == PODS.bucket:
            # only the Services that select the pod (before or after the change): marking every
            # Service of the namespace made each pod start cost Services x pods (the 100-PE job:
            # 100 PE Services, ~40 % of sim-cluster's CPU)
            ns = meta["namespace"]
            labels = [o["metadata"].get("labels") or {} for o in (change.obj, change.prev) if o is not None]
            for svc in self.store.list(SERVICES.bucket, ns)[0]:
                selector = (svc.get("spec") or {}).get("selector")
                if selector and any(selector_matches({"matchLabels": selector}, lab) for lab in labels):
                    self._dirty.add((ns, svc["metadata"]["name"]))
        else:
            return
        self._wake.set()

    def sync(self) -> None:
        dirty, self._dirty = self._dirty, set()
        for ns, name in sorted(dirty):
            if self.store.get("namespaces", "", ns) is None:
                continue
            svc = self.store.get(SERVICES.bucket, ns, name)
            try:
                want = desired(self.store, svc, self.api_address) if svc is not None else None
                self._sync_endpoints(ns, name, svc, want)
                self._sync_slice(ns, name, svc, want)
            except Exception:  # one Service's trouble must not stop the others (or sim-cluster)
                log.exception("endpoints of service %s/%s", ns, name)

    def _sync_endpoints(self, ns: str, name: str, svc: Obj | None, want: tuple | None) -> None:
        old = self.store.get(ENDPOINTS.bucket, ns, name)
        if want is None:
            if old is not None and svc is None:
                self.store.delete(ENDPOINTS.bucket, ns, name)
            return
        subsets = want[0]
        labels = dict(svc["metadata"].get("labels") or {})
        if old is None:
            self.create(ENDPOINTS, ns, {"metadata": {"name": name, "namespace": ns, "labels": labels},
                                        "subsets": subsets})
        elif old.get("subsets") != subsets or old["metadata"].get("labels") != labels:
            self.store.replace(ENDPOINTS.bucket, {**old, "metadata": {**old["metadata"], "labels": labels},
                                                  "subsets": subsets})

    def _slice_of(self, ns: str, name: str) -> Obj | None:
        for obj in self.store.list(ENDPOINTSLICES.bucket, ns)[0]:
            labels = obj["metadata"].get("labels") or {}
            if labels.get(SERVICE_NAME) == name and labels.get(MANAGED_BY) == CONTROLLER:
                return obj
        return None

    def _sync_slice(self, ns: str, name: str, svc: Obj | None, want: tuple | None) -> None:
        old = self._slice_of(ns, name)
        if want is None or svc is None:
            if old is not None:
                self.store.delete(ENDPOINTSLICES.bucket, ns, old["metadata"]["name"])
            return
        _, eps, ports = want
        if old is None:
            meta = svc["metadata"]
            self.create(ENDPOINTSLICES, ns, {
                "metadata": {"generateName": f"{name}-", "namespace": ns,
                             "labels": {**(meta.get("labels") or {}), SERVICE_NAME: name, MANAGED_BY: CONTROLLER},
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": name,
                                                  "uid": meta["uid"], "controller": True,
                                                  "blockOwnerDeletion": True}]},
                "addressType": "IPv4", "endpoints": eps, "ports": ports})
        elif old.get("endpoints") != eps or old.get("ports") != ports:
            self.store.replace(ENDPOINTSLICES.bucket, {**old, "metadata": dict(old["metadata"]), "endpoints": eps,
                                                       "ports": ports})

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            self.sync()
