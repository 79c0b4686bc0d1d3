"""What every verb handler of the REST surface shares: the request in, the JSON answer out.

Query parameters (`truthy`, `int_param`), the body decoded as JSON, YAML or protobuf as its
Content-Type says, label and field selectors, the stored object as the resource shows it
(events.k8s.io Events are stored as core/v1 ones), a 404 for a missing object and kube's 405.
Pure functions over a `Request`: the handlers in `reads`, `writes`, `subresources` and `api`
call them, so each answer is worded the same whichever path reached it.
"""

from __future__ import annotations

from typing import Any

import orjson
import yaml

from . import eventconv, protobuf
from .errors import BadRequest, MethodNotAllowed, NotFound
from .httpserver import Request, Response
from .resources import NEW_EVENTS, Resource
from .selectors import Matcher, parse_field_selector, parse_label_selector
from .store import Store

Obj = dict[str, Any]
JSON = "application/json"


def json_response(code: int, body: Any) -> Response:
    return Response(code, orjson.dumps(body), JSON)


def not_allowed() -> MethodNotAllowed:
    """The 405 for a verb the resource (or path) does not serve, in the apiserver's words."""
    return MethodNotAllowed("the server does not allow this method on the requested resource")


def truthy(value: str) -> bool:
    return value.lower() in ("1", "true", "yes")


def int_param(req: Request, name: str, minimum: int = 0) -> int | None:
    raw = req.param(name)
    if raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"invalid value for {name}: {raw!r} is not an integer") from None
    if value < minimum:
        raise BadRequest(f"invalid value for {name}: {raw!r} must be >= {minimum}")
    return value


def decode_body(req: Request, res: Resource) -> Any:
    """The request body as data (400 when it is empty or not JSON/YAML/protobuf)."""
    if not req.body.strip():
        raise BadRequest(f"the object provided is unrecognized (must be of type {res.kind}): "
                         "couldn't get version/kind; json parse error: unexpected end of JSON input")
    ctype = req.header("content-type").split(";", 1)[0].strip().lower()
    if ctype == protobuf.MEDIA:
        return protobuf.decode(req.body)
    try:
        if ctype in ("application/yaml", "application/x-yaml", "text/yaml"):
            return yaml.safe_load(req.body)
        return orjson.loads(req.body)
    except (orjson.JSONDecodeError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the object provided is unrecognized (must be of type {res.kind}): "
                         f"couldn't get version/kind; json parse error: {exc}") from None


def out(res: Resource, obj: Obj) -> Obj:
    """A stored object as `res` shows it: events.k8s.io/v1 for the new Events API."""
    return eventconv.to_new(obj) if res is NEW_EVENTS else obj


def selectors(req: Request, res: Resource) -> tuple[Matcher | None, Matcher | None]:
    """`labelSelector` and `fieldSelector` as matchers (the new Events' fields on the stored form)."""
    label = parse_label_selector(req.param("labelSelector"))
    fields = parse_field_selector(req.param("fieldSelector"), res.field_labels, res.kind)
    if fields is not None and res is NEW_EVENTS:
        inner = fields
        fields = lambda obj: inner(eventconv.to_new(obj))  # noqa: E731
    return label, fields


def must_get(store: Store, res: Resource, ns: str, name: str) -> Obj:
    """The stored object, or the 404 naming it."""
    obj = store.get(res.bucket, ns, name)
    if obj is None:
        raise NotFound.object(res.name, name, res.group)
    return obj
