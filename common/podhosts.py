"""Service names for ykshm processes that sim-cluster runs as pods (it has no cluster DNS).

sim-cluster gives a process pod `YKSHM_HOSTS` (a hosts file it keeps current: `IP NAME...` lines for
`NAME.NS.svc.cluster.local` and `NAME.NS.svc`) and `YKSHM_DNS_SEARCH` (the search list of a pod's
resolv.conf). `install()` makes `socket.getaddrinfo` and `socket.gethostbyname` (which httpx, trio
and the standard library use) look a name up there first: a name with fewer than 5 dots is tried
with each search domain appended, then as given (resolv.conf's `ndots:5`); a name ending in a dot
as given only. A name not in the file goes to the system resolver unchanged. The file is re-read
when it changes.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

NDOTS = 5


class Hosts:
    """The hosts file's names, re-read when its mtime changes."""

    def __init__(self, path: str, search: list[str]) -> None:
        self.path = path
        self.search = search
        self._mtime = -1.0
        self._names: dict[str, str] = {}

    def _load(self) -> dict[str, str]:
        try:
            mtime = os.stat(self.path).st_mtime
        except OSError:
            return self._names
        if mtime != self._mtime:
            names: dict[str, str] = {}
            with open(self.path, encoding="utf-8") as f:
                for line in f:
                    words = line.split("#", 1)[0].split()
                    for name in words[1:]:
                        names.setdefault(name.lower(), words[0])
            self._names, self._mtime = names, mtime
        return self._names

    def lookup(self, host: str) -> str | None:
        names = self._load()
        host = host.lower()
        if host.endswith("."):
            return names.get(host[:-1])
        candidates = [f"{host}.{domain}" for domain in self.search] if host.count(".") < NDOTS else []
        for name in [*candidates, host]:
            if name in names:
                return names[name]
        return None


def _wrap(hosts: Hosts, original: Callable[..., Any]) -> Callable[..., Any]:
    def resolving(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, bytes):
            host = host.decode("idna")
        if isinstance(host, str):
            host = hosts.lookup(host) or host
        return original(host, *args, **kwargs)

    resolving.__wrapped__ = original  # type: ignore[attr-defined]
    return resolving


def install(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Resolve through YKSHM_HOSTS when it is set; True when installed."""
    path = environ.get("YKSHM_HOSTS")
    if not path or hasattr(socket.getaddrinfo, "__wrapped__"):
        return False
    hosts = Hosts(path, environ.get("YKSHM_DNS_SEARCH", "").split())
    socket.getaddrinfo = _wrap(hosts, socket.getaddrinfo)
    socket.gethostbyname = _wrap(hosts, socket.gethostbyname)
    return True
