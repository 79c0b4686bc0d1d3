"""Response heads byte for byte as h11 writes them for sim-cluster's HTTP server, without h11.

Why: h11's request reading and response writing were ~24% of sim-cluster's CPU in
`ykshm bench e2e` (py-spy --gil, issue 25; three requests a pod: create, binding, event), while a
plain request needs neither its state machine nor its header validation. `httpserver` serves the
requests `common.http1.head.parse` takes (plain HTTP/1.1, Content-Length bodies) with these,
and hands any other connection to h11 from that request on; a chunk is framed by
`common.http1.wire.frame`, as h11 frames it. tests/simcluster/test_simcluster_h1wire.py
compares every head with h11's own.
"""

from __future__ import annotations

import re
from http import HTTPStatus

_NAME = re.compile(r"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
_VALUE = re.compile(r"(?:[\x21-\x7e](?:[ \t\x21-\x7e]*[\x21-\x7e])?)?")
"""What h11 accepts in a header we send (names are tokens; values ASCII, no CR/LF/NUL, no white
space around): anything else is a ValueError here where h11 raises LocalProtocolError."""


_REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}


def reason(status: int) -> bytes:
    """The standard reason phrase (`HTTP/1.1 200 OK`), as Go's net/http writes it; b"" for a
    code without one. A table: `HTTPStatus(code)` was 2% of sim-cluster's CPU."""
    return _REASONS.get(status, b"")


def head(status: int, headers: list[tuple[str, str]], close: bool, chunked: bool = False) -> bytes:
    """Status line and headers as h11 writes `Response(headers=headers)` on a keep-alive
    HTTP/1.1 connection: a chunked response's Transfer-Encoding moved last, `Connection: close`
    appended when the client asked to close."""
    out = [b"HTTP/1.1 %d %s\r\n" % (status, reason(status))]
    for name, value in headers:
        if chunked and name == "transfer-encoding":
            continue
        if close and name == "connection":
            continue
        if _NAME.fullmatch(name) is None or _VALUE.fullmatch(value) is None:
            raise ValueError(f"invalid response header {name!r}: {value!r}")
        out.append(f"{name}: {value}\r\n".encode("ascii"))
    if chunked:
        out.append(b"Transfer-Encoding: chunked\r\n")
    if close:
        out.append(b"Connection: close\r\n")
    out.append(b"\r\n")
    return b"".join(out)
