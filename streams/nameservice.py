"""The name service PEs ask on `streams-api`: OpenStreams' State (by id), Endpoints and
Subscriptions routes, answered as its controller answers them (issue 33 item 1).

    GET    /api/state/NS/by-id/J/name                 text/plain: the name of job J of NS
    GET    /api/endpoints/NS/JOB/pe/N                  {port name: port} of the PE's Service `JOB-N`
    GET    /api/endpoints/NS/JOB/endpoint/EP           {"canonicalName": "JOB-N.NS", "port", "protocol"}
    PUT    /api/endpoints/NS/JOB/pe/N/endpoint/EP      body {"port", "protocol"}: port `usr-EP` on `JOB-N`
    DELETE /api/endpoints/NS/JOB/pe/N/endpoint/EP      that port removed
    GET    /api/subscriptions/NS/JOB/pe/N              404: no import/export broker (below)

OpenStreams' paths have the literal `job` where ours name the namespace (one instance per
namespace there); from the address of one of JOB's PE pods, `job` is that pod's namespace, as
for the connectivity PUT (bundleserver). `by-id` from any PE pod is asked in the pod's namespace.

Who may ask (the bundle endpoint's rule): the job's own PE pods by address (`pepeers.job_at`),
else the job's token (`Authorization: Bearer`); for `by-id`, the job the id names, in the
caller's namespace. Anything else is a 401 that does not say whether the job or id exists: an id
no job holds is a 401 too (OpenStreams: 400), since no token or PE pod can be that job's.

Answers, read from OpenStreams' Java (`StateService`, `EndpointsService`, `SubscriptionsService`
and their Jersey exception mappers): an unknown job is `IllegalArgumentException` with no
message, so 400 with an empty body (reachable here once authorized: a job deleted while its pods
or token linger); an unknown PE, a PE without its Service, no such endpoint, and every
subscription route are `NotFoundException`, 404 with its message `HTTP 404 Not Found`; a PUT or
DELETE is 204 (the runtime's `registerObject` wants exactly 204); a refused PUT/DELETE is 400
with the coordinator's words (`Port name already exists`, `Port name not found`). The endpoint's
JSON field is `canonicalName` (Jackson's name for EndpointInfo's getter; the runtime's
EndpointRecord reads that key). Where ykshm differs, on purpose:
- a PUT of the very port the PE's Service already has under that name is 204, not 400: a
  relaunched PE registers its endpoints again, and OpenStreams' runtime throws on the 400;
- the name must be unique within the job (OpenStreams: every Service of the application scope,
  by substring), so one job cannot block another's names; `usr-EP` must be a Service port name
  (15 characters at most), else 400 naming it, and a port number the Service has already is 400
  naming its port (kube-apiserver would refuse it), as is anything else the API refuses (422);
- subscriptions: ykshm has no import/export broker, so no PE has an entry on the board and the
  answer is always OpenStreams' answer for a PE without one, 404 (the runtime's subscription
  thread then has nothing to connect); the import/export sub-paths are 404 as well (no Export or
  Import object exists), 400 for an unknown job.
User ports live on the PE's Service (as OpenStreams'): the reconcile creates a PE's Service once
and never rewrites it, so they outlive relaunches; a Service a user deletes comes back at the
PE's next launch without them, as OpenStreams' ServiceController makes it again from its factory.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import httpx
import orjson

from common import k8snames as names
from common.http1.body import BodyErrors, read_body
from kube.client import ApiStatusError, check, typed_items

from . import jobids, kubecalls as kube
from .objects import LABEL_JOB, pe_name
from .peobjects import LABEL_SVC

RUNTIME_NAMESPACE_SEGMENT = "job"
USER_PREFIX = "usr-"
PROTOCOLS = ("TCP", "UDP", "SCTP")
BODY_LIMIT = 4096
BODY_SECONDS = 5.0
WRITE_TRIES = 5                  # a Service write lost to another writer is read and made again
TEXT, JSON = b"text/plain", b"application/json"
NOT_FOUND = (404, b"HTTP 404 Not Found", TEXT)     # Jersey's NotFoundException, as mapped
NO_JOB = (400, b"", TEXT)                           # IllegalArgumentException() with no message
DONE = (204, b"", TEXT)
_PORT_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")

Answer = tuple[int, bytes, bytes]


class Kind(enum.Enum):
    """A name-service route."""

    BY_ID = enum.auto()
    PE_ENDPOINTS = enum.auto()
    ENDPOINT = enum.auto()
    USER_ENDPOINT = enum.auto()
    SUBSCRIPTIONS = enum.auto()
    SUBSCRIPTION_PART = enum.auto()


READS = ("GET", "HEAD")
METHODS = {Kind.BY_ID: READS, Kind.PE_ENDPOINTS: READS, Kind.ENDPOINT: READS,
           Kind.USER_ENDPOINT: ("PUT", "DELETE"), Kind.SUBSCRIPTIONS: READS,
           Kind.SUBSCRIPTION_PART: ("GET", "HEAD", "PUT", "PATCH", "POST", "DELETE")}


@dataclasses.dataclass(frozen=True)
class Route:
    """A name-service path, parsed once."""

    kind: Kind
    namespace: str
    job: str = ""                  # BY_ID: the job the id names, once looked up ("" none)
    pe: int | None = None
    endpoint: str = ""             # EP of ENDPOINT / USER_ENDPOINT
    job_id: int | None = None      # BY_ID


@dataclasses.dataclass(frozen=True)
class Refused:
    """A refusal the bundle endpoint writes as a Kubernetes Status (401, 405, a bad path)."""

    code: int
    reason: str
    message: str


class _BadBody(Exception):
    """A PUT body that is not an endpoint: 400 with these words."""


def parse(path: str) -> Route | Refused | None:
    """The name-service route of a normalised path, a refusal, or None (not a name-service path)."""
    parts = path.removeprefix("/").split("/")
    if parts[:2] == ["api", "state"] and len(parts) == 6 and parts[3] == "by-id" and parts[5] == "name":
        if not (parts[4].isascii() and parts[4].isdigit()):
            return Refused(404, "NotFound", f"no such path {path!r}")    # Jersey: a bad path param
        return _named(Route(Kind.BY_ID, parts[2], job_id=int(parts[4])), path)
    if parts[:2] == ["api", "endpoints"]:
        return _named(_endpoints(parts[2:]), path)
    if parts[:2] == ["api", "subscriptions"]:
        return _named(_subscriptions(parts[2:]), path)
    return None


def _pe(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() else None


def _endpoints(rest: list[str]) -> Route | None:
    if len(rest) == 4 and rest[2] == "pe" and _pe(rest[3]) is not None:
        return Route(Kind.PE_ENDPOINTS, rest[0], rest[1], _pe(rest[3]))
    if len(rest) == 4 and rest[2] == "endpoint" and rest[3]:
        return Route(Kind.ENDPOINT, rest[0], rest[1], endpoint=rest[3])
    if len(rest) == 6 and rest[2] == "pe" and _pe(rest[3]) is not None and rest[4] == "endpoint" and rest[5]:
        return Route(Kind.USER_ENDPOINT, rest[0], rest[1], _pe(rest[3]), endpoint=rest[5])
    return None


def _subscriptions(rest: list[str]) -> Route | None:
    if len(rest) < 4 or rest[2] != "pe" or _pe(rest[3]) is None:
        return None
    if len(rest) == 4:
        return Route(Kind.SUBSCRIPTIONS, rest[0], rest[1], _pe(rest[3]))
    if rest[4] in ("export", "import") and 6 <= len(rest) <= 8 and all(rest[5:]):
        return Route(Kind.SUBSCRIPTION_PART, rest[0], rest[1], _pe(rest[3]))
    return None


def _named(route: Route | None, path: str) -> Route | Refused:
    """Namespace and job must be DNS-1123 names (label, subdomain) before any API path is built."""
    if route is None:
        return Refused(404, "NotFound", f"no such path {path!r}")
    if not names.is_label(route.namespace) or (route.kind is not Kind.BY_ID and not names.is_subdomain(route.job)):
        return Refused(400, "BadRequest", "the namespace must be a DNS-1123 label and the job a DNS-1123 subdomain")
    return route


Authorize = Callable[[str, str, Mapping[bytes, bytes], "tuple[str, str] | None"], Awaitable[bool]]


class NameService:
    """The routes above, on the controller's caches (`jobs`, `pe_launch`) and the API (Services)."""

    def __init__(self, client: httpx.AsyncClient, authorized: Authorize,
                 jobs: Callable[[], Iterable[Mapping[str, Any]]],
                 pe_launch: Callable[[str, str, int], int | None] | None) -> None:
        self.client, self.authorized, self.jobs, self.pe_launch = client, authorized, jobs, pe_launch

    async def answer(self, route: Route, scope: Mapping[str, Any], receive: Any,
                     caller: tuple[str, str] | None) -> Answer | Refused:
        """`route` for an ASGI request (`scope`, `receive`) from `caller` (`job_at` of its
        address). An API server that does not answer is a 503 naming it, never a traceback."""
        method = scope["method"]
        if method not in METHODS[route.kind]:
            return Refused(405, "MethodNotAllowed", f"{method} is not allowed")
        route = _runtime_form(route, caller)
        if route.kind is Kind.BY_ID:
            route = dataclasses.replace(route, job=jobids.job_named_by(self.jobs(), route.namespace,
                                                                      route.job_id or 0) or "")
        try:
            if not route.job or not await self.authorized(
                    route.namespace, route.job, {k.lower(): v for k, v in scope["headers"]}, caller):
                return Refused(401, "Unauthorized", "a job's PE token is required")
            return await self._serve(route, scope, receive)
        except (ApiStatusError, httpx.HTTPError) as exc:
            return Refused(503, "ServiceUnavailable", f"the Kubernetes API did not answer: {exc}")

    async def _serve(self, route: Route, scope: Mapping[str, Any], receive: Any) -> Answer:
        """An authorized request, in the order OpenStreams' services check: job, PE, Service."""
        if route.kind is Kind.BY_ID:
            return 200, route.job.encode(), TEXT
        if route.kind is Kind.SUBSCRIPTIONS:
            return NOT_FOUND                     # no broker: no PE has a subscription board entry
        if not _has_job(self.jobs(), route.namespace, route.job):
            return NO_JOB
        if route.kind is Kind.SUBSCRIPTION_PART:
            return NOT_FOUND
        if route.kind is Kind.ENDPOINT:
            return await self._endpoint(route)
        if self.pe_launch is not None and self.pe_launch(route.namespace, route.job, route.pe or 0) is None:
            return NOT_FOUND
        if route.kind is Kind.PE_ENDPOINTS:
            service = await kube.get(self.client, "Service", route.namespace, pe_name(route.job, route.pe or 0))
            if service is None:
                return NOT_FOUND
            ports = {p.get("name", ""): p for p in (service.get("spec") or {}).get("ports") or ()}
            return 200, orjson.dumps(ports), JSON
        if scope["method"] == "DELETE":
            return await self._delete(route)
        try:
            port = _endpoint_port(route.endpoint, await read_body(receive, scope["headers"], limit=BODY_LIMIT,
                                                                  timeout=BODY_SECONDS, errors=_BODY_ERRORS))
        except _BadBody as exc:
            return 400, str(exc).encode(), TEXT
        return await self._put(route, port)

    async def _services(self, route: Route) -> list[dict[str, Any]]:
        """The job's PE Services (label `svc: pe`), from the API (the controller does not watch them)."""
        resp = await self.client.get(kube.KINDS["Service"].collection(route.namespace),
                                     params={"labelSelector": f"{LABEL_JOB}={route.job},{LABEL_SVC}=pe"})
        return typed_items(check(resp) or {})

    async def _endpoint(self, route: Route) -> Answer:
        name = USER_PREFIX + route.endpoint
        for service in sorted(await self._services(route), key=lambda s: s["metadata"]["name"]):
            for port in (service.get("spec") or {}).get("ports") or ():
                if port.get("name") == name:
                    meta = service["metadata"]
                    return 200, orjson.dumps({"canonicalName": f"{meta['name']}.{meta.get('namespace') or 'default'}",
                                              "port": port.get("port"), "protocol": port.get("protocol") or "TCP"}), JSON
        return NOT_FOUND

    async def _put(self, route: Route, port: dict[str, Any]) -> Answer:
        own = pe_name(route.job, route.pe or 0)
        for service in await self._services(route):
            for have in (service.get("spec") or {}).get("ports") or ():
                mine = service["metadata"]["name"] == own
                same = have.get("port") == port["port"] and (have.get("protocol") or "TCP") == port["protocol"]
                if have.get("name") == port["name"]:
                    return DONE if mine and same else (400, b"Port name already exists", TEXT)
                if mine and same:        # kube-apiserver refuses it (422 Duplicate value): said first
                    return 400, f"port {port['port']}/{port['protocol']} is {have.get('name')}'s".encode(), TEXT
        return await self._write(route, lambda ports: [*ports, port])

    async def _delete(self, route: Route) -> Answer:
        name = USER_PREFIX + route.endpoint
        return await self._write(route, lambda ports: [p for p in ports if p.get("name") != name], must_have=name)

    async def _write(self, route: Route, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
                     must_have: str = "") -> Answer:
        """The PE's Service with its ports changed, at the version read (a lost race: read again)."""
        for _ in range(WRITE_TRIES):
            service = await kube.get(self.client, "Service", route.namespace, pe_name(route.job, route.pe or 0))
            if service is None:
                return NOT_FOUND
            ports = list((service.get("spec") or {}).get("ports") or ())
            if must_have and not any(p.get("name") == must_have for p in ports):
                return 400, b"Port name not found", TEXT
            try:
                written = await kube.replace(self.client, {**service, "spec": {**service["spec"], "ports": change(ports)}})
            except ApiStatusError as exc:
                if exc.code == 422:
                    return 400, exc.message.encode(), TEXT
                raise
            if written is not None:
                return DONE
        return 400, b"Operation failed", TEXT           # the coordinator's words when it gives up


def _has_job(jobs: Iterable[Mapping[str, Any]], namespace: str, name: str) -> bool:
    return any((j.get("metadata") or {}).get("name") == name and
               ((j.get("metadata") or {}).get("namespace") or "default") == namespace for j in jobs)


def _runtime_form(route: Route, caller: tuple[str, str] | None) -> Route:
    """`job` in the namespace's place, from a PE pod: that pod's namespace (by-id: any PE pod's;
    the other routes: a pod of the job the path names)."""
    if route.namespace != RUNTIME_NAMESPACE_SEGMENT or caller is None:
        return route
    if route.kind is Kind.BY_ID or caller[1] == route.job:
        return dataclasses.replace(route, namespace=caller[0])
    return route


def _endpoint_port(endpoint: str, body: bytes) -> dict[str, Any]:
    """The Service port `usr-EP` a PUT body (OpenStreams' EndpointInfo) asks for; _BadBody if not."""
    name = USER_PREFIX + endpoint
    if len(name) > 15 or not _PORT_NAME.fullmatch(name) or "--" in name:
        raise _BadBody(f"endpoint {endpoint!r}: {name!r} must be a Service port name (at most 15 characters "
                       "of a-z, 0-9 and '-', no '--', not ending in '-')")
    try:
        info = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise _BadBody("the body must be a JSON object {\"port\": N, \"protocol\": \"TCP\"}") from None
    if not isinstance(info, dict):
        raise _BadBody("the body must be a JSON object {\"port\": N, \"protocol\": \"TCP\"}")
    port, protocol = info.get("port"), info.get("protocol") or "TCP"
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise _BadBody(f"port must be an integer 1..65535, not {port!r}")
    if protocol not in PROTOCOLS:
        raise _BadBody(f"protocol must be one of {', '.join(PROTOCOLS)}, not {protocol!r}")
    return {"name": name, "port": port, "targetPort": port, "protocol": protocol}


def _too_large(limit: int) -> Exception:
    return _BadBody(f"the body is over {limit} bytes")


_BODY_ERRORS = BodyErrors(too_large=_too_large,
                          too_slow=lambda seconds: _BadBody(f"the body did not arrive within {seconds:g} s"),
                          gone=lambda: _BadBody("the client went away"))
