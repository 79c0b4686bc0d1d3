"""The Kubernetes calls of the Streams roles: where each kind lives, and idempotent writes.

Every write a controller makes may be repeated after a crash, so each call here says what a
repeat means: `create` treats 409 AlreadyExists as done, `delete` treats 404 as done, `replace`
and `put_status` return None on a 409 Conflict (someone changed the object: the caller plans again
on fresher caches). Any other error raises `ApiStatusError`; `permanent(exc)` tells the ones a
retry cannot mend (400, 422: the request itself is wrong) from the transient ones (5xx, 429, 409,
timeouts). Each call first retries a transient answer itself, a few times within a second
(`_send`: a lost answer to an idempotent write is cheap to repeat, and a whole submission is not);
what still fails raises, and the controller retries that job with backoff.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import httpx

import random

import trio

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
        """The object's API path; a namespace or name that is no object name (a `/`, `?`, `#`,
        `%`, `..`) is refused rather than let change the path (no valid name holds one)."""
        for part in (namespace, name):
            if not part or part in (".", "..") or any(c in part for c in "/?#%"):
                raise ValueError(f"{part!r} is not a Kubernetes object name")
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
    Kind("Role", "/apis/rbac.authorization.k8s.io/v1", "roles"),
    Kind("RoleBinding", "/apis/rbac.authorization.k8s.io/v1", "rolebindings"),
    Kind("NetworkPolicy", "/apis/networking.k8s.io/v1", "networkpolicies"),
    Kind("Event", "/api/v1", "events"),
)}


def path_of(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    return KINDS[obj["kind"]].path(meta.get("namespace") or "default", meta["name"])


TRANSIENT_CODES = (429, 500, 502, 503, 504)
# a write's own retries: three quick ones within a second (the job-level retry, common.backoff, is
# the slow one), so one refused write under load does not cost the job a backoff round
CALL_RETRY_DELAYS = (0.05, 0.2, 0.5)


def _transient(resp: httpx.Response) -> bool:
    return resp.status_code in TRANSIENT_CODES


def _transient_create(resp: httpx.Response) -> bool:
    """For a create, a 409 that is not AlreadyExists (the server could not do it now) too."""
    return _transient(resp) or (resp.status_code == 409 and _reason(resp) != "AlreadyExists")


async def _send(client: httpx.AsyncClient, method: str, path: str, body: Any,
                retry_if: Callable[[httpx.Response], bool] = _transient) -> httpx.Response:
    """One request, repeated after a transient answer or a transport error; the last answer
    (or error) is the caller's."""
    for delay in (*CALL_RETRY_DELAYS, None):
        try:
            resp = await client.request(method, path, json=body)
        except httpx.TransportError:
            if delay is None:
                raise
        else:
            if delay is None or not retry_if(resp):
                return resp
        await trio.sleep(delay * (0.5 + random.random()))
    raise AssertionError("unreachable")


# how many writes a controller has in flight at once for one job (`concurrently`): enough to hide
# the API server's per-request latency, few enough not to flood it
WRITE_CONCURRENCY = 16


async def concurrently(calls: Sequence[Callable[[], Awaitable[Any]]], limit: int = WRITE_CONCURRENCY) -> None:
    """Run independent calls with at most `limit` in flight. The first error cancels the rest and
    is raised as itself (not as a group), as a sequential loop would raise it."""
    if len(calls) <= 1:
        for call in calls:
            await call()
        return
    failed: list[BaseException] = []
    slots = trio.CapacityLimiter(limit)

    async def one(call: Callable[[], Awaitable[Any]], cancel: trio.CancelScope) -> None:
        async with slots:
            try:
                await call()
            except Exception as exc:  # noqa: BLE001 - handed to the caller below
                if not failed:
                    failed.append(exc)
                cancel.cancel()

    async with trio.open_nursery() as nursery:
        for call in calls:
            nursery.start_soon(one, call, nursery.cancel_scope)
    if failed:
        raise failed[0]


async def create(client: httpx.AsyncClient, obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """POST an object; None if one of that name exists already (a repeat is no error)."""
    ns = obj["metadata"].get("namespace") or "default"
    resp = await _send(client, "POST", KINDS[obj["kind"]].collection(ns), obj, _transient_create)
    if resp.status_code == 409 and _reason(resp) == "AlreadyExists":
        return None
    return check(resp)


def _reason(resp: httpx.Response) -> str:
    try:
        return str(resp.json().get("reason") or "")
    except (ValueError, AttributeError):
        return ""


class Stale(Exception):
    """A write lost to a conflict (None from `replace`/`put_status`): plan again on fresher caches."""


def written(answer: dict[str, Any] | None) -> dict[str, Any]:
    """A write's answer, or Stale when the write was lost to a conflict."""
    if answer is None:
        raise Stale("the object changed meanwhile")
    return answer


PERMANENT_CODES = (400, 422)


def permanent(exc: BaseException) -> bool:
    """Whether an API error is the request's own fault (a retry would be refused the same way)."""
    return isinstance(exc, ApiStatusError) and exc.code in PERMANENT_CODES


async def get(client: httpx.AsyncClient, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    resp = await client.get(KINDS[kind].path(namespace, name))
    if resp.status_code == 404:
        return None
    return check(resp)


async def replace(client: httpx.AsyncClient, obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """PUT the object at its resourceVersion; None on a conflict (it changed meanwhile)."""
    resp = await _send(client, "PUT", path_of(obj), obj)
    if resp.status_code in (404, 409):
        return None
    return check(resp)


async def put_status(client: httpx.AsyncClient, obj: Mapping[str, Any],
                     status: Mapping[str, Any]) -> dict[str, Any] | None:
    """Write `status` through the /status sub-resource (the seed: status lives there)."""
    body = {**obj, "status": dict(status)}
    resp = await _send(client, "PUT", path_of(obj) + "/status", body)
    if resp.status_code in (404, 409):
        return None
    return check(resp)


async def delete(client: httpx.AsyncClient, kind: str, namespace: str, name: str, *,
                 propagation: str = "Background", uid: str | None = None) -> bool:
    """DELETE with a propagation policy (and a uid precondition); False if it was gone.
    A 409 (the uid precondition failed, or the server could not do it now) raises: plan again."""
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions",
                            "propagationPolicy": propagation}
    if uid:
        body["preconditions"] = {"uid": uid}
    resp = await _send(client, "DELETE", KINDS[kind].path(namespace, name), body)
    if resp.status_code == 404:
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
