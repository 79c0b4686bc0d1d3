"""One router for our ASGI apps (the web's REST API, the cr-operator's): starlette's shape.

A route is a path template (`/ws/v1/partition/{partition}/usage/user/{user}`), the methods it
accepts and the handler. Matching is done on the raw (still percent-encoded) path split at "/", so
a `%2F` inside a user name stays inside that segment; each parameter is percent-decoded on its own.
A path that matches a route but not its method is a PARTIAL match: if no later route matches fully,
the answer is 405 with the methods allowed (starlette `routing.py`); no match at all is 404. Each
app says how those refusals look (`RouteErrors`): the router raises the app's own errors.
"""

from __future__ import annotations

import dataclasses
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
        segments = _segments(raw_path)
        methods: list[str] = []
        for route in self.routes:
            if route.match_path(segments, self.errors) is not None:
                methods.extend(m for m in route.methods if m not in methods)
        return methods

    def resolve(self, method: str, raw_path: str) -> tuple[Route, dict[str, Any]]:
        segments = _segments(raw_path)
        allowed: list[str] = []
        for route in self.routes:
            params = route.match_path(segments, self.errors)
            if params is None:
                continue
            if method in route.methods:
                return route, params
            allowed.extend(m for m in route.methods if m not in allowed)
        if allowed:
            raise self.errors.not_allowed(method, _trimmed(raw_path), allowed)
        raise self.errors.not_found(_trimmed(raw_path))


def _trimmed(raw_path: str) -> str:
    return raw_path.rstrip("/") if raw_path != "/" else raw_path


def _segments(raw_path: str) -> list[str]:
    return _trimmed(raw_path).strip("/").split("/")
