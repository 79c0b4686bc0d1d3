"""Errors a REST client sees, and the one JSON body they all share.

    HTTPError                 base, never raised itself; carries status and message
    ├── BadRequest            400  a query parameter or a name in the path is wrong
    ├── Forbidden             403  a cross-origin request to a state-changing route, origin not allowed
    ├── NotFound              404  no route, or the partition / user / group is unknown
    ├── MethodNotAllowed      405  the path exists, the method does not (carries `allow`)
    ├── RequestTimeout        408  a request body not whole within the body deadline
    ├── PayloadTooLarge       413  a request body over the limit
    ├── URITooLong            414  a request target over the limit
    ├── InternalError         500  tracking disabled, or a bug (the catch-all maps any exception here)
    └── Unavailable           503  no ring / no engine snapshot / too many streams

Every error answer is `{"status_code":N,"message":M,"description":M}` with
`Content-Type: application/json; charset=UTF-8`, the body YuniKorn's `buildJSONErrorResponse` sends.
Handlers raise; the application turns the exception into the response at one boundary
(`web.app.App`), so no handler formats an error body itself and no traceback reaches a client.
"""

from __future__ import annotations

import orjson

JSON_CONTENT_TYPE = b"application/json; charset=UTF-8"


class HTTPError(Exception):
    """An answer other than success; `status` is the HTTP status, `message` what the client reads."""

    status = 500

    def __init__(self, message: str, *, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = headers or []


class BadRequest(HTTPError):
    """A query parameter is not what the endpoint accepts, or a name in the path is invalid."""

    status = 400


class Forbidden(HTTPError):
    """A browser request from an origin the configuration does not allow (web.responses.Cors)."""

    status = 403


class NotFound(HTTPError):
    """No route matches the path, or it names a partition, user or group that does not exist."""

    status = 404


class MethodNotAllowed(HTTPError):
    """A route matches the path but not the method; `allow` lists the methods it accepts."""

    status = 405

    def __init__(self, message: str, allow: list[str]) -> None:
        super().__init__(message, headers=[(b"allow", ", ".join(allow).encode("ascii"))])
        self.allow = allow


class RequestTimeout(HTTPError):
    """A request body did not arrive within the body deadline (a trickling client)."""

    status = 408


class PayloadTooLarge(HTTPError):
    """The request carries a body larger than the server accepts (no endpoint needs a body)."""

    status = 413


class URITooLong(HTTPError):
    """The request target (path + query) is longer than the server accepts."""

    status = 414


class InternalError(HTTPError):
    """The server cannot answer: tracking is disabled, or a bug (logged, never shown)."""

    status = 500


class Unavailable(HTTPError):
    """A source is missing for now (no ring, no engine snapshot) or a stream limit is reached."""

    status = 503


def error_body(status: int, message: str) -> bytes:
    """The YuniKorn error JSON for one status and message (message doubles as description)."""
    return orjson.dumps({"status_code": status, "message": message, "description": message})


def error_line(status: int, message: str) -> bytes:
    """The last NDJSON line of a stream that ends for a reason the client should know."""
    return orjson.dumps({"status_code": status, "message": message}) + b"\n"


def go_quote(text: str) -> str:
    """`strconv.Quote` of Go, close enough for echoing a query value in an error message."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif 0xD800 <= code <= 0xDFFF or (0x80 <= code < 0xA0):
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def parse_uint64(name: str, text: str) -> int:
    """Parse a query value as Go's `strconv.ParseUint(s, 10, 64)`; its error text on failure."""
    if text == "" or not text.isascii() or not text.isdigit():
        raise BadRequest(f"strconv.ParseUint: parsing {go_quote(text)}: invalid syntax")
    value = int(text)
    if value >= 1 << 64:
        raise BadRequest(f"strconv.ParseUint: parsing {go_quote(text)}: value out of range")
    return value
