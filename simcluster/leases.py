"""Node leases: the simulated kubelet's heartbeat in `kube-node-lease`, as a real kubelet keeps it.

Every node gets a coordination.k8s.io/v1 Lease named after it in `kube-node-lease`
(`holderIdentity` the node, `leaseDurationSeconds` 40, an ownerReference to the Node so the garbage
collector removes it with the node) and `spec.renewTime` is renewed every `interval` seconds
(`--node-lease-interval`, 10 as the kubelet; 0 turns leases off). A node of an external node
agent (label `ykshm.io/node-agent`, `kubelet.external`) keeps its own Lease. `kubectl describe node` shows it
under "Lease"; leader-election clients find the same API.

A store listener only marks nodes that appeared (it must not write inside a change); one task
creates their leases at once and renews them all each interval, in one burst.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING, Any

import trio

from . import kubelet, timestamps
from .errors import ApiError
from .resources import LEASES, NODES
from .store import ADDED, Change

if TYPE_CHECKING:
    from .api import Api

log = logging.getLogger("ykshm.sim-cluster.leases")

NAMESPACE = "kube-node-lease"
DURATION = 40

Obj = dict[str, Any]


def _now_micro() -> str:
    return timestamps.format_micro(dt.datetime.now(dt.timezone.utc))


class NodeLeases:
    def __init__(self, api: Api, interval: float = 10.0) -> None:
        self.api = api
        self.interval = interval
        self._new: set[str] = set()
        self._wake = trio.Event()
        self.renewed = 0
        api.store.listeners.append(self._on_change)

    def _on_change(self, change: Change) -> None:
        if change.bucket == NODES.bucket and change.type == ADDED:
            self._new.add(change.obj["metadata"]["name"])
            self._wake.set()

    def lease_for(self, node: Obj) -> Obj:
        now = _now_micro()
        name = node["metadata"]["name"]
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": NAMESPACE,
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name,
                                                  "uid": node["metadata"]["uid"]}]},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": DURATION, "renewTime": now}}

    def create_new(self) -> None:
        """Leases for the nodes that appeared since the last call."""
        new, self._new = self._new, set()
        store = self.api.store
        if store.get("namespaces", "", NAMESPACE) is None:
            return
        for name in sorted(new):
            node = store.get(NODES.bucket, "", name)
            if node is None or store.get(LEASES.bucket, NAMESPACE, name) is not None or kubelet.external(node):
                continue
            try:
                self.api.create_object(LEASES, NAMESPACE, self.lease_for(node))
            except ApiError as exc:  # e.g. the namespace is being deleted
                log.warning("no lease for node %s: %s", name, exc)

    def renew_all(self) -> None:
        store = self.api.store
        now = _now_micro()
        for lease in store.list(LEASES.bucket, NAMESPACE)[0]:
            name = lease["metadata"]["name"]
            node = store.get(NODES.bucket, "", name)
            if node is None or lease["metadata"].get("deletionTimestamp") or kubelet.external(node):
                continue
            spec = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") != name:
                continue  # not a kubelet's lease
            spec["renewTime"] = now
            store.replace(LEASES.bucket, {**lease, "metadata": dict(lease["metadata"]), "spec": spec})
            self.renewed += 1

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        if self.interval <= 0:
            return
        next_renew = trio.current_time() + self.interval
        while True:
            with trio.move_on_at(next_renew):
                await self._wake.wait()
            self._wake = trio.Event()
            self.create_new()
            if trio.current_time() >= next_renew:
                self.renew_all()
                next_renew = trio.current_time() + self.interval
