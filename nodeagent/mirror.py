"""The node agent's view of an API server: informer caches read synchronously, writes queued.

sim-cluster's kubelet pieces (`simcluster.kubelet`, `simcluster.procpods`, `simcluster.services`,
`simcluster.podevents`) read and write sim-cluster's in-process `Store` without awaiting. `Mirror`
offers them the same few calls over HTTP, the way a real kubelet is built:

- **Reads** (`get`, `list`) answer from local caches that list+watch informers (`kube.client.Informer`:
  resume, bookmarks, 410 relist) keep: the agent's own nodes, the pods bound to them, and the
  Services, Endpoints, ConfigMaps, Secrets, ServiceAccounts and Namespaces a pod's volumes,
  environment and Service names need. Every cache change is handed to `listeners` as a
  `Change(type, bucket, obj)`, as the store does.
- **Writes** (`replace` of a pod, `create` of an Event) are queued and sent by one task: a pod's
  status as a JSON merge PATCH of `pods/NAME/status` (lists such as containerStatuses replaced
  whole; the pod's uid as a precondition, so a status never lands on a new pod of the same name),
  the newest status per pod only (a burst of state changes is one write); Events as POSTs. The
  local cache takes a pod's new status at once, so the next read sees what was written.

A failed write is logged and retried after `RETRY` seconds (a 404 or 409 means the pod went: it is
dropped); nothing here raises into the kubelet.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import trio

from kube.client import Informer, WatchBatch

log = logging.getLogger("ykshm.node-agent.mirror")
Obj = dict[str, Any]
RETRY = 1.0

# bucket -> list path (cluster-wide); pods and nodes are filtered to this agent's nodes
PATHS = {
    "nodes": "/api/v1/nodes",
    "pods": "/api/v1/pods",
    "services": "/api/v1/services",
    "endpoints": "/api/v1/endpoints",
    "configmaps": "/api/v1/configmaps",
    "secrets": "/api/v1/secrets",
    "serviceaccounts": "/api/v1/serviceaccounts",
    "namespaces": "/api/v1/namespaces",
}


@dataclass(eq=False)
class Change:
    """What sim-cluster's store hands its listeners (`simcluster.store.Change`'s fields in use)."""

    type: str
    bucket: str
    obj: Obj


def _key(obj: Obj) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace") or "", meta["name"]


class Mirror:
    def __init__(self, client: httpx.AsyncClient, nodes: set[str]) -> None:
        self.client = client
        self.nodes = nodes  # the names this agent runs
        self.buckets: dict[str, dict[tuple[str, str], Obj]] = {b: {} for b in PATHS}
        self.listeners: list[Callable[[Change], None]] = []
        self._status: dict[tuple[str, str], tuple[str, Obj]] = {}  # (ns, name) -> (uid, status)
        self._events: list[Obj] = []
        self._wake = trio.Event()
        self.writes = 0
        self.write_errors = 0

    # -- reads (the Store calls sim-cluster's kubelet makes) ----------------------------------
    def get(self, bucket: str, namespace: str, name: str) -> Obj | None:
        return self.buckets.get(bucket, {}).get((namespace or "", name))

    def list(self, bucket: str, namespace: str | None = None, label=None, fields=None, **_: Any
             ) -> tuple[list[Obj], None, int]:
        items = [o for k, o in sorted(self.buckets.get(bucket, {}).items())
                 if (namespace is None or k[0] == namespace) and (label is None or label(o))
                 and (fields is None or fields(o))]
        return items, None, 0

    # -- writes --------------------------------------------------------------------------------
    def replace(self, bucket: str, obj: Obj) -> Obj:
        if bucket != "pods":
            raise ValueError(f"the node agent writes pods' status only, not {bucket}")
        key = _key(obj)
        self._status[key] = (obj["metadata"]["uid"], obj.get("status") or {})
        self._wake.set()
        old = self.buckets["pods"].get(key)
        if old is not None and old["metadata"]["uid"] == obj["metadata"]["uid"]:
            self.buckets["pods"][key] = obj
            self._tell(Change("MODIFIED", "pods", obj))
        return obj

    def create(self, bucket: str, obj: Obj) -> Obj:
        if bucket != "events":
            raise ValueError(f"the node agent creates Events only, not {bucket}")
        self._events.append(obj)
        self._wake.set()
        return obj

    def _tell(self, change: Change) -> None:
        for listener in list(self.listeners):
            try:
                listener(change)
            except Exception:  # one listener's bug must not starve the others
                log.exception("listener failed on %s %s", change.type, change.bucket)

    # -- the caches ----------------------------------------------------------------------------
    def _ours(self, bucket: str, obj: Obj) -> bool:
        if bucket == "nodes":
            return obj["metadata"]["name"] in self.nodes
        if bucket == "pods":
            return (obj.get("spec") or {}).get("nodeName") in self.nodes
        return True

    def apply(self, bucket: str, etype: str, obj: Obj) -> None:
        cache = self.buckets[bucket]
        key = _key(obj)
        had = key in cache
        if etype == "DELETED" or not self._ours(bucket, obj):
            if had:
                del cache[key]
                self._tell(Change("DELETED", bucket, obj))
            return
        cache[key] = obj
        self._tell(Change("MODIFIED" if had else "ADDED", bucket, obj))

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Every informer, synced before `started`, and the writer."""
        send, receive = trio.open_memory_channel[WatchBatch](256)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._consume, receive)
            nursery.start_soon(self._writer)
            for bucket, path in PATHS.items():
                await nursery.start(Informer(self.client, path, bucket).run, send)
            task_status.started()

    async def _consume(self, receive: trio.MemoryReceiveChannel[WatchBatch]) -> None:
        async for batch in receive:
            for etype, obj in batch.events or ():
                self.apply(batch.kind, etype, obj)

    async def _writer(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            failed = False
            while self._status:
                key, (uid, status) = next(iter(self._status.items()))
                del self._status[key]
                if not await self._patch_status(key, uid, status):
                    self._status.setdefault(key, (uid, status))
                    failed = True
                    break
            events, self._events = self._events, []
            for ev in events:
                await self._post_event(ev)
            if failed:
                await trio.sleep(RETRY)
                self._wake.set()

    async def _patch_status(self, key: tuple[str, str], uid: str, status: Obj) -> bool:
        ns, name = key
        body = orjson.dumps({"metadata": {"uid": uid}, "status": status})
        try:
            resp = await self.client.patch(f"/api/v1/namespaces/{ns}/pods/{name}/status", content=body,
                                           headers={"Content-Type": "application/merge-patch+json"})
        except httpx.HTTPError as exc:
            self.write_errors += 1
            log.warning("status of pod %s/%s: %s; retrying", ns, name, exc)
            return False
        if resp.status_code in (404, 409):  # gone, or a new pod of that name
            return True
        if resp.status_code >= 400:
            self.write_errors += 1
            log.warning("status of pod %s/%s: HTTP %d %s", ns, name, resp.status_code, resp.text[:300])
            return resp.status_code == 422  # invalid stays invalid: logged, not retried
        self.writes += 1
        return True

    async def _post_event(self, ev: Obj) -> None:
        meta = ev["metadata"]
        body = {**ev, "metadata": {"name": meta["name"], "namespace": meta["namespace"]}}
        body["involvedObject"] = {k: v for k, v in ev["involvedObject"].items() if k != "resourceVersion"}
        try:
            resp = await self.client.post(f"/api/v1/namespaces/{meta['namespace']}/events",
                                          content=orjson.dumps(body),
                                          headers={"Content-Type": "application/json"})
            if resp.status_code >= 400 and resp.status_code != 404:
                log.info("event %s on %s: HTTP %d", ev.get("reason"), ev["involvedObject"].get("name"),
                         resp.status_code)
        except httpx.HTTPError as exc:
            log.info("event %s: %s", ev.get("reason"), exc)
