"""HTTP/1.1 on the wire for the listener's direct path (listener.py): the request at the front of
a connection's buffer in, a response out, byte for byte what hypercorn (h11) writes for the same
ASGI answer.

Why our own: hypercorn + h11 + the ASGI machinery cost ~0.3 ms of CPU per request (measured: a
no-op app answers 100 concurrent PUTs in ~25 ms on a loaded machine), which is the whole budget
of a 100-PE drain round; a PE's checkpoint is a one-line head and a one-number body.

`parse` is deliberately strict: it takes only a plain HTTP/1.1 GET or PUT with an origin-form
target, printable-ASCII header lines, exactly one Host, at most one Content-Length and no
Transfer-Encoding / Expect / Upgrade, and says FOREIGN to anything else — HTTP/1.0, a chunked
body, a bare-LF line end, an over-long head, a percent-encoded path — which the listener hands to
hypercorn, so it is answered (or refused with h11's 400) exactly as before. Whatever `parse`
takes, h11 parses to the same method, target, body length and keep-alive (a property test
checks it against h11).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Final

MAX_HEAD = 16 * 1024
"""hypercorn's h11_max_incomplete_size: a longer head is hypercorn's to refuse."""

MAX_LENGTH_DIGITS = 18

INCOMPLETE: Final = "incomplete"
"""The buffer does not hold a whole request head yet."""
FOREIGN: Final = "foreign"
"""The request at the front is not one the direct path takes: it goes to hypercorn."""

_BLANK_LINE = re.compile(rb"\n\r?\n")  # where h11 ends a head (it takes bare LFs too)
_REQUEST_LINE = re.compile(rb"(GET|PUT) (/[\x21-\x7e]*) HTTP/1\.1")
_HEADER = re.compile(rb"([-!#$%&'*+.^_`|~0-9a-zA-Z]+):[ \t]*([\x20-\x7e\t]*?)[ \t]*")
_REFUSED = frozenset({b"transfer-encoding", b"expect", b"upgrade"})


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    """The head of the request at the front of the buffer."""

    method: str
    path: str
    """The target before any `?` (never percent-encoded: those are FOREIGN)."""
    length: int
    """Content-Length (0 without one)."""
    close: bool
    """The client sent `Connection: close`."""
    body_start: int
    """Where the body starts in the buffer (after the blank line)."""


def parse(buf: bytes) -> Request | str:
    """The request at the front of `buf`: a Request, INCOMPLETE or FOREIGN."""
    blank = _BLANK_LINE.search(buf)
    if blank is None:
        return INCOMPLETE if len(buf) <= MAX_HEAD else FOREIGN
    end = blank.start() - 1  # the CR of "\r\n\r\n"
    if end < 0 or end > MAX_HEAD or buf[end] != 0x0D or blank.end() - blank.start() != 3:
        return FOREIGN
    lines = buf[:end].split(b"\r\n")
    line = _REQUEST_LINE.fullmatch(lines[0])
    if line is None:
        return FOREIGN
    path = line.group(2).partition(b"?")[0]
    if b"%" in path:
        return FOREIGN
    length, close, hosts = None, False, 0
    for raw in lines[1:]:
        header = _HEADER.fullmatch(raw)
        if header is None:
            return FOREIGN  # also obsolete line folding, a stray CR or LF, non-ASCII
        name, value = header.group(1).lower(), header.group(2)
        if name in _REFUSED:
            return FOREIGN
        if name == b"host":
            hosts += 1
        elif name == b"content-length":
            if length is not None or not value.isdigit() or len(value) > MAX_LENGTH_DIGITS:
                return FOREIGN
            length = int(value)
        elif name == b"connection":
            close = close or b"close" in (t.strip().lower() for t in value.split(b","))
    if hosts != 1:
        return FOREIGN  # h11 answers a missing or repeated Host with a 400
    return Request(line.group(1).decode("ascii"), path.decode("ascii"), length or 0, close,
                   blank.end())




CLIENT_CLOSE = b"Connection: close\r\n"
"""h11's header when the client asked to close."""
SERVER_CLOSE = b"connection: close\r\n"
"""hypercorn's header when the connection reached keep_alive_max_requests."""


def response(status: int, headers: list[tuple[bytes, bytes]], body: bytes, date: bytes,
             close: bytes = b"") -> bytes:
    """The response as h11 writes it for hypercorn: an empty reason phrase, the app's headers,
    `date`, then CLIENT_CLOSE or SERVER_CLOSE when the connection ends after it."""
    out = [b"HTTP/1.1 %d \r\n" % status]
    out += [b"%s: %s\r\n" % (name, value) for name, value in headers]
    out.append(b"date: %s\r\n%s\r\n" % (date, close))
    out.append(body)
    return b"".join(out)
