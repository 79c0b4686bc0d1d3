"""A single-page UI build served at `/`, beside `/ws` on the same origin (`--ui-dir`, `ui.dir`).

YuniKorn's web UI finds its API on its own origin (its production server proxies `/ws/` to the
core). Serving the build from the web workers gives the same origin with no proxy in front: a
request outside `/ws/` and `/debug/` is a file of the build, and a path that names no file is the
UI's own route, answered with `index.html` (the single-page fallback) -- unless its last part looks
like a file of a known type (`app.js`), which is a 404 so a missing asset is not served as HTML. Paths are resolved inside
the directory only: `..`, symlinks out of it, and dot-files are never served.
"""

from __future__ import annotations

import mimetypes
import os
from pathlib import Path

import trio

from .errors import BadRequest, NotFound

API_PREFIXES = ("/ws/", "/debug/")
INDEX = "index.html"


class UIError(ValueError):
    """The UI directory cannot be served (raised at start-up, shown as a usage error)."""


def check_dir(path: str) -> str:
    """The absolute, resolved UI directory; UIError if it has no index.html."""
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise UIError(f"{path!r} is not a directory")
    if not (root / INDEX).is_file():
        raise UIError(f"{path!r} has no {INDEX}")
    return str(root)


def is_ui_path(path: str) -> bool:
    """Whether a request path belongs to the UI (everything outside the API prefixes)."""
    return not (path + "/").startswith(API_PREFIXES) and path != "/ws" and path != "/debug"


class StaticUI:
    """Files of one UI build directory."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)

    def locate(self, url_path: str) -> Path:
        """The file answering `url_path` (already percent-decoded): itself, or the index."""
        parts = [p for p in url_path.split("/") if p]
        if any(p in ("..", ".") or p.startswith(".") or "\0" in p or "\\" in p for p in parts):
            raise BadRequest("Invalid path")
        candidate = self.root.joinpath(*parts) if parts else self.root / INDEX
        if candidate.is_dir():
            candidate = candidate / INDEX
        try:
            resolved = candidate.resolve(strict=True)
        except (OSError, RuntimeError):
            resolved = None
        if resolved is None or not resolved.is_file() or not _inside(resolved, self.root):
            if parts and mimetypes.guess_type(parts[-1])[0] is not None:
                raise NotFound(f"No file at {url_path}")  # a missing asset, not a UI route
            resolved = self.root / INDEX
        return resolved

    async def read(self, url_path: str) -> tuple[bytes, bytes]:
        """(body, content type) of the file answering `url_path`."""
        path = self.locate(url_path)
        body = await trio.Path(path).read_bytes()
        kind, _ = mimetypes.guess_type(path.name)
        kind = kind or "application/octet-stream"
        if kind.startswith("text/") or kind in ("application/javascript", "application/json"):
            kind += "; charset=utf-8"
        return body, kind.encode("ascii")


def _inside(path: Path, root: Path) -> bool:
    return os.path.commonpath([str(path), str(root.resolve())]) == str(root.resolve())
