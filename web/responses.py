"""What YuniKorn's core adds to its REST answers: CORS headers and gzip.

CORS (core `writeHeaders`): every answer of a `/ws/v1` route except `/ws/v1/metrics` carries
`Access-Control-Allow-Origin: *`, `Access-Control-Allow-Methods` (`GET, OPTIONS`, or
`OPTIONS, POST` on a POST route) and `Access-Control-Allow-Headers`, errors included, so the
YuniKorn web UI can be served from another origin in development. An OPTIONS request gets the
router's default answer: 200 with an `Allow` header and no CORS headers (httprouter's).

`Cors` makes that configurable (`service.cors.allowedOrigins`, default `["*"]`: YuniKorn's answers)
and closes what `*` leaves open: a page in a local browser may send a "simple" POST (text/plain,
no preflight) to 127.0.0.1 and the browser delivers it. A request other than GET/HEAD/OPTIONS
that carries an `Origin` other than the server's own runs only when that origin is listed by name
(the wildcard does not count); otherwise it is a 403 with the error body. "The server's own" is
`Origin == scheme://Host` for a Host that is an IP literal or `localhost` only: a DNS name in Host
may be an attacker's rebound to 127.0.0.1 (security review 2, N14). Clients that are not
browsers (YuniKorn's admission controller, curl) send no Origin and are not affected. A listed
origin gets its own name back (with `Vary: Origin`) and CORS headers on its preflight too.

gzip (core `gzip.go`): a whole (not streamed) answer of at least 1,400 bytes is compressed when the
client's `Accept-Encoding` names gzip. The event stream never is. A snapshot view answers with the
same bytes object until the next publish, so its compressed form is kept beside it
(`GzipCache`): a client that polls a big view does not pay for compression on every request.
An answer sent in pieces (a big events batch) is compressed as one gzip stream, flushed after
every piece so the client can inflate each piece as it arrives (`GzipStream`). The state dump
differs from one answer to the next only in its first line (the timestamp): its rest is deflated
once per snapshot (`DeflatedTail`) and each answer is one gzip member made of the fresh prefix's
blocks, the cached blocks and a CRC combined from the two (`gzip_parts`).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import struct

from isal import igzip, isal_zlib

GZIP_MIN_BYTES = 1400
GZIP_LEVEL = 1
"""ISA-L level 1 (python-isal's igzip: the same gzip format, any client inflates it): a batch of
10,000 events (2.8 MB of JSON) compresses in ~1.6 ms to ~330 KB, where zlib's level 1 took ~9 ms
for ~375 KB, which alone put `count=10000` over its 15 ms target; the cache makes it rarer still."""

ALLOW_HEADERS = b"X-Requested-With,Content-Type,Accept,Origin"


def cors_headers(methods: tuple[str, ...], origin: bytes = b"*") -> list[tuple[bytes, bytes]]:
    """The CORS headers YuniKorn sets on a route that answers `methods`."""
    allow = b"OPTIONS, POST" if "POST" in methods else b"GET, OPTIONS"
    extra = [] if origin == b"*" else [(b"vary", b"Origin")]
    return [(b"access-control-allow-origin", origin),
            (b"access-control-allow-methods", allow),
            (b"access-control-allow-headers", ALLOW_HEADERS), *extra]


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _header(scope: dict, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class Cors:
    """Which browser origins may read answers and send state-changing requests."""

    allowed_origins: tuple[str, ...] = ("*",)

    def _listed(self, origin: bytes | None) -> bool:
        return origin is not None and origin.decode("latin-1") in self.allowed_origins

    def headers(self, scope: dict, methods: tuple[str, ...]) -> list[tuple[bytes, bytes]]:
        """CORS headers of an answer: `*` when the wildcard is configured, else the listed origin."""
        if "*" in self.allowed_origins:
            return cors_headers(methods)
        origin = _header(scope, b"origin")
        return cors_headers(methods, origin) if self._listed(origin) else []

    def preflight_headers(self, scope: dict, methods: tuple[str, ...]) -> list[tuple[bytes, bytes]]:
        """An OPTIONS answer stays httprouter's (no CORS) unless the origin is listed by name."""
        origin = _header(scope, b"origin")
        return cors_headers(methods, origin) if self._listed(origin) else []

    def refusal(self, scope: dict) -> str | None:
        """Why this request must not run (a cross-origin state-changing request), or None."""
        if scope.get("method") in SAFE_METHODS:
            return None
        origin = _header(scope, b"origin")
        if origin is None or self._listed(origin):
            return None
        host = _header(scope, b"host")
        if host is not None and _rebind_proof(host) and origin.lower() in (
                b"http://" + host.lower(), b"https://" + host.lower()):
            return None
        return (f"Cross-origin {scope.get('method')} from {origin.decode('latin-1')!r} refused: "
                "the origin is not listed in service.cors.allowedOrigins")


def _rebind_proof(host: bytes) -> bool:
    """Whether `Origin == scheme://Host` proves a same-origin page: only when Host names no DNS
    name an attacker may own, i.e. an IP literal or `localhost` (which browsers never resolve
    through DNS). With DNS rebinding, a page from `http://evil.example` whose name now resolves
    to 127.0.0.1 sends `Host: evil.example` and `Origin: http://evil.example`: equal, and not
    ours. A UI served under a DNS name lists that origin in service.cors.allowedOrigins."""
    name = host.decode("latin-1").lower()
    if name.startswith("["):
        name = name[1:name.find("]")] if "]" in name else name
    else:
        name = name.rpartition(":")[0] if ":" in name else name
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


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


GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
"""A gzip member's header: deflate, no flags, mtime 0, OS unknown (what igzip writes with mtime=0)."""


@dataclasses.dataclass(frozen=True, slots=True)
class DeflatedTail:
    """A body deflated once (raw blocks, their CRC-32 and length), to end many gzip answers."""

    raw: bytes
    crc: int
    size: int

    @classmethod
    def of(cls, body: bytes) -> "DeflatedTail":
        z = isal_zlib.compressobj(GZIP_LEVEL, isal_zlib.DEFLATED, -isal_zlib.MAX_WBITS)
        return cls(z.compress(body) + z.flush(), isal_zlib.crc32(body), len(body))


def gzip_parts(prefix: bytes, tail: DeflatedTail) -> list[bytes]:
    """One gzip member of prefix + the tail's body: the prefix's blocks end on a sync flush (byte
    aligned, not final), and the tail's blocks refer only to their own bytes, so they follow as
    they are; the trailer's CRC is combined, not recomputed over the body."""
    z = isal_zlib.compressobj(GZIP_LEVEL, isal_zlib.DEFLATED, -isal_zlib.MAX_WBITS)
    head = GZIP_HEADER + z.compress(prefix) + z.flush(isal_zlib.Z_SYNC_FLUSH)
    crc = isal_zlib.crc32_combine(isal_zlib.crc32(prefix), tail.crc, tail.size)
    return [head, tail.raw, struct.pack("<II", crc, (len(prefix) + tail.size) & 0xFFFFFFFF)]


class GzipCache:
    """Compressed forms of recently sent bodies, keyed by the body object itself.

    The entry keeps a reference to the body, so an `id()` is never reused while its entry lives.
    """

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self._entries: dict[int, tuple[bytes, bytes]] = {}
        self._tails: dict[int, tuple[bytes, DeflatedTail]] = {}

    def tail(self, body: bytes) -> DeflatedTail:
        """`DeflatedTail.of(body)`, once per body object."""
        entry = self._tails.get(id(body))
        if entry is not None and entry[0] is body:
            return entry[1]
        tail = DeflatedTail.of(body)
        if len(self._tails) >= self.capacity:
            self._tails.clear()
        self._tails[id(body)] = (body, tail)
        return tail

    def compress(self, body: bytes) -> bytes:
        entry = self._entries.get(id(body))
        if entry is not None and entry[0] is body:
            return entry[1]
        packed = igzip.compress(body, GZIP_LEVEL, mtime=0)
        if len(self._entries) >= self.capacity:
            self._entries.clear()
        self._entries[id(body)] = (body, packed)
        return packed


class GzipStream:
    """One answer compressed as it is sent: one gzip member, each piece ending on a sync flush
    (an empty stored block, a few bytes) so the client inflates it without waiting for the next."""

    def __init__(self) -> None:
        self._z = isal_zlib.compressobj(GZIP_LEVEL, isal_zlib.DEFLATED, 16 + isal_zlib.MAX_WBITS)

    def piece(self, data: bytes, last: bool) -> bytes:
        out = self._z.compress(data)
        return out + self._z.flush(isal_zlib.Z_FINISH if last else isal_zlib.Z_SYNC_FLUSH)
