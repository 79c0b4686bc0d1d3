"""The Kubernetes calls of the Streams roles: where each kind lives, and idempotent writes.

Every write a controller makes may be repeated after a crash, so each call here says what a
repeat means: `create` treats 409 AlreadyExists as done, `delete` treats 404 as done, `replace`
and `put_status` return None on a 409 Conflict (someone changed the object: the next watch event
brings the new version and the reconcile runs again).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import httpx

from kube.client import ApiStatusError, check, event_object, list_all

GROUP_PATH = "/apis/streams.ibm.com/v1"


@dataclasses.dataclass(frozen=True)
class Kind:
    """One served kind: its collection path prefix and plural."""

    kind: str
    prefix: str
    plural: str

    def collection(self, namespace: str | None = None) -> str:
        if namespace is None:
            return f"{self.prefix}/{self.plural}"
        return f"{self.prefix}/namespaces/{namespace}/{self.plural}"

    def path(self, namespace: str, name: str) -> str:
        return f"{self.collection(namespace)}/{name}"


KINDS: dict[str, Kind] = {k.kind: k for k in (
    Kind("Job", GROUP_PATH, "streamsjobs"),
    Kind("ProcessingElement", GROUP_PATH, "streamspes"),
    Kind("HostPool", GROUP_PATH, "streamshostpools"),
    Kind("ParallelRegion", GROUP_PATH, "streamsprs"),
    Kind("ConsistentRegion", GROUP_PATH, "streamscrs"),
    Kind("ConsistentRegionOperator", GROUP_PATH, "streamscros"),
    Kind("Pod", "/api/v1", "pods"),
    Kind("ConfigMap", "/api/v1", "configmaps"),
    Kind("Secret", "/api/v1", "secrets"),
    Kind("Service", "/api/v1", "services"),
    Kind("Endpoints", "/api/v1", "endpoints"),
    Kind("ServiceAccount", "/api/v1", "serviceaccounts"),
    Kind("Deployment", "/apis/apps/v1", "deployments"),
    Kind("Event", "/api/v1", "events"),
)}


def path_of(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    return KINDS[obj["kind"]].path(meta.get("namespace") or "default", meta["name"])


async def create(client: httpx.AsyncClient, obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """POST an object; None if one of that name exists already (a repeat is no error)."""
    ns = obj["metadata"].get("namespace") or "default"
    resp = await client.post(KINDS[obj["kind"]].collection(ns), json=obj)
    if resp.status_code == 409:
        return None
    return check(resp)


async def get(client: httpx.AsyncClient, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    resp = await client.get(KINDS[kind].path(namespace, name))
    if resp.status_code == 404:
        return None
    return check(resp)


async def replace(client: httpx.AsyncClient, obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """PUT the object at its resourceVersion; None on a conflict (it changed meanwhile)."""
    resp = await client.put(path_of(obj), json=obj)
    if resp.status_code in (404, 409):
        return None
    return check(resp)


async def put_status(client: httpx.AsyncClient, obj: Mapping[str, Any],
                     status: Mapping[str, Any]) -> dict[str, Any] | None:
    """Write `status` through the /status sub-resource (the seed: status lives there)."""
    body = {**obj, "status": dict(status)}
    resp = await client.put(path_of(obj) + "/status", json=body)
    if resp.status_code in (404, 409):
        return None
    return check(resp)


async def delete(client: httpx.AsyncClient, kind: str, namespace: str, name: str, *,
                 propagation: str = "Background", uid: str | None = None) -> bool:
    """DELETE with a propagation policy (and a uid precondition); False if it was gone."""
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions",
                            "propagationPolicy": propagation}
    if uid:
        body["preconditions"] = {"uid": uid}
    resp = await client.request("DELETE", KINDS[kind].path(namespace, name), json=body)
    if resp.status_code in (404, 409):
        return False
    check(resp)
    return True


def event_for(obj: Mapping[str, Any], reason: str, message: str, type_: str = "Normal",
              component: str = "ykshm-streams") -> dict[str, Any]:
    """A core/v1 Event about `obj` (what `kubectl describe` lists under Events)."""
    meta = obj["metadata"]
    return event_object(obj["kind"], meta.get("namespace") or "default", meta["name"],
                        meta.get("uid", ""), reason, message, type_, component,
                        api_version=obj.get("apiVersion", "v1"))


async def post_event(client: httpx.AsyncClient, obj: Mapping[str, Any], reason: str, message: str,
                     type_: str = "Normal") -> None:
    """Post an Event; an error posting it is not worth failing the reconcile for."""
    try:
        await create(client, event_for(obj, reason, message, type_))
    except (ApiStatusError, httpx.HTTPError):
        pass


async def schedulable_nodes(client: httpx.AsyncClient) -> int:
    """How many nodes take new pods (not cordoned): what automatic fusion is bounded by."""
    items, _ = await list_all(client, "/api/v1/nodes")
    return sum(1 for node in items if not (node.get("spec") or {}).get("unschedulable"))
