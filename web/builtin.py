"""ykshm's own web UI at `/` (static HTML, one vanilla JS module, CSS; package data web/builtin_ui).

Served when no `--ui-dir` is given (a UI build given there, YuniKorn's say, replaces it: web.ui).
Only `GET /` and `GET /ui/<file>` belong to it; an unknown asset is the usual 404 JSON error. No
build step and nothing from the network: the page talks only to this origin's read-only REST
(`/ws/v1/...`) and the event stream. Every answer carries a strict Content-Security-Policy
(`script-src 'self'`, no inline script or style), an ETag (a `If-None-Match` match is a 304) and
`Cache-Control: no-cache`, so a browser revalidates cheaply and never runs a stale module.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import TYPE_CHECKING

from .errors import NotFound

if TYPE_CHECKING:
    from .app import App, Request

TYPES = {".html": b"text/html; charset=utf-8", ".js": b"text/javascript; charset=utf-8",
         ".css": b"text/css; charset=utf-8"}
CSP = (b"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       b"img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = [(b"content-security-policy", CSP), (b"x-content-type-options", b"nosniff"),
           (b"referrer-policy", b"no-referrer"), (b"cache-control", b"no-cache")]


class Assets:
    """The UI's files, read once from the package: name -> (body, content type, ETag)."""

    def __init__(self) -> None:
        self.files: dict[str, tuple[bytes, bytes, bytes]] = {}
        for entry in resources.files("web").joinpath("builtin_ui").iterdir():
            kind = TYPES.get("." + entry.name.rsplit(".", 1)[-1])
            if kind is not None and entry.is_file():
                body = entry.read_bytes()
                tag = b'"' + hashlib.sha256(body).hexdigest()[:32].encode("ascii") + b'"'
                self.files[entry.name] = (body, kind, tag)

    def get(self, name: str) -> tuple[bytes, bytes, bytes]:
        if name not in self.files:
            raise NotFound(f"No file at /ui/{name}")
        return self.files[name]


async def _send(app: App, req: Request, send, name: str) -> None:
    body, kind, tag = app.builtin_ui.get(name)
    headers = [*HEADERS, (b"etag", tag)]
    match = dict(req.scope.get("headers", ())).get(b"if-none-match", b"")
    if tag in [t.strip() for t in match.split(b",")]:
        await send({"type": "http.response.start", "status": 304, "headers": headers})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    await app.send_body(send, 200, body, kind, headers)


async def index(app: App, req: Request, send) -> None:
    """GET / -> the page."""
    await _send(app, req, send, "index.html")


async def asset(app: App, req: Request, send) -> None:
    """GET /ui/<file> -> one of the page's files; anything else is a 404."""
    await _send(app, req, send, req.params["asset"])
