"""A small router in starlette's shape: routes that know how to match, first full match wins.

A route is a path template (`/ws/v1/partition/{partition}/usage/user/{user}`), the methods it
accepts and the handler. Matching is done on the raw (still percent-encoded) path split at "/", so
a `%2F` inside a user name stays inside that segment; each parameter is percent-decoded on its own.
A path that matches a route but not its method is a PARTIAL match: if no later route matches fully,
the answer is 405 with an `Allow` header (starlette `routing.py`); no match at all is 404.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

from .errors import BadRequest, MethodNotAllowed, NotFound

Handler = Callable[..., Awaitable[None]]


@dataclasses.dataclass(frozen=True, slots=True)
class Route:
    """One path template, its methods and its handler; `name` labels its metrics."""

    path: str
    handler: Handler
    methods: tuple[str, ...] = ("GET", "HEAD")
    name: str = ""
    cors: bool = True
    """Whether answers carry YuniKorn's CORS headers (web.responses); not on metrics or the UI."""
    max_body: int = 65536
    """Largest request body accepted (413 above it); only validate-conf reads one."""
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

    def match_path(self, segments: list[str]) -> dict[str, str] | None:
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
                raise BadRequest(f"invalid percent-encoding in path parameter {key}") from None
        return params


class Router:
    """An ordered list of routes; `resolve` returns (route, params) or raises 404 / 405."""

    def __init__(self, routes: list[Route]) -> None:
        self.routes = list(routes)

    def allowed(self, raw_path: str) -> list[str]:
        """Every method some route answers at this path (for OPTIONS); empty when none matches."""
        segments = _segments(raw_path)
        methods: list[str] = []
        for route in self.routes:
            if route.match_path(segments) is not None:
                methods.extend(m for m in route.methods if m not in methods)
        return methods

    def resolve(self, method: str, raw_path: str) -> tuple[Route, dict[str, Any]]:
        path = _trimmed(raw_path)
        segments = _segments(raw_path)
        allowed: list[str] = []
        for route in self.routes:
            params = route.match_path(segments)
            if params is None:
                continue
            if method in route.methods:
                return route, params
            allowed.extend(m for m in route.methods if m not in allowed)
        if allowed:
            raise MethodNotAllowed(f"Method {method} is not allowed for {path}", allowed)
        raise NotFound(f"No endpoint at {path}")


def _trimmed(raw_path: str) -> str:
    return raw_path.rstrip("/") if raw_path != "/" else raw_path


def _segments(raw_path: str) -> list[str]:
    return _trimmed(raw_path).strip("/").split("/")
