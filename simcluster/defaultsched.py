"""`--default-scheduler`: a stand-in for kube-scheduler, so pods nobody else schedules start.

A cluster runs kube-scheduler beside YuniKorn; it is what starts YuniKorn's own pods (their
`schedulerName` is `default-scheduler`: a scheduler cannot schedule itself). sim-cluster has no
kube-scheduler, so without this flag such pods stay Pending, which the shim's tests rely on
("pods of other schedulers are not ours"). With it, one trio task binds every unbound pod whose
`schedulerName` is `default-scheduler` to the schedulable node with the fewest bound, unfinished
pods (then by name), through the API's own binding, as kube-scheduler posts pods/binding.
Deliberately simple: no resource fit, affinity or taint filters (cordoned nodes are skipped).
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from .errors import ApiError
from .resources import NODES, PODS
from .store import Change

log = logging.getLogger("ykshm.sim-cluster.default-scheduler")
Obj = dict[str, Any]
NAME = "default-scheduler"


def _waiting(pod: Obj) -> bool:
    spec = pod.get("spec") or {}
    return (spec.get("schedulerName") == NAME and not spec.get("nodeName")
            and not pod["metadata"].get("deletionTimestamp"))


def pick_node(nodes: list[Obj], pods: list[Obj]) -> str | None:
    """The schedulable node with the fewest bound, unfinished pods (ties: by name)."""
    load: dict[str, int] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            load[node] = load.get(node, 0) + 1
    names = [n["metadata"]["name"] for n in nodes if not (n.get("spec") or {}).get("unschedulable")]
    return min(names, key=lambda n: (load.get(n, 0), n), default=None)


class DefaultScheduler:
    """Binds the default scheduler's pods of one server (`api` for its binding call)."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.store = api.store
        self._wake = trio.Event()
        self.store.listeners.append(self._on_change)

    def _on_change(self, change: Change) -> None:
        if change.bucket in (PODS.bucket, NODES.bucket) and (change.bucket == NODES.bucket or _waiting(change.obj)):
            self._wake.set()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            await trio.sleep(0.02)  # a burst of changes, one pass (never write inside a listener)
            self.schedule()

    def schedule(self) -> None:
        pods = self.store.list(PODS.bucket)[0]
        nodes = self.store.list(NODES.bucket)[0]
        for pod in [p for p in pods if _waiting(p)]:
            node = pick_node(nodes, pods)
            if node is None:
                return
            meta = pod["metadata"]
            try:
                bound = self.api.subresources.bind(meta["namespace"], meta["name"], {
                    "kind": "Binding", "metadata": {"name": meta["name"], "uid": meta["uid"]},
                    "target": {"kind": "Node", "name": node}})
            except ApiError as exc:      # gone or bound meanwhile: the next change says so
                log.info("default-scheduler: %s/%s: %s", meta["namespace"], meta["name"], exc.message)
                continue
            pods = [bound if p["metadata"]["uid"] == meta["uid"] else p for p in pods]


__all__ = ["DefaultScheduler", "pick_node"]
