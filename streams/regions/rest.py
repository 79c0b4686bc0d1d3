"""The operator's REST API (an ASGI app) and its /metrics, on the listener (listener.py), which
answers the PEs' hot requests (HOT) itself through `RegionApi.call` and hands the rest to
hypercorn's trio worker; `serve(direct=False)` puts hypercorn in front of every request.

Base path `/api/consistentregion`, the routes and bodies the real Streams PE runtime uses
(OpenStreams ConsistentRegionService, K8SPlatform.cpp):

    GET /pe/{peId}                                   {"<region>": {type, message}, ...}; 404 if none
    GET /pe/{peId}/region/{r}                        {type, message}; 404 if none
    GET /region/{r}/state                            "PROCESSING" (a JSON string)
    GET /region/{r}/lastcompletedseqid|trigger|period|draintimeout|resettimeout|
        maxconsecutiveresetattempts                  the value as JSON
    PUT /region/{r}/pe/{pe}/checkpoint               body: the bare sequence id as text, e.g. `3`
    PUT /region/{r}/pe/{pe}/blockingcheckpoint       same
    PUT /region/{r}/pe/{pe}/reset                    {"progress": {"seqId": "N", "resetAttempt": "M"}}
    PUT /region/{r}/drain                            {"request": {"seqId": "N", "operator": "name"}}
    PUT /region/{r}/reset                            {"request": {"force": "true"|"false"}}
    GET /metrics                                     Prometheus text (metrics.py), outside the base

Values in bodies are strings as the PE runtime sends them; JSON numbers (and booleans for force)
are accepted too. A PUT answers 204 (JAX-RS `void`, as OpenStreams) once the region has taken the
report and its new status is visible (operator.py), so a 2xx means "recorded". Refusals are
answered with the status of the error (errors.py) and the JSON body
`{"status_code", "message", "description", "reason", ...context}`: 400 a malformed body or id
(OpenStreams: a 500 from IllegalArgumentException), 404 an unknown route, region, PE or operator,
405 a wrong method, 409 a report that does not fit the round (OpenStreams: a dead state machine),
413 a body over 64 KiB. Any other exception is logged and answered 500 without details.

Authentication: given the job's token (`serve(token=...)`, what `ykshm cr-operator` reads from
`STREAMS_JOB_TOKEN`, the job's Secret `JOB-token` that PE pods mount; or a caller whose address is
one of the job's own PE pods, `pe_peer`: OpenStreams' runtime sends none), every request under the base
needs `Authorization: Bearer TOKEN`, else 401 (`reason` unauthorized) before any route or body is
looked at; /metrics stays open. (OpenStreams' operator has none: any pod could reset a region.)
"""

from __future__ import annotations

import dataclasses
import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve

from common.http1.body import BodyErrors, read_body
from common import logsetup
from common.http1.lifespan import nothing_to_start
from common.http1.limits import Limits
from common.http1.routing import Route, RouteErrors, Router

from . import metrics as metrics_mod
from .errors import InvalidRequest, NotFound, RegionError
from .vocabulary import Checkpoint, DrainRequest, ResetDone, ResetRequest
from .operator import RegionOperator

log = logging.getLogger("ykshm.cr-operator")

BASE = "/api/consistentregion"
MAX_BODY = 65536
JSON = b"application/json"


class MethodNotAllowed(RegionError):
    """The path exists, the method does not; answered with `Allow` (context `allow`)."""

    status = 405
    reason = "methodNotAllowed"


class RequestTimeout(RegionError):
    """A request body not whole within the body deadline (a trickling client)."""

    status = 408
    reason = "requestTimeout"


class PayloadTooLarge(RegionError):
    """A request body over MAX_BODY (no report needs more than a few bytes)."""

    status = 413
    reason = "payloadTooLarge"


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes = b""
    content_type: bytes = JSON
    headers: tuple[tuple[bytes, bytes], ...] = ()

    def response_headers(self) -> list[tuple[bytes, bytes]]:
        """The headers the app sends (hypercorn, or the listener, adds `date` after them)."""
        headers = [] if self.status == 204 else [
            (b"content-type", self.content_type), (b"content-length", b"%d" % len(self.body))]
        headers.extend(self.headers)
        return headers


Handler = Callable[["RegionApi", dict, bytes], Awaitable[Answer]]


LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1


def _int(name: str, value: Any) -> int:
    """An id or sequence number: an integer, or a string holding one, within a Java long (as
    Long.parseLong takes it)."""
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str):
        text = value.strip()
        digits = text[1:] if text[:1] == "-" else text
        if digits.isascii() and digits.isdigit() and len(digits) <= 20:
            number = int(text)
    if number is None:
        raise InvalidRequest(f"{name} must be an integer, not {_shown(value)}", field=name)
    if not LONG_MIN <= number <= LONG_MAX:
        raise InvalidRequest(f"{name} is out of range: {number}", field=name)
    return number


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 64 else text[:61] + "..."


def _json_object(body: bytes, key: str) -> dict:
    """`body[key]` of a JSON object body; names what is missing or malformed."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise InvalidRequest(f"the body must be a JSON object with a {key!r} object",
                             field=key) from None
    if not isinstance(doc, dict) or not isinstance(doc.get(key), dict):
        raise InvalidRequest(f"the body must be a JSON object with a {key!r} object", field=key)
    return doc[key]


def _required(data: dict, key: str, prefix: str) -> Any:
    if key not in data or data[key] is None:
        raise InvalidRequest(f"{prefix}.{key} is missing", field=f"{prefix}.{key}")
    return data[key]


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise InvalidRequest(f"{name} must be true or false, not {value!r}", field=name)


def _bare_seq(body: bytes) -> int:
    try:
        text = body.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise InvalidRequest("the body must be the sequence id as text", field="seqId") from None
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    return _int("seqId", text)


def _json(value: Any) -> Answer:
    return Answer(200, orjson.dumps(value))


# -- handlers ---------------------------------------------------------------------------------------

async def _pe_notifications(api: "RegionApi", p: dict, body: bytes) -> Answer:
    pe = _int("peId", p["peId"])
    found = api.operator.board.for_pe(pe)
    if found is None:
        raise NotFound(f"no notification for PE {pe}", pe=pe)
    return _json({str(r): n.as_json() for r, n in sorted(found.items())})


async def _pe_region_notification(api: "RegionApi", p: dict, body: bytes) -> Answer:
    pe, region = _int("peId", p["peId"]), _int("regionId", p["regionId"])
    found = api.operator.board.get(pe, region)
    if found is None:
        raise NotFound(f"no notification for PE {pe} in region {region}", pe=pe, region=region)
    return _json(found.as_json())


_READ_ONLY = {
    "state": lambda r: r.state.name,
    "lastcompletedseqid": lambda r: r.last_completed_seq,
    "trigger": lambda r: r.spec.trigger,
    "period": lambda r: float(r.spec.period),
    "draintimeout": lambda r: float(r.spec.drain_timeout),
    "resettimeout": lambda r: float(r.spec.reset_timeout),
    "maxconsecutiveresetattempts": lambda r: r.spec.max_attempts,
}


def _region_value(field: str) -> Handler:
    getter = _READ_ONLY[field]

    async def handler(api: "RegionApi", p: dict, body: bytes) -> Answer:
        return _json(getter(api.operator.region(_int("regionId", p["regionId"]))))

    return handler


async def _submit(api: "RegionApi", region: str, event) -> Answer:
    await api.operator.submit(_int("regionId", region), event)
    return Answer(204)


async def _checkpoint(api: "RegionApi", p: dict, body: bytes) -> Answer:
    event = Checkpoint(_int("peId", p["peId"]), _bare_seq(body), blocking=False)
    return await _submit(api, p["regionId"], event)


async def _blocking_checkpoint(api: "RegionApi", p: dict, body: bytes) -> Answer:
    event = Checkpoint(_int("peId", p["peId"]), _bare_seq(body), blocking=True)
    return await _submit(api, p["regionId"], event)


async def _pe_reset(api: "RegionApi", p: dict, body: bytes) -> Answer:
    progress = _json_object(body, "progress")
    seq = _int("progress.seqId", _required(progress, "seqId", "progress"))
    attempt = _int("progress.resetAttempt", _required(progress, "resetAttempt", "progress"))
    return await _submit(api, p["regionId"], ResetDone(_int("peId", p["peId"]), seq, attempt))


async def _drain(api: "RegionApi", p: dict, body: bytes) -> Answer:
    request = _json_object(body, "request")
    seq = _int("request.seqId", _required(request, "seqId", "request"))
    operator = _required(request, "operator", "request")
    if not isinstance(operator, str) or not operator:
        raise InvalidRequest(f"request.operator must be an operator name, not {operator!r}",
                             field="request.operator")
    return await _submit(api, p["regionId"], DrainRequest(seq, operator))


async def _region_reset(api: "RegionApi", p: dict, body: bytes) -> Answer:
    request = _json_object(body, "request")
    force = _bool("request.force", request.get("force", False))
    return await _submit(api, p["regionId"], ResetRequest(force))


async def _metrics(api: "RegionApi", p: dict, body: bytes) -> Answer:
    return Answer(200, api.operator.metrics.render(), metrics_mod.CONTENT_TYPE.encode("ascii"))


ROUTE_ERRORS = RouteErrors(
    not_found=lambda path: NotFound(f"no endpoint at {path}"),
    not_allowed=lambda method, path, allow: MethodNotAllowed(
        f"method {method} is not allowed for {path}", allow=allow),
    bad_parameter=lambda key: InvalidRequest(f"invalid percent-encoding in {key}", field=key),
    bad_path=lambda path: InvalidRequest("a '.' or '..' path segment is not allowed", field="path"))

BODY_ERRORS = BodyErrors(
    too_large=lambda limit: PayloadTooLarge(f"request body larger than {limit} bytes"),
    too_slow=lambda seconds: RequestTimeout(f"request body not received within {seconds:g} s"),
    gone=lambda: _Disconnected())


def _route(method: str, path: str, handler: Handler) -> Route:
    return Route(path, handler, ("GET", "HEAD") if method == "GET" else (method,),
                 max_body=MAX_BODY)


ROUTER = Router([
    _route("GET", BASE + "/pe/{peId}", _pe_notifications),
    _route("GET", BASE + "/pe/{peId}/region/{regionId}", _pe_region_notification),
    *[_route("GET", f"{BASE}/region/{{regionId}}/{field}", _region_value(field))
      for field in _READ_ONLY],
    _route("PUT", BASE + "/region/{regionId}/pe/{peId}/checkpoint", _checkpoint),
    _route("PUT", BASE + "/region/{regionId}/pe/{peId}/blockingcheckpoint", _blocking_checkpoint),
    _route("PUT", BASE + "/region/{regionId}/pe/{peId}/reset", _pe_reset),
    _route("PUT", BASE + "/region/{regionId}/drain", _drain),
    _route("PUT", BASE + "/region/{regionId}/reset", _region_reset),
    _route("GET", "/metrics", _metrics),
], ROUTE_ERRORS)
"""The first route whose template and method match wins (common.http1.routing)."""

OPEN = frozenset({_metrics})
"""The routes answered without the job's token (RegionApi.authorized): metrics only."""

HOT = frozenset({_checkpoint, _blocking_checkpoint, _pe_reset, _pe_notifications,
                 _pe_region_notification})
"""What every PE sends in every round: answered by the listener itself (listener.py), whose
per-request cost is a fraction of hypercorn's; the rest of the API goes through hypercorn."""


def resolve(method: str, raw_path: str) -> tuple[Handler, dict[str, str]]:
    """The handler and path parameters, or NotFound / MethodNotAllowed (naming what is allowed)."""
    route, params = ROUTER.resolve(method, raw_path)
    return route.handler, params


def hot_route(method: str, raw_path: str) -> tuple[Handler, dict[str, str]] | None:
    """The handler and parameters of a request the listener answers itself (HOT), else None
    (another route, a HEAD, a percent-encoded path, or no route at all: hypercorn and the ASGI
    app answer it)."""
    if method not in ("GET", "PUT") or "%" in raw_path:
        return None
    try:
        handler, params = resolve(method, raw_path)
    except RegionError:
        return None
    return (handler, params) if handler in HOT else None


class RegionApi:
    """The ASGI application of one operator."""

    def __init__(self, operator: RegionOperator, body_timeout: float = Limits().body_timeout,
                 token: bytes | None = None, pe_peer: Callable[[str], bool] = lambda _ip: False) -> None:
        self.operator = operator
        self.body_timeout = body_timeout
        self.token = token
        self.pe_peer = pe_peer
        """A caller's address -> whether it is one of the job's own PE pods (streams.pepeers)."""

    def authorized(self, handler: Handler, headers, peer: str = "") -> bool:
        """With a job token set, every route but /metrics (open for scrapers) needs `Authorization:
        Bearer TOKEN` (the PEs' Secret), unless the caller's address is one of the job's own PE
        pods (OpenStreams' runtime sends no token). Decided by the route the router resolved,
        never by the path's text: `//api/...` once resolved to a handler while a prefix test let
        it through."""
        if self.token is None or handler in OPEN or (peer and self.pe_peer(peer)):
            return True
        for name, value in headers:
            if name.lower() == b"authorization":
                scheme, _, presented = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(presented.strip(), self.token)
        return False

    async def __call__(self, scope: dict, receive, send) -> None:
        if scope["type"] == "lifespan":
            await nothing_to_start(receive, send)
        elif scope["type"] == "http":
            answer = await self._answer(scope, receive)
            await send({"type": "http.response.start", "status": answer.status,
                        "headers": answer.response_headers()})
            await send({"type": "http.response.body", "body": answer.body, "more_body": False})

    async def _answer(self, scope: dict, receive) -> Answer:
        method, path = scope["method"], scope["path"]
        raw_path = scope.get("raw_path") or path.encode("utf-8", "surrogateescape")
        try:
            handler, params = resolve(method, raw_path.decode("latin-1"))
            body = await read_body(receive, scope.get("headers", ()), limit=MAX_BODY,
                                   timeout=self.body_timeout, errors=BODY_ERRORS)
        except RegionError as exc:
            return _refusal(exc)
        except Exception:
            log.exception("cr-operator: bug while reading %s %s", method, path)
            return INTERNAL_ERROR
        client = scope.get("client") or ("",)
        return await self.call(handler, params, body, method, path, scope.get("headers", ()),
                               str(client[0] or ""))

    async def call(self, handler: Handler, params: dict, body: bytes, method: str,
                   path: str, headers=(), peer: str = "") -> Answer:
        """A resolved request's answer: 401 without the job's token (from elsewhere than its PE
        pods), else the handler's, its refusal's, or a 500 for a bug (the one place both the ASGI
        app and the listener's direct path answer through)."""
        if not self.authorized(handler, headers, peer):
            return UNAUTHORIZED
        try:
            return await handler(self, params, body)
        except RegionError as exc:
            return _refusal(exc)
        except Exception:
            log.exception("cr-operator: bug while answering %s %s", method, path)
            return INTERNAL_ERROR


UNAUTHORIZED = Answer(401, orjson.dumps({
    "status_code": 401, "message": "the job's PE token is required (Authorization: Bearer)",
    "description": "unauthorized", "reason": "unauthorized"}), headers=((b"www-authenticate", b"Bearer"),))

INTERNAL_ERROR = Answer(500, orjson.dumps({
    "status_code": 500, "message": "internal server error",
    "description": "internal server error", "reason": "internal"}))


def _refusal(exc: RegionError) -> Answer:
    allow = exc.context.get("allow") if isinstance(exc, MethodNotAllowed) else None
    headers = ((b"allow", ", ".join(allow).encode("ascii")),) if allow else ()
    return Answer(exc.status, _error_body(exc), headers=headers)


def _error_body(exc: RegionError) -> bytes:
    try:
        return orjson.dumps(exc.as_json())
    except TypeError:  # a context value JSON cannot carry: the message still says it all
        return orjson.dumps({"status_code": exc.status, "message": exc.message,
                             "description": exc.message, "reason": exc.reason})


class _Disconnected(RegionError):
    status = 400
    reason = "disconnected"

    def __init__(self) -> None:
        super().__init__("the client went away before sending its body")


def hypercorn_config(bind: str, idle_timeout: float = 30.0) -> Config:
    """hypercorn settings of the operator's API: one trio worker, no access log; `idle_timeout`
    is the keep-alive timeout (the direct path's too)."""
    config = Config()
    config.bind = bind.split(",")          # "HOST:PORT[,HOST:PORT]": the API and metrics ports
    config.worker_class = "trio"
    config.graceful_timeout = 1.0
    config.keep_alive_timeout = idle_timeout
    config.include_server_header = False
    return logsetup.hypercorn_loggers(config)


async def serve(operator: RegionOperator, bind: str = "127.0.0.1:0", *, direct: bool = True,
                limits: Limits = Limits(), idle_timeout: float = 30.0, token: bytes | None = None,
                pe_peer: Callable[[str], bool] = lambda _ip: False,
                task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run the operator and its API until cancelled; `started` with the URL it listens on
    (e.g. "http://127.0.0.1:41234"), once restart statuses are written and the socket listens.

    `direct` (the default): the listener (listener.py) answers the hot PE requests itself and
    hands everything else to hypercorn; False: hypercorn serves every request (the reference the
    tests compare the direct path with). `limits`: connections per process and per client
    address, head and body deadlines (common.http1.limits); `idle_timeout`: the keep-alive
    timeout (`ykshm cr-operator` flags, common.http1.flags)."""
    from .listener import Listener, serve_api  # listener builds on this module

    async with trio.open_nursery() as nursery:
        await nursery.start(operator.run)
        api = RegionApi(operator, limits.body_timeout, token, pe_peer)
        config = hypercorn_config(bind, idle_timeout)
        if direct:
            binds = await nursery.start(serve_api, Listener(api, config, limits))
        else:
            binds = await nursery.start(lambda task_status: hypercorn_serve(
                api, config, shutdown_trigger=trio.sleep_forever, task_status=task_status))
        task_status.started(binds[0])
