"""What YuniKorn's core adds to its REST answers: CORS headers and gzip.

CORS (core `writeHeaders`): every answer of a `/ws/v1` route except `/ws/v1/metrics` carries
`Access-Control-Allow-Origin: *`, `Access-Control-Allow-Methods` (`GET, OPTIONS`, or
`OPTIONS, POST` on a POST route) and `Access-Control-Allow-Headers`, errors included, so the
YuniKorn web UI can be served from another origin in development. An OPTIONS request gets the
router's default answer: 200 with an `Allow` header and no CORS headers (httprouter's).

gzip (core `gzip.go`): a whole (not streamed) answer of at least 1,400 bytes is compressed when the
client's `Accept-Encoding` names gzip. The event stream never is. A snapshot view answers with the
same bytes object until the next publish, so its compressed form is kept beside it
(`GzipCache`): a client that polls a big view does not pay for compression on every request.
"""

from __future__ import annotations

from isal import igzip

GZIP_MIN_BYTES = 1400
GZIP_LEVEL = 1
"""ISA-L level 1 (python-isal's igzip: the same gzip format, any client inflates it): a batch of
10,000 events (2.8 MB of JSON) compresses in ~1.6 ms to ~330 KB, where zlib's level 1 took ~9 ms
for ~375 KB, which alone put `count=10000` over its 15 ms target; the cache makes it rarer still."""

ALLOW_HEADERS = b"X-Requested-With,Content-Type,Accept,Origin"


def cors_headers(methods: tuple[str, ...]) -> list[tuple[bytes, bytes]]:
    """The CORS headers YuniKorn sets on a route that answers `methods`."""
    allow = b"OPTIONS, POST" if "POST" in methods else b"GET, OPTIONS"
    return [(b"access-control-allow-origin", b"*"),
            (b"access-control-allow-methods", allow),
            (b"access-control-allow-headers", ALLOW_HEADERS)]


def accepts_gzip(scope: dict) -> bool:
    """Whether the request's Accept-Encoding names gzip (with a q-value other than 0)."""
    for name, value in scope.get("headers", ()):
        if name == b"accept-encoding":
            for item in value.split(b","):
                token, _, params = item.strip().partition(b";")
                if token.strip().lower() in (b"gzip", b"*"):
                    q = params.strip().lower()
                    if q.startswith(b"q=") and q[2:].strip() in (b"0", b"0.0", b"0.00", b"0.000"):
                        continue
                    return True
    return False


class GzipCache:
    """Compressed forms of recently sent bodies, keyed by the body object itself.

    The entry keeps a reference to the body, so an `id()` is never reused while its entry lives.
    """

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self._entries: dict[int, tuple[bytes, bytes]] = {}

    def compress(self, body: bytes) -> bytes:
        entry = self._entries.get(id(body))
        if entry is not None and entry[0] is body:
            return entry[1]
        packed = igzip.compress(body, GZIP_LEVEL, mtime=0)
        if len(self._entries) >= self.capacity:
            self._entries.clear()
        self._entries[id(body)] = (body, packed)
        return packed
