"""Responses as h11 writes them for hypercorn, and chunked framing, for the direct paths.

Why our own: hypercorn + h11 + the ASGI machinery cost ~0.3 ms of CPU per request and ~50 us per
chunk sent (measured); a PE's checkpoint answer is a few header lines and a stream's body is bytes
that many streams share, so both are written (and a chunk framed) once, byte for byte what h11
writes for the same ASGI answer (tests/common/test_http1_wire.py compares them).
"""

from __future__ import annotations

import time
from wsgiref.handlers import format_date_time

LAST_CHUNK = b"0\r\n\r\n"
CLIENT_CLOSE = b"Connection: close\r\n"
"""h11's header when the client asked to close."""
SERVER_CLOSE = b"connection: close\r\n"
"""hypercorn's header when the server ends the connection (keep_alive_max_requests)."""
CHUNKED = b"Transfer-Encoding: chunked\r\n"


def response_head(status: int, headers: list[tuple[bytes, bytes]], date: bytes,
                  close: bytes = b"", *, chunked: bool = False) -> bytes:
    """`HTTP/1.1 status` with an empty reason phrase, the app's headers, `date`, the chunked
    transfer coding if asked, then CLIENT_CLOSE or SERVER_CLOSE when the connection ends after."""
    out = [b"HTTP/1.1 %d \r\n" % status]
    out += [b"%s: %s\r\n" % (name, value) for name, value in headers]
    out.append(b"date: %s\r\n%s%s\r\n" % (date, CHUNKED if chunked else b"", close))
    return b"".join(out)


def response(status: int, headers: list[tuple[bytes, bytes]], body: bytes, date: bytes,
             close: bytes = b"") -> bytes:
    """A whole response with a body the headers give the length of (or none: 204)."""
    return response_head(status, headers, date, close) + body


def frame(data: bytes) -> bytes:
    """One chunk of a chunked body (RFC 9112 7.1): size in hex, CRLF, data, CRLF."""
    return b"%x\r\n%s\r\n" % (len(data), data)


class DateHeader:
    """The `date` header value, formatted once per second (hypercorn formats it per response)."""

    def __init__(self) -> None:
        self._second = -1
        self._value = b""

    def value(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._value = format_date_time(now).encode("ascii")
        return self._value
