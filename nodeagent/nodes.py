"""The agent's nodes as a kubelet keeps them: registered, Ready, a Lease renewed, status reported.

At start each node is created (`POST /api/v1/nodes`: the `kubernetes.io/hostname`, `os` and `arch`
labels, capacity = allocatable from --node-cpu/--node-memory/--node-pods, the host's address as
InternalIP); a node that exists already (an agent restarted) is kept. Then its status goes
through the status sub-resource (Ready True with reason KubeletReady, the pressure conditions
False, addresses, capacity) and the `node.kubernetes.io/not-ready` taint that kube-apiserver's
TaintNodesByCondition admission puts on every new node is lifted, as the node lifecycle
controller does once a node is Ready (the real-plane run starts no such controller).

Every `lease_interval` seconds (10, as the kubelet) each node's Lease in `kube-node-lease` is
renewed (`spec.renewTime`, a merge PATCH; created at start with `holderIdentity` the node,
`leaseDurationSeconds` 40, owned by the Node); every `status_interval` seconds (60) the Ready
condition's `lastHeartbeatTime` is posted again. A failed renewal is logged and retried at the
next tick: nothing here ends the agent once the nodes are registered.
"""

from __future__ import annotations

import datetime as dt
import logging
import platform
from typing import Any

import httpx
import orjson
import trio

from simcluster import timestamps

log = logging.getLogger("ykshm.node-agent.nodes")
Obj = dict[str, Any]
LEASE_NS = "kube-node-lease"
LEASE_DURATION = 40
NOT_READY = "node.kubernetes.io/not-ready"
JSON = {"Content-Type": "application/json"}
MERGE = {"Content-Type": "application/merge-patch+json"}


class RegisterError(Exception):
    """A node could not be registered (the agent stops with this line)."""


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def node_object(name: str, resources: dict[str, str], host_ip: str, port: int = 0, since: str = "") -> Obj:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                                  "kubernetes.io/arch": _arch(), "ykshm.io/node-agent": "true"}},
            "status": node_status(name, resources, host_ip, port, since)}


def node_status(name: str, resources: dict[str, str], host_ip: str, port: int = 0, since: str = "") -> Obj:
    """The node's whole status now; `since`: when the conditions last changed (the agent's start)."""
    now = _now()

    def cond(kind: str, status: str, reason: str, message: str) -> Obj:
        return {"type": kind, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": since or now}

    return {"capacity": dict(resources), "allocatable": dict(resources),
            "conditions": [cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                           cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                           cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                           cond("Ready", "True", "KubeletReady", "ykshm node agent is posting ready status")],
            "addresses": [{"type": "InternalIP", "address": host_ip}],   # no Hostname: the apiserver tries it first
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
            "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": platform.release(),
                         "osImage": "ykshm node agent", "containerRuntimeVersion": "process://ykshm",
                         "kubeletVersion": "v1.37.2-ykshm", "kubeProxyVersion": "", "operatingSystem": "linux",
                         "architecture": _arch()}}


class NodeKeeper:
    def __init__(self, client: httpx.AsyncClient, names: list[str], resources: dict[str, str], host_ip: str,
                 lease_interval: float = 10.0, status_interval: float = 60.0) -> None:
        self.client = client
        self.names = names
        self.resources = resources
        self.host_ip = host_ip
        self.lease_interval = lease_interval
        self.status_interval = status_interval
        self.uids: dict[str, str] = {}
        self.since = _now()   # the conditions' lastTransitionTime: they never change while the agent runs
        self.kubelet_port = 0  # the agent's KubeletApi (kubectl logs), reported in daemonEndpoints
        self.renewed = 0
        self.renew_errors = 0

    async def _call(self, method: str, path: str, body: Obj, headers: dict[str, str]) -> httpx.Response:
        return await self.client.request(method, path, content=orjson.dumps(body), headers=headers)

    async def register(self) -> None:
        """Every node created (or found), Ready, untainted, with its Lease; RegisterError otherwise."""
        for name in self.names:
            try:
                await self._register(name)
            except httpx.HTTPError as exc:
                raise RegisterError(f"node {name}: cannot reach the API server: {exc}") from None

    async def _register(self, name: str) -> None:
        resp = await self._call("POST", "/api/v1/nodes", node_object(name, self.resources, self.host_ip, self.kubelet_port, self.since), JSON)
        if resp.status_code == 409:
            resp = await self.client.get(f"/api/v1/nodes/{name}")
        if resp.status_code >= 400:
            raise RegisterError(f"node {name}: HTTP {resp.status_code}: {_message(resp)}")
        node = resp.json()
        self.uids[name] = node["metadata"]["uid"]
        await self.post_status(name)
        taints = (node.get("spec") or {}).get("taints") or []
        kept = [t for t in taints if t.get("key") != NOT_READY]
        if kept != taints:
            resp = await self._call("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": kept or None}}, MERGE)
            if resp.status_code >= 400:
                raise RegisterError(f"node {name}: cannot lift {NOT_READY}: HTTP {resp.status_code}: {_message(resp)}")
        await self._lease(name)

    async def post_status(self, name: str) -> None:
        status = node_status(name, self.resources, self.host_ip, self.kubelet_port, self.since)
        resp = await self._call("PATCH", f"/api/v1/nodes/{name}/status", {"status": status}, MERGE)
        if resp.status_code >= 400:
            raise RegisterError(f"node {name} status: HTTP {resp.status_code}: {_message(resp)}")

    def _lease_body(self, name: str) -> Obj:
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": LEASE_NS,
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name,
                                                  "uid": self.uids[name]}]},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION,
                         "renewTime": timestamps.format_micro(dt.datetime.now(dt.timezone.utc))}}

    async def _lease(self, name: str) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases"
        resp = await self._call("POST", path, self._lease_body(name), JSON)
        if resp.status_code == 409:
            await self.renew(name)
        elif resp.status_code >= 400:
            raise RegisterError(f"node {name} lease: HTTP {resp.status_code}: {_message(resp)}")

    async def renew(self, name: str) -> bool:
        now = timestamps.format_micro(dt.datetime.now(dt.timezone.utc))
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/{name}"
        try:
            resp = await self._call("PATCH", path, {"spec": {"holderIdentity": name, "renewTime": now,
                                                             "leaseDurationSeconds": LEASE_DURATION}}, MERGE)
            if resp.status_code == 404:  # deleted meanwhile: made again
                resp = await self._call("POST", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases",
                                        self._lease_body(name), JSON)
        except httpx.HTTPError as exc:
            self.renew_errors += 1
            log.warning("lease of node %s: %s", name, exc)
            return False
        if resp.status_code >= 400:
            self.renew_errors += 1
            log.warning("lease of node %s: HTTP %d %s", name, resp.status_code, _message(resp))
            return False
        self.renewed += 1
        return True

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        next_status = trio.current_time() + self.status_interval
        while True:
            await trio.sleep(self.lease_interval)
            for name in self.names:
                await self.renew(name)
            if trio.current_time() >= next_status:
                next_status = trio.current_time() + self.status_interval
                for name in self.names:
                    try:
                        await self.post_status(name)
                    except (RegisterError, httpx.HTTPError) as exc:
                        log.warning("%s", exc)


def _message(resp: httpx.Response) -> str:
    try:
        return str(resp.json().get("message") or resp.text[:200])
    except ValueError:
        return resp.text[:200]
