"""HTTP/1.1 on the wire for the direct stream path (web.direct): request heads in, a response head
and chunked framing out — only the few forms a stream needs, byte-compatible with what hypercorn
(h11) writes for the same response.

Why our own: h11 frames every chunk in Python through hypercorn's event and task machinery
(~50 us of CPU per `send`, measured); a stream body is a sequence of bytes that many streams
share, so it is framed once (`frame`) and written as is.

`parse_head` is deliberately strict and says "not mine" (None) for anything unusual — a body,
Upgrade/Expect, HTTP/1.0, an odd header line — because such a request is handed to hypercorn,
which answers it (or its error) exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass

HEAD_END = b"\r\n\r\n"
LAST_CHUNK = b"0\r\n\r\n"
_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_REFUSED = (b"content-length", b"transfer-encoding", b"upgrade", b"expect")


@dataclass(frozen=True)
class RequestHead:
    method: bytes
    path: bytes
    """The raw path of the target (before `?`), not percent-decoded."""
    query: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    """Lower-case names, values without surrounding white space, in order."""
    close: bool
    """The client asked for `Connection: close`."""


def frame(data: bytes) -> bytes:
    """One chunk of a chunked body (RFC 9112 7.1): size in hex, CRLF, data, CRLF."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def parse_head(head: bytes) -> RequestHead | None:
    """The request head (up to, not including, the blank line); None when it is not a plain
    HTTP/1.1 request without a body that we serve ourselves."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or parts[2] != b"HTTP/1.1" or not parts[0] or not _is_token(parts[0]):
        return None
    method, target = parts[0], parts[1]
    if not target.startswith(b"/") or any(c <= 0x20 or c == 0x7F for c in target):
        return None
    path, _sep, query = target.partition(b"?")
    headers = []
    close = False
    host = False
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or not _is_token(name):
            return None  # also obsolete line folding (a line starting with white space)
        name = name.lower()
        value = value.strip(b" \t")
        if name in _REFUSED and not (name == b"content-length" and value == b"0"):
            return None
        if any(c < 0x20 and c != 0x09 or c == 0x7F for c in value):
            return None
        if name == b"host":
            if host:
                return None  # h11 answers two Host headers with a 400
            host = True
        elif name == b"connection" and b"close" in [v.strip().lower() for v in value.split(b",")]:
            close = True
        headers.append((name, value))
    if not host:
        return None  # HTTP/1.1 requires Host: h11's 400
    return RequestHead(method, path, query, tuple(headers), close)


def _is_token(text: bytes) -> bool:
    return all(c in _TOKEN for c in text)




def response_head(headers: list[tuple[bytes, bytes]], date: bytes, *, close: bool) -> bytes:
    """`HTTP/1.1 200` with `headers`, the date, chunked transfer coding (and `Connection: close`
    when the client asked for it), as h11 writes them."""
    out = [b"HTTP/1.1 200 \r\n"]
    out += [b"%s: %s\r\n" % (name, value) for name, value in headers]
    out.append(b"date: %s\r\nTransfer-Encoding: chunked\r\n" % date)
    if close:
        out.append(b"Connection: close\r\n")
    out.append(b"\r\n")
    return b"".join(out)
