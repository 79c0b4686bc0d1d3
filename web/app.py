"""The ASGI application of one web worker: routes, guards, and the boundary where errors become JSON.

`App(options)` is a plain ASGI 3 callable. One instance per worker process holds the worker's
handles: the ring and snapshot sources, the ring watcher task (run by the lifespan), the shared
segment (stream slots, metrics) and the router. Handlers are `async def h(app, req, send)`;
they raise `web.errors.HTTPError` for anything but success.

Request flow: target length (414) -> body length (413) -> route (404/405) -> handler. Any
HTTPError becomes the error JSON; any other exception is logged with its traceback and answered
with a 500 error JSON that says nothing about the bug. Once a response has started (a stream) an
error can only end it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

import orjson
import trio

from engine.config import EventSettings

from . import applications, builtin, cluster, events, observe, views
from .errors import (JSON_CONTENT_TYPE, BadRequest, Forbidden, HTTPError, MethodNotAllowed,
                     NotFound, PayloadTooLarge, RequestTimeout, URITooLong, error_body)
from .responses import GZIP_MIN_BYTES, Cors, GzipCache, GzipStream, accepts_gzip
from common.http1.body import BodyErrors, declared_length, read_body
from common.http1.forwarded import TrustedProxies
from common.http1.tls import TlsFiles
from common.http1.limits import Limits
from common.http1.routing import Route, RouteErrors, Router, normalise
from .segment import MetricLayout, WebSegment
from .settings import SettingsInForce, stream_slots
from .budget import SendBudget
from .fanout import ChunkCache
from .hub import Hub
from .sources import RingSource, RingWatcher, SnapshotSource
from .ui import StaticUI, is_ui_path

if TYPE_CHECKING:
    from export.redisauth import RedisAuth

log = logging.getLogger("ykshm.web")

MAX_TARGET = 8192
"""Longest request target (path + query) answered; longer is 414. (hypercorn refuses request
heads over its h11 limit, 64 KiB here, on its own with an empty 400/431.)"""

MAX_BODY = 65536
"""Largest request body accepted by a route that reads none; larger is 413."""

MAX_CONFIG_BODY = cluster.VALIDATE_LIMITS.max_bytes
"""Largest configuration `POST /ws/v1/validate-conf` takes: half a Kubernetes ConfigMap; ~2,500
queues (330 KB) parse in ~0.5 s."""


@dataclasses.dataclass(frozen=True)
class WebOptions:
    """What a worker needs to build its App; picklable (sent to spawned workers)."""

    name: str = "ykshm"
    settings: EventSettings = dataclasses.field(default_factory=EventSettings)
    heartbeat_timeout: float = 3.0
    nice: int = 10
    ui_dir: str = ""
    """A single-page UI build served at `/` (web.ui); "" serves none."""
    source: str = ""
    """"" serves from /dev/shm; a redis:// URL makes the worker a read replica (web/redis_source)."""
    source_instance: str = ""
    """The instance whose Redis keys a replica reads (default: `name`)."""
    source_auth: "RedisAuth | None" = None
    """The replica's Redis password and CA (export.redisauth): pickled to the workers, never in argv."""
    cors_origins: tuple[str, ...] = ("*",)
    """`service.cors.allowedOrigins` (web.responses.Cors)."""
    limits: Limits = Limits()
    """Connections per worker and per peer, head and body deadlines (common.http1.limits)."""
    proxies: TrustedProxies = TrustedProxies()
    """`service.web.trustedProxies`: whose X-Forwarded-For names the client the limits count."""
    tls: TlsFiles | None = None
    """Serve TLS with these files (`--certfile/--keyfile`, `service.web.*`); None: plain HTTP."""
    hypercorn_only: bool = False
    """Every request, event streams included, through hypercorn (`--hypercorn-only`, to compare)."""


class Request:
    """What a handler sees of one request."""

    __slots__ = ("scope", "receive", "params", "query", "client_host", "started", "max_body")

    def __init__(self, scope: dict, receive, params: dict[str, str], max_body: int = MAX_BODY) -> None:
        self.scope = scope
        self.receive = receive
        self.params = params
        self.max_body = max_body
        query: dict[str, str] = {}
        raw = scope.get("query_string", b"")
        if raw:
            for key, value in parse_qsl(raw.decode("latin-1"), keep_blank_values=True, encoding="utf-8", errors="replace"):
                query.setdefault(key, value)
        self.query = query
        client = scope.get("client")
        self.client_host = str(client[0]) if client else "unknown"
        self.started = 0.0

    def mark_started(self) -> None:
        self.started = time.perf_counter()


async def _openapi_yaml(app: "App", req: Request, send) -> None:
    await app.send_body(send, 200, app.openapi_yaml(), b"application/yaml; charset=UTF-8")


async def _openapi_json(app: "App", req: Request, send) -> None:
    await app.send_json(send, 200, app.openapi_json())


ROUTE_ERRORS = RouteErrors(
    not_found=lambda path: NotFound(f"No endpoint at {path}"),
    not_allowed=lambda method, path, allow: MethodNotAllowed(
        f"Method {method} is not allowed for {path}", allow),
    bad_parameter=lambda key: BadRequest(f"invalid percent-encoding in path parameter {key}"),
    bad_path=lambda path: BadRequest("a '.' or '..' path segment is not allowed"))
"""How the web answers a path the router has no route for (YuniKorn's texts)."""

BODY_ERRORS = BodyErrors(
    too_large=lambda limit: PayloadTooLarge(f"Request body larger than {limit} bytes"),
    too_slow=lambda seconds: RequestTimeout(f"Request body not received within {seconds:g} s"),
    gone=lambda: BadRequest("Client closed the request before its body was read"))

ROUTES = [
    Route("/ws/v1/events/batch", events.batch, name="events_batch"),
    Route("/ws/v1/events/stream", events.stream, methods=("GET",), name="events_stream"),
    Route("/ws/v1/clusters", cluster.clusters, name="clusters"),
    Route("/ws/v1/partitions", views.partitions, name="partitions"),
    Route("/ws/v1/partition/{partition}/queues", views.queues, name="queues"),
    Route("/ws/v1/partition/{partition}/queue/{queue}", views.queue, name="queue"),
    Route("/ws/v1/partition/{partition}/queue/{queue}/applications", applications.of_queue,
          name="queue_applications"),
    Route("/ws/v1/partition/{partition}/queue/{queue}/applications/{state}", applications.of_queue,
          name="queue_applications"),
    Route("/ws/v1/partition/{partition}/queue/{queue}/application/{application}", applications.one,
          name="application"),
    Route("/ws/v1/partition/{partition}/applications", views.applications, name="applications"),
    Route("/ws/v1/partition/{partition}/applications/{state}", applications.by_state,
          name="applications_by_state"),
    Route("/ws/v1/partition/{partition}/application/{application}", applications.one, name="application"),
    Route("/ws/v1/partition/{partition}/nodes", views.nodes, name="nodes"),
    Route("/ws/v1/partition/{partition}/node/{node}", views.node, name="node"),
    Route("/ws/v1/partition/{partition}/placementrules", views.placement_rules, name="placementrules"),
    Route("/ws/v1/scheduler/node-utilizations", cluster.node_utilizations, name="node_utilizations"),
    Route("/ws/v1/history/apps", cluster.app_history, name="history"),
    Route("/ws/v1/history/containers", cluster.container_history, name="history"),
    Route("/ws/v1/config", cluster.config, name="config"),
    Route("/ws/v1/validate-conf", cluster.validate_conf, methods=("POST",), name="validate_conf",
          max_body=MAX_CONFIG_BODY),
    Route("/debug/fullstatedump", cluster.full_state_dump, name="fullstatedump"),
    Route("/ws/v1/fullstatedump", cluster.redirect_state_dump, name="fullstatedump"),
    Route("/ws/v1/partition/{partition}/usage/users", views.users_usage, name="usage_users"),
    Route("/ws/v1/partition/{partition}/usage/user/{user}", views.user_usage, name="usage_user"),
    Route("/ws/v1/partition/{partition}/usage/groups", views.groups_usage, name="usage_groups"),
    Route("/ws/v1/partition/{partition}/usage/group/{group}", views.group_usage, name="usage_group"),
    Route("/ws/v1/scheduler/healthcheck", observe.healthcheck, name="healthcheck"),
    Route("/ws/v1/metrics", observe.metrics, name="metrics", cors=False),
    Route("/ws/v1/openapi.yaml", _openapi_yaml, name="openapi", cors=False),
    Route("/ws/v1/openapi.json", _openapi_json, name="openapi", cors=False),
    Route("/", builtin.index, name="ui", cors=False),   # ykshm's own UI when no --ui-dir (web.builtin)
    Route("/ui/{asset}", builtin.asset, name="ui", cors=False),
]
ROUTE_NAMES = tuple(dict.fromkeys([r.name for r in ROUTES] + ["unmatched"]))


class App:
    """One worker's ASGI application."""

    def __init__(self, options: WebOptions) -> None:
        self.options = options
        self.router = Router(ROUTES, ROUTE_ERRORS)
        if options.source:
            from .redis_source import replica_sources

            self.ring, self.snapshot, self.watcher = replica_sources(
                options.source, options.source_instance or options.name, options.source_auth)
        else:
            self.ring = RingSource(options.name)
            self.snapshot = SnapshotSource(options.name)
            self.watcher = RingWatcher(self.ring)
        self.chunks = ChunkCache()
        self.budget = SendBudget()
        self.hub: Hub | None = None if options.source else Hub(self)
        """The direct stream path's sender (web.hub); a Redis replica streams through ASGI only."""
        self.stopping = trio.Event()
        self.layout = MetricLayout(ROUTE_NAMES)
        self._segment: WebSegment | None = None
        self.metrics = observe.WorkerMetrics(self, self.layout)
        self.metrics_renderer = observe.MetricsRenderer(self, self.layout)
        self._openapi: bytes | None = None
        self._openapi_json: bytes | None = None
        self.gzip = GzipCache()
        self.ui = StaticUI(options.ui_dir) if options.ui_dir else None
        self.builtin_ui = builtin.Assets()
        """ykshm's own UI at / and /ui/* (web.builtin); a --ui-dir build is served in its place."""
        self.cors = Cors(options.cors_origins)
        self.proxies = options.proxies
        self.parse_limiter = trio.CapacityLimiter(1)
        """One configuration parse at a time per worker (web.cluster.validate_conf)."""
        self.validate_slots = trio.CapacityLimiter(cluster.VALIDATE_IN_FLIGHT)
        """validate-conf bodies in flight per worker: taken before a body is read (N11)."""
        self._settings = SettingsInForce(options.settings, self.snapshot)

    @property
    def settings(self) -> EventSettings:
        """The event settings in force (web.settings: the engine's when ConfigMaps configure it)."""
        return self._settings.get()

    # -- shared resources -----------------------------------------------------------------

    @property
    def segment(self) -> WebSegment:
        if self._segment is None:
            seg = WebSegment.open_or_create(self.options.name, stream_slots(self.options.settings))
            seg.claim_region()
            self._segment = seg
        return self._segment

    def openapi_yaml(self) -> bytes:
        if self._openapi is None:
            self._openapi = resources.files("web").joinpath("openapi.yaml").read_bytes()
        return self._openapi

    def openapi_json(self) -> bytes:
        if self._openapi_json is None:
            import yaml

            self._openapi_json = orjson.dumps(yaml.safe_load(self.openapi_yaml()))
        return self._openapi_json

    def open_streams(self) -> list[dict[str, str]]:
        """The event streams open across all workers, one `{"Host"}` each (for the state dump)."""
        _total, hosts = self.segment.open_streams()
        return [{"Host": host} for host, count in sorted(hosts.items()) for _ in range(count)]

    # -- sending ----------------------------------------------------------------------------

    async def send_body(self, send, status: int, body: bytes, content_type: bytes,
                        headers: list[tuple[bytes, bytes]] | None = None) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", content_type),
                    (b"content-length", str(len(body)).encode("ascii")),
                    *(headers or []),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def read_body(self, req: Request) -> bytes:
        """The request's body: at most its route's max_body (413), within the body deadline
        (408)."""
        return await read_body(req.receive, req.scope.get("headers", ()), limit=req.max_body,
                               timeout=self.options.limits.body_timeout, errors=BODY_ERRORS)

    async def send_json(self, send, status: int, body: bytes) -> None:
        await self.send_body(send, status, body, JSON_CONTENT_TYPE)

    async def send_error(self, send, status: int, message: str, headers=None) -> None:
        await self.send_body(send, status, error_body(status, message), JSON_CONTENT_TYPE, headers)

    # -- ASGI -------------------------------------------------------------------------------

    async def __call__(self, scope: dict, receive, send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1003})

    async def _lifespan(self, receive, send) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    try:
                        _ = self.segment
                    except Exception as exc:
                        log.error("web: cannot open the shared segment: %s", exc)
                        await send({"type": "lifespan.startup.failed", "message": str(exc)})
                        return
                    nursery.start_soon(self.watcher.run)
                    if self.hub is not None:
                        nursery.start_soon(self.hub.run)
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    self.stopping.set()
                    nursery.cancel_scope.cancel()
                    await send({"type": "lifespan.shutdown.complete"})
                    return

    async def _http(self, scope: dict, receive, send) -> None:
        t0 = time.perf_counter()
        state = {"started": False, "status": 0, "done": 0.0}
        shaping: dict[str, Any] = {"cors": [], "gzip": False, "stream": None}
        held: list[dict] = []

        async def tracked_send(message: dict) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
                state["status"] = message["status"]
                message = {**message, "headers": [*message.get("headers", ()), *shaping["cors"]]}
                if shaping["gzip"]:
                    held.append(message)  # decided when the body is known
                    return
            elif not message.get("more_body", False):
                state["done"] = time.perf_counter()
            if held:
                start = held.pop()
                if not message.get("more_body", False):
                    start, message = self._maybe_gzip(start, message)
                else:
                    start, shaping["stream"] = self._gzip_stream(start)
                await send(start)
            if shaping["stream"] is not None and message["type"] == "http.response.body":
                last = not message.get("more_body", False)
                message = {**message, "body": shaping["stream"].piece(message.get("body", b""), last)}
            await send(message)

        route_name = "unmatched"
        req: Request | None = None
        try:
            raw_path = scope.get("raw_path") or scope["path"].encode("utf-8", "surrogateescape")
            if len(raw_path) + len(scope.get("query_string", b"")) > MAX_TARGET:
                raise URITooLong(f"Request target longer than {MAX_TARGET} bytes")
            path = raw_path.decode("latin-1")
            if normalise(path) is None:
                raise ROUTE_ERRORS.bad_path(path)
            if self.ui is not None and is_ui_path(normalise(path)):
                route_name = "ui"
                _check_body(scope, MAX_BODY)
                await self._ui(scope, tracked_send)
                return
            if scope["method"] == "OPTIONS":
                await self._options(scope, path, tracked_send)
                return
            route, params, error = self._resolve(scope["method"], path)
            _check_body(scope, route.max_body if route is not None else MAX_BODY)
            if error is not None:
                raise error
            route_name = route.name
            if route.cors:
                shaping["cors"] = self.cors.headers(scope, route.methods)
            refusal = self.cors.refusal(scope)
            if refusal is not None:
                raise Forbidden(refusal)
            shaping["gzip"] = route.name != "events_stream" and accepts_gzip(scope)
            req = Request(scope, receive, params, route.max_body)
            req.client_host = self.proxies.client(req.client_host, scope.get("headers", ()))
            await route.handler(self, req, tracked_send)
        except HTTPError as exc:
            if not state["started"]:
                await self.send_error(tracked_send, exc.status, exc.message, exc.headers)
        except Exception:
            log.exception("web: bug while answering %s %s", scope.get("method"), scope.get("path"))
            if not state["started"]:
                await self.send_error(tracked_send, 500, "Internal server error")
        finally:
            # a stream counts until its headers went out; anything else until its last byte
            end = (req is not None and req.started) or state["done"] or time.perf_counter()
            try:
                self.metrics.request(route_name, state["status"] or 500, end - t0)
            except Exception:  # metrics must never turn an answer into an error
                log.debug("web: metrics update failed", exc_info=True)

    def _resolve(self, method: str, path: str) -> tuple[Route | None, dict, HTTPError | None]:
        """The route, or the 404/405 to answer once the body size was checked (413 comes first)."""
        try:
            route, params = self.router.resolve(method, path)
        except HTTPError as exc:
            return None, {}, exc
        return route, params, None

    def _maybe_gzip(self, start: dict, body_message: dict) -> tuple[dict, dict]:
        """Compress a whole JSON answer of at least GZIP_MIN_BYTES (web.responses)."""
        body = body_message.get("body", b"")
        headers = start["headers"]
        if len(body) < GZIP_MIN_BYTES or (b"content-type", JSON_CONTENT_TYPE) not in headers:
            return start, body_message
        packed = self.gzip.compress(body)
        headers = [(k, v) for k, v in headers if k != b"content-length"]
        headers += [(b"content-length", str(len(packed)).encode("ascii")),
                    (b"content-encoding", b"gzip"), (b"vary", b"Accept-Encoding")]
        return {**start, "headers": headers}, {**body_message, "body": packed}

    def _gzip_stream(self, start: dict) -> tuple[dict, GzipStream | None]:
        """A JSON answer sent in pieces (without Content-Length) is compressed as a stream."""
        headers = start["headers"]
        if (b"content-type", JSON_CONTENT_TYPE) not in headers or any(k == b"content-length" for k, _ in headers):
            return start, None
        headers = [*headers, (b"content-encoding", b"gzip"), (b"vary", b"Accept-Encoding")]
        return {**start, "headers": headers}, GzipStream()

    async def _options(self, scope: dict, path: str, send) -> None:
        """httprouter's default OPTIONS answer: 200 with `Allow`, no CORS headers (but for an
        origin listed in service.cors.allowedOrigins: web.responses.Cors)."""
        methods = self.router.allowed(path)
        if not methods:
            raise NotFound(f"No endpoint at {path}")
        allow = ", ".join(sorted({*methods, "OPTIONS"})).encode("ascii")
        cors = self.cors.preflight_headers(scope, tuple(methods))
        await self.send_body(send, 200, b"", b"text/plain; charset=utf-8", [(b"allow", allow), *cors])

    async def _ui(self, scope: dict, send) -> None:
        if scope["method"] not in ("GET", "HEAD"):
            raise MethodNotAllowed(f"Method {scope['method']} is not allowed for {scope['path']}", ["GET", "HEAD"])
        assert self.ui is not None
        body, content_type = await self.ui.read(scope["path"])
        await self.send_body(send, 200, body, content_type)


def _check_body(scope: dict, limit: int) -> None:
    length = declared_length(scope.get("headers", ()))
    if length is not None and length > limit:
        raise BODY_ERRORS.too_large(limit)


def create_app(options: WebOptions | None = None, **kwargs: Any) -> App:
    """Build a worker's application (`web.app:create_app` for in-process serving in tests)."""
    return App(options or WebOptions(**kwargs))
