"""One router for our ASGI apps (the web's REST API, the cr-operator's): starlette's shape.

A route is a path template (`/ws/v1/partition/{partition}/usage/user/{user}`), the methods it
accepts and the handler. Matching is done on the raw (still percent-encoded) path split at "/", so
a `%2F` inside a user name stays inside that segment; each parameter is percent-decoded on its own.
A path that matches a route but not its method is a PARTIAL match: if no later route matches fully,
the answer is 405 with the methods allowed (starlette `routing.py`); no match at all is 404. Each
app says how those refusals look (`RouteErrors`): the router raises the app's own errors.

One path, for routing and for every check (`normalise`): a run of slashes counts as one and a
trailing slash is dropped, so `//api/x/`, `/api//x` and `/api/x` are the same route, and a `.` or
`..` segment, plain or percent-encoded (`%2E`, `.%2e`), is a 400: we never resolve one, and a
client that sends one is either broken or probing. Authorization is a property of the resolved
route (the handler), never a prefix test of the path the client sent: a prefix test and a router
that read the same bytes differently is how `//api/consistentregion/...` once skipped the
cr-operator's token (security review 2, N1).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote


@dataclasses.dataclass(frozen=True, slots=True)
class RouteErrors:
    """The exceptions an app answers a path it has no route for: each takes the words to say."""

    not_found: Callable[[str], Exception]
    """(path) -> the 404."""
    not_allowed: Callable[[str, str, list[str]], Exception]
    """(method, path, allowed methods) -> the 405."""
    bad_parameter: Callable[[str], Exception]
    """(parameter name) -> the 400 for a parameter whose percent-encoding is not UTF-8."""
    bad_path: Callable[[str], Exception]
    """(path) -> the 400 for a path with a `.` or `..` segment (`normalise`)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Route:
    """One path template, its methods and its handler; `name` labels its metrics, `max_body`
    is the largest request body the route takes (413 above it)."""

    path: str
    handler: Any
    methods: tuple[str, ...] = ("GET", "HEAD")
    name: str = ""
    max_body: int = 65536
    cors: bool = True
    """Whether answers carry the app's CORS headers (the web: not on metrics or the UI)."""
    _parts: tuple[tuple[bool, str], ...] = ()

    def __post_init__(self) -> None:
        parts = []
        for segment in self.path.strip("/").split("/"):
            if segment.startswith("{") and segment.endswith("}"):
                parts.append((True, segment[1:-1]))
            else:
                parts.append((False, segment))
        object.__setattr__(self, "_parts", tuple(parts))
        if not self.name:
            object.__setattr__(self, "name", self.path)

    def match_path(self, segments: list[str], errors: RouteErrors) -> dict[str, str] | None:
        """The path parameters (percent-decoded) if the segments fit this template, else None."""
        if len(segments) != len(self._parts):
            return None
        params: dict[str, str] = {}
        for (is_param, text), segment in zip(self._parts, segments):
            if is_param:
                if segment == "":
                    return None
                params[text] = segment
            elif segment != text:
                return None
        for key, raw in params.items():
            try:
                params[key] = unquote(raw, errors="strict")
            except UnicodeDecodeError:
                raise errors.bad_parameter(key) from None
        return params


class Router:
    """An ordered list of routes; `resolve` returns (route, params) or raises 404 / 405."""

    def __init__(self, routes: list[Route], errors: RouteErrors) -> None:
        self.routes = list(routes)
        self.errors = errors

    def allowed(self, raw_path: str) -> list[str]:
        """Every method some route answers at this path (for OPTIONS); empty when none matches."""
        segments = self.segments(raw_path)
        methods: list[str] = []
        for route in self.routes:
            if route.match_path(segments, self.errors) is not None:
                methods.extend(m for m in route.methods if m not in methods)
        return methods

    def segments(self, raw_path: str) -> list[str]:
        """The normalised path's segments (`normalise`), or the app's 400."""
        path = normalise(raw_path)
        if path is None:
            raise self.errors.bad_path(raw_path)
        return path.strip("/").split("/")

    def resolve(self, method: str, raw_path: str) -> tuple[Route, dict[str, Any]]:
        """The route and its parameters, decided on the normalised path; 400 / 404 / 405."""
        segments = self.segments(raw_path)
        allowed: list[str] = []
        for route in self.routes:
            params = route.match_path(segments, self.errors)
            if params is None:
                continue
            if method in route.methods:
                return route, params
            allowed.extend(m for m in route.methods if m not in allowed)
        if allowed:
            raise self.errors.not_allowed(method, "/" + "/".join(segments), allowed)
        raise self.errors.not_found("/" + "/".join(segments))


_SLASHES = re.compile(r"/{2,}")
_DOT_SEGMENT = re.compile(r"(?:\.|%2e){1,2}", re.IGNORECASE)


def normalise(raw_path: str) -> str | None:
    """The one form of a (still percent-encoded) request path that routing and every check read:
    slash runs collapsed, no trailing slash (but `/` itself); None when a segment is `.` or `..`
    in any spelling (plain or `%2E`-encoded), which the caller answers 400."""
    path = _SLASHES.sub("/", raw_path)
    if len(path) > 1:
        path = path.rstrip("/")
    if any(_DOT_SEGMENT.fullmatch(segment) for segment in path.split("/")):
        return None
    return path
