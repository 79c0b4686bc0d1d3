"""The strict request-head parser of the direct paths: the request at the front of a buffer.

`parse` takes only a plain HTTP/1.1 request with an origin-form target, printable-ASCII header
lines, exactly one Host, at most one Content-Length and no Transfer-Encoding / Expect / Upgrade,
and says FOREIGN to anything else — HTTP/1.0, a chunked body, a bare-LF line end, an over-long
head — which the caller hands to hypercorn, so it is answered (or refused with h11's 400) exactly
as hypercorn alone would. Whatever `parse` takes, h11 parses to the same method, target, body
length and keep-alive (tests/common/test_http1_head.py checks it against h11 with hypothesis).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Final

MAX_HEAD = 16 * 1024
"""hypercorn's default h11_max_incomplete_size: a longer head is hypercorn's to refuse."""

MAX_LENGTH_DIGITS = 18

INCOMPLETE: Final = "incomplete"
"""The buffer does not hold a whole request head yet."""
FOREIGN: Final = "foreign"
"""The request at the front is not one a direct path takes: it goes to hypercorn."""

_BLANK_LINE = re.compile(rb"\n\r?\n")  # where h11 ends a head (it takes bare LFs too)
_REQUEST_LINE = re.compile(rb"([-!#$%&'*+.^_`|~0-9a-zA-Z]+) (/[\x21-\x7e]*) HTTP/1\.1")
_HEADER = re.compile(rb"([-!#$%&'*+.^_`|~0-9a-zA-Z]+):[ \t]*([\x20-\x7e\t]*?)[ \t]*")
_REFUSED = frozenset({b"transfer-encoding", b"expect", b"upgrade"})


@dataclasses.dataclass(frozen=True, slots=True)
class Head:
    """The head of the request at the front of the buffer."""

    method: str
    path: str
    """The raw target before any `?`, not percent-decoded."""
    query: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    """Lower-case names, values without surrounding white space, in order."""
    length: int
    """Content-Length (0 without one)."""
    close: bool
    """The client sent `Connection: close`."""
    body_start: int
    """Where the body starts in the buffer (after the blank line)."""


def parse(buf: bytes) -> Head | str:
    """The request at the front of `buf`: a Head, INCOMPLETE or FOREIGN."""
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
    headers = _headers(lines[1:])
    if headers is None:
        return FOREIGN
    fields, length, close = headers
    path, _sep, query = line.group(2).partition(b"?")
    return Head(line.group(1).decode("ascii"), path.decode("ascii"), query, fields, length,
                close, blank.end())


def _headers(lines: list[bytes]) -> tuple[tuple[tuple[bytes, bytes], ...], int, bool] | None:
    """(headers, Content-Length, Connection: close), or None for a head h11 may read otherwise."""
    fields = []
    length, close, hosts = None, False, 0
    for raw in lines:
        header = _HEADER.fullmatch(raw)
        if header is None:
            return None  # also obsolete line folding, a stray CR or LF, non-ASCII
        name, value = header.group(1).lower(), header.group(2)
        if name in _REFUSED:
            return None
        if name == b"host":
            hosts += 1
        elif name == b"content-length":
            if length is not None or not value.isdigit() or len(value) > MAX_LENGTH_DIGITS:
                return None
            length = int(value)
        elif name == b"connection":
            close = close or b"close" in (t.strip().lower() for t in value.split(b","))
        fields.append((name, value))
    if hosts != 1:
        return None  # h11 answers a missing or repeated Host with a 400
    return tuple(fields), length or 0, close
