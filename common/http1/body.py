"""One ASGI request-body reader for our apps: a size cap and a deadline.

The cap is checked against Content-Length before anything is read and against what arrives; the
deadline (`Limits.body_timeout`) bounds a body that trickles in (slowloris), which hypercorn
alone would wait for without end (its read_timeout is per read, and streaming routes cannot have
one). Only `receive()` is timed, never a send. Each app says how its refusals look (`BodyErrors`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

import trio


@dataclasses.dataclass(frozen=True, slots=True)
class BodyErrors:
    """The exceptions an app answers a body it does not take: each takes the words to say."""

    too_large: Callable[[int], Exception]
    """(limit in bytes) -> the 413."""
    too_slow: Callable[[float], Exception]
    """(seconds) -> the 408."""
    gone: Callable[[], Exception]
    """The client went away before its body was whole."""


def declared_length(headers) -> int | None:
    """Content-Length from ASGI headers (None without one, or unreadable: h11 checked it)."""
    for name, value in headers:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def read_body(receive: Callable[[], Awaitable[dict]], headers, *, limit: int,
                    timeout: float, errors: BodyErrors) -> bytes:
    """The whole request body, at most `limit` bytes, within `timeout` seconds."""
    length = declared_length(headers)
    if length is not None and length > limit:
        raise errors.too_large(limit)
    chunks, size = [], 0
    with trio.move_on_after(timeout):
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise errors.gone()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise errors.too_large(limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)
    raise errors.too_slow(timeout)
