"""The controller's endpoint for PEs: their bundle, and their connectivity reports.

    GET /api/bundles/NS/JOB                          the job's .sab
    PUT /api/state/NS/JOB/pe/N/connectivity          body "Full" | "Partial" | "None" (a JSON string)
    GET /api/state/NS/JOB/connectivity               {"N": {"connectivity", "at"}, ...}
    /api/state/NS/by-id/J/name, /api/endpoints/..., /api/subscriptions/...   streams/nameservice.py

OpenStreams' PEs pull the bundle from the Redis behind the `streams-api` Service; ours is an HTTP
endpoint of the controller behind a Service of that name (`peobjects.api_service`, kept by
`ensure_api_service`), so a PE's bootstrap (or `ykshm pe-sim`) reads
`http://streams-api.NS:10000/api/bundles/NS/JOB`.

Authentication: `Authorization: Bearer TOKEN`, TOKEN the job's Secret `JOB-token` (mounted into
its PE pods at /etc/config/token), or the caller's address is one of the job's own PE pods
(`pepeers.job_at`: OpenStreams' runtime sends no token, and OpenStreams accepts its PE pods). No
token from elsewhere, another job's token, or a job without a Secret: 401 (a Kubernetes Status,
`Unauthorized`; the answer does not say whether the job exists). The bundle
is what the Job's `spec.bundle` names, fetched as the submission does (`fetch`), kept in memory for
the last `CACHE_JOBS` jobs (keyed by the Job's uid, so a resubmitted job is fetched again).

Connectivity: OpenStreams' PEs PUT theirs to `streams-api` (`/api/state/job/JOB/pe/N/connectivity`,
no namespace: one instance per namespace there; ours serves every namespace, so our path names
it). The runtime's form is answered too: `job` in the namespace's place, from an address of one of
JOB's PE pods, is that pod's namespace (from anywhere else it is read as the namespace `job`).
What PEs report is kept in memory with the time it arrived (`at`, seconds since the epoch) and
the PE's launch at that time (`launch`, the PE's `spec.launchCount` as the controller's cache holds
it: a report belongs to the pod of that launch), answered to the job's token holders (`ykshm bench
streams` measures "all PEs connected" with it), and handed to the controller (`on_report`), which
makes it the PE's status connectivity (`reconcile.connectivity_of`).
"""

from __future__ import annotations

import base64
import dataclasses
import collections
import functools
import hmac
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import httpx
import orjson
import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve

from common import logsetup
from common.http1.lifespan import nothing_to_start
from common.http1.routing import normalise
from common import k8snames as names

from . import fetch, kubecalls as kube, nameservice, peobjects, repository
from .errors import StreamsError
from .jobspec import read_job

log = logging.getLogger("ykshm.streams.bundles")

CACHE_JOBS = 64
TOKEN_TTL = 5.0
TOKEN_CACHE_MAX = 1024          # (namespace, job) tokens kept; the least recently used goes first


def status_body(code: int, reason: str, message: str) -> bytes:
    return orjson.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                         "message": message, "reason": reason, "code": code})


class BundleServer:
    """The ASGI app: token check, then the job's bundle bytes."""

    def __init__(self, client: httpx.AsyncClient, *, bundle_dir: str, cache_dir: str,
                 pe_launch: Callable[[str, str, int], int | None] | None = None,
                 on_report: Callable[[tuple[str, str]], None] = lambda _key: None,
                 job_at: Callable[[str], tuple[str, str] | None] = lambda _ip: None,
                 jobs: Callable[[], Iterable[Mapping[str, Any]]] = lambda: ()) -> None:
        self.client, self.bundle_dir, self.cache_dir = client, bundle_dir, cache_dir
        self.bundles: collections.OrderedDict[str, bytes] = collections.OrderedDict()
        self.tokens: collections.OrderedDict[tuple[str, str], tuple[float, bytes]] = collections.OrderedDict()
        self.connectivity: dict[tuple[str, str], dict[str, dict]] = {}
        self.pe_launch = pe_launch
        """(namespace, job, PE index) -> the PE's current launch, None if the job has no such PE
        (its report is refused: a PE cannot fill memory with reports of made-up PEs). None: no
        controller to ask, every report is kept without a launch."""
        self.on_report = on_report
        """Called with (namespace, job) after a PE's report is kept."""
        self.job_at = job_at
        """A caller's address -> (namespace, job) when it is one of that job's PE pods."""
        self.names = nameservice.NameService(client, self.authorized, jobs, pe_launch)
        """The name service's routes (`jobs`: the controller's Job cache), on this rule of who may ask."""
        self.repository: repository.Repository | None = None
        """The bundle repository a Job with no source is read from (`repository.through`)."""

    def reports(self, namespace: str, job: str) -> dict[int, tuple[str, int]]:
        """PE index -> (connectivity, launch) of the job's reports that name a launch."""
        return {int(pe): (got["connectivity"], got["launch"])
                for pe, got in self.connectivity.get((namespace, job), {}).items() if got.get("launch")}

    async def token(self, namespace: str, job: str) -> bytes | None:
        """The job's token, from a cache bounded in size (TOKEN_CACHE_MAX, least recently used
        evicted) and age (TOKEN_TTL, so a rotated token takes over). A miss is not cached: made-up
        jobs cannot fill the memory, and a Secret made later is found at once."""
        now = trio.current_time()
        found = self.tokens.get((namespace, job))
        if found is not None and now - found[0] < TOKEN_TTL:
            self.tokens.move_to_end((namespace, job))
            return found[1]
        self.tokens.pop((namespace, job), None)
        secret = await kube.get(self.client, "Secret", namespace, peobjects.token_secret_name(job))
        raw = ((secret or {}).get("data") or {}).get(peobjects.TOKEN_KEY)
        if not raw:
            return None
        value = base64.b64decode(raw)
        self.tokens[(namespace, job)] = (now, value)
        while len(self.tokens) > TOKEN_CACHE_MAX:
            self.tokens.popitem(last=False)
        return value

    async def authorized(self, namespace: str, job: str, headers: Mapping[bytes, bytes],
                         caller: tuple[str, str] | None = None) -> bool:
        """The job's token presented, or `caller` (the job whose PE pod the request came from,
        `job_at` of its address) is this job: the runtime sends no token."""
        if caller == (namespace, job):
            return True
        scheme, _, presented = headers.get(b"authorization", b"").partition(b" ")
        if scheme.lower() != b"bearer" or not presented:
            return False
        expected = await self.token(namespace, job)
        return expected is not None and hmac.compare_digest(presented.strip(), expected)

    async def bundle(self, namespace: str, job: str) -> bytes | None:
        obj = await kube.get(self.client, "Job", namespace, job)
        if obj is None:
            return None
        key = f"{namespace}/{job}/{obj['metadata'].get('uid')}"
        data = self.bundles.get(key)
        if data is None:
            spec = read_job(obj)
            read_configmap, read_secret = fetch.object_readers(
                lambda kind, ns, name: kube.get(self.client, kind, ns, name))
            data = await repository.through(self.repository, spec.bundle, functools.partial(
                fetch.fetch_bundle, spec.bundle, namespace=namespace, bundle_dir=self.bundle_dir,
                cache_dir=self.cache_dir, read_configmap=read_configmap, read_secret=read_secret))
            self.bundles[key] = data
            while len(self.bundles) > CACHE_JOBS:
                self.bundles.popitem(last=False)
        self.bundles.move_to_end(key)
        return data

    async def state(self, route: Route, scope: dict, receive: Any,
                    caller: tuple[str, str] | None) -> tuple[int, bytes, bytes]:
        namespace, job = route.namespace, route.job
        if route.pe is None:
            if scope["method"] != "GET":
                return 405, status_body(405, "MethodNotAllowed", f"{scope['method']} is not allowed"), JSON
            if not await self.authorized(namespace, job, _headers(scope), caller):
                return 401, status_body(401, "Unauthorized", "a job's PE token is required"), JSON
            return 200, orjson.dumps(self.connectivity.get((namespace, job), {})), JSON
        if scope["method"] != "PUT":
            return 405, status_body(405, "MethodNotAllowed", f"{scope['method']} is not allowed"), JSON
        if not await self.authorized(namespace, job, _headers(scope), caller):
            return 401, status_body(401, "Unauthorized", "a job's PE token is required"), JSON
        body = await _body(receive)
        try:
            state = orjson.loads(body or b"")
        except orjson.JSONDecodeError:
            state = None
        if state not in STATES:
            return 400, status_body(400, "BadRequest", f"connectivity must be one of {', '.join(STATES)} "
                                                       "as a JSON string"), JSON
        launch = None if self.pe_launch is None else self.pe_launch(namespace, job, route.pe)
        if self.pe_launch is not None and launch is None:
            return 404, status_body(404, "NotFound", f"job {namespace}/{job} has no PE {route.pe}"), JSON
        self.connectivity.setdefault((namespace, job), {})[str(route.pe)] = {
            "connectivity": state, "at": time.time(), "launch": launch}
        self.on_report((namespace, job))
        return 204, b"", JSON

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await nothing_to_start(receive, send)
            return
        if scope["type"] != "http":
            return
        code, body, ctype = await self.answer(scope, receive)
        await send({"type": "http.response.start", "status": code,
                    "headers": [(b"content-type", ctype), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def answer(self, scope: dict, receive: Any = None) -> tuple[int, bytes, bytes]:
        """Routing and the token check read one normalised path (common.http1.routing.normalise:
        `//api/state/...` is `/api/state/...`, a `.` or `..` segment is a 400), parsed once
        (parse_path)."""
        path = normalise(scope["path"])
        if path is None:
            return 400, status_body(400, "BadRequest", "a '.' or '..' path segment is not allowed"), JSON
        scope = {**scope, "path": path}
        route = nameservice.parse(path) or parse_path(path)
        if isinstance(route, nameservice.Refused):
            return route.code, status_body(route.code, route.reason, route.message), JSON
        if isinstance(route, tuple):
            return route[0], status_body(route[0], route[1], route[2]), JSON
        peer = _peer(scope)
        caller = self.job_at(peer) if peer else None     # looked up once per request
        if isinstance(route, nameservice.Route):
            got = await self.names.answer(route, scope, receive, caller)
            if isinstance(got, nameservice.Refused):
                return got.code, status_body(got.code, got.reason, got.message), JSON
            return got
        if route.kind == "state":
            return await self.state(_runtime_form(route, caller), scope, receive, caller)
        if scope["method"] not in ("GET", "HEAD"):
            return 405, status_body(405, "MethodNotAllowed", f"{scope['method']} is not allowed"), JSON
        namespace, job = route.namespace, route.job
        if not await self.authorized(namespace, job, _headers(scope), caller):
            return 401, status_body(401, "Unauthorized", "a job's PE token is required (Authorization: "
                                                          "Bearer, from /etc/config/token/token)"), JSON
        try:
            data = await self.bundle(namespace, job)
        except StreamsError as exc:
            return 502, status_body(502, "BundleUnavailable", str(exc)), JSON
        if data is None:
            return 404, status_body(404, "NotFound", f"job {namespace}/{job} is gone"), JSON
        return 200, data, b"application/octet-stream"


def _runtime_form(route: "Route", caller: tuple[str, str] | None) -> "Route":
    """OpenStreams' `/api/state/job/JOB/...` from one of JOB's PE pods: that pod's namespace."""
    if route.namespace != RUNTIME_NAMESPACE_SEGMENT or caller is None or caller[1] != route.job:
        return route
    return dataclasses.replace(route, namespace=caller[0])


RUNTIME_NAMESPACE_SEGMENT = nameservice.RUNTIME_NAMESPACE_SEGMENT
"""What OpenStreams' runtime puts where our paths name the namespace (`/api/state/job/JOB/...`)."""


@dataclasses.dataclass(frozen=True)
class Route:
    """A request path, parsed once: what every later step (token, bundle, report) acts on."""

    kind: str                   # "bundle" or "state"
    namespace: str
    job: str
    pe: int | None = None       # state: a PE's report (PUT); None: the job's reports (GET)


def parse_path(path: str) -> Route | tuple[int, str, str]:
    """The route of a (decoded) request path, or (code, reason, message) refusing it. Namespace
    and job must be DNS-1123 names (label, subdomain): only such names go into an API path, so a
    `?`, `#`, `/`, `%` or `..` smuggled into a segment never reaches one (review N12)."""
    head, _, rest = path.removeprefix("/").partition("/")
    second, _, rest = rest.partition("/")
    parts, prefix = rest.split("/"), f"/{head}/{second}"
    if prefix == peobjects.BUNDLE_PATH and len(parts) == 2:
        kind, pe = "bundle", None
    elif prefix == STATE_PATH and len(parts) == 3 and parts[2] == "connectivity":
        kind, pe = "state", None
    elif (prefix == STATE_PATH and len(parts) == 5 and parts[2] == "pe"
          and parts[4] == "connectivity" and parts[3].isascii() and parts[3].isdigit()):
        kind, pe = "state", int(parts[3])
    else:
        return 404, "NotFound", f"no such path {path!r}"
    namespace, job = parts[0], parts[1]
    if not names.is_label(namespace) or not names.is_subdomain(job):
        return 400, "BadRequest", "the namespace must be a DNS-1123 label and the job a DNS-1123 subdomain"
    return Route(kind, namespace, job, pe)


def _peer(scope: dict) -> str:
    """The caller's address (hypercorn's `client`; "" when the server does not know it)."""
    client = scope.get("client") or ("",)
    return str(client[0] or "")


def _headers(scope: dict) -> dict[bytes, bytes]:
    return {k.lower(): v for k, v in scope["headers"]}


STATE_PATH = "/api/state"
STATES = ("Full", "Partial", "None")
JSON = b"application/json"


async def _body(receive: Any, limit: int = 1024) -> bytes | None:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if len(body) > limit:
            return None
        if not message.get("more_body"):
            return body




async def serve(server: BundleServer, bind: str, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve until cancelled; `started` with (host, port) it listens on."""
    config = Config()
    config.bind = [bind]
    logsetup.hypercorn_loggers(config)
    config.include_server_header = False
    config.graceful_timeout = 1.0

    async def started(task_status=trio.TASK_STATUS_IGNORED) -> None:
        await hypercorn_serve(server, config, shutdown_trigger=trio.sleep_forever, task_status=task_status)

    async with trio.open_nursery() as nursery:
        binds = await nursery.start(started)
        host, _, port = binds[0].removeprefix("http://").rpartition(":")
        task_status.started((host.strip("[]"), int(port)))


class ApiAddressRefused(Exception):
    """Raised at start when the API server refuses the bundle endpoint's address in Endpoints:
    every job's PEs would fail to fetch their bundle, so the controller does not start."""


async def check_api_address(client: httpx.AsyncClient, namespace: str, address: tuple[str, int]) -> None:
    """Ask the API server whether it takes `address` in the `streams-api` Endpoints, by a dry-run
    create (nothing is written; validation answers before a name clash would). Why at start: a
    real kube-apiserver refuses loopback, link-local and unspecified addresses there (422), so a
    controller bound to 127.0.0.1 (the systemd default) would otherwise fail every Job, one 422
    at a time; sim-cluster accepts them, which is what `ykshm run` uses. Any other answer
    (403 in a namespace the role may not write, 404) is left to the first job, as before."""
    _, endpoints = peobjects.api_service(namespace, address[1], address[0])
    resp = await client.post(kube.KINDS["Endpoints"].collection(namespace), params={"dryRun": "All"}, json=endpoints)
    if resp.status_code == 422:
        try:
            message = str(resp.json().get("message") or "")
        except ValueError:
            message = resp.text[:300]
        raise ApiAddressRefused(f"the API server refuses {address[0]} in the {peobjects.API_SERVICE} Endpoints "
                                f"PEs fetch their bundle through (422: {message}); bind an address pods can "
                                "reach (the host's or the pod's IP, not loopback or 0.0.0.0)")


async def ensure_api_service(client: httpx.AsyncClient, namespace: str, address: tuple[str, int],
                             repository_port: int | None = None) -> None:
    """`streams-api` in `namespace` points at `address` (and the repository's port, if any):
    created when missing (the first job of a namespace, or a user deleted it: the controller calls
    this every 10 s), its ports or Endpoints replaced when they differ (the controller came back on
    another port, a user removed one). Read first, so the periodic call is two GETs when all is well."""
    service, endpoints = peobjects.api_service(namespace, address[1], address[0], repository_port)
    have = await kube.get(client, "Service", namespace, peobjects.API_SERVICE)
    if have is None:
        await kube.create(client, service)
    elif peobjects.port_keys(have["spec"].get("ports")) != peobjects.port_keys(service["spec"]["ports"]):
        await kube.replace(client, {**have, "spec": {**have["spec"], "ports": service["spec"]["ports"]}})
    have = await kube.get(client, "Endpoints", namespace, peobjects.API_SERVICE)
    if have is None:
        await kube.create(client, endpoints)
    elif have.get("subsets") != endpoints["subsets"]:
        await kube.replace(client, {**have, "subsets": endpoints["subsets"]})
