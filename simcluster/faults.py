"""Opt-in fault injection on writes (`--fault-rate R --fault-seed N`), for resilience tests.

A controller must survive the answers a real apiserver gives under load or during an upgrade.
With a rate R > 0, each write (POST, PUT, PATCH, DELETE) fails with probability R, as one of:
500 InternalError (nothing written), 429 TooManyRequests (nothing written), 409 Conflict
(nothing written) or a 504 Timeout after `delay` seconds *with the write carried out* (the answer
lost, as when a client's request times out after the server committed it). Reads, watches and the
simulated kubelet's own writes are never faulted. The seed makes a run repeatable.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Awaitable, Callable

import trio

from .errors import InternalError, status_object

WRITES = frozenset(("POST", "PUT", "PATCH", "DELETE"))
KINDS = ("error", "throttle", "conflict", "timeout")


@dataclasses.dataclass
class Faults:
    """The fault draw of one server: rate in [0, 1], its own random generator."""

    rate: float = 0.0
    seed: int | None = None
    delay: float = 0.5
    injected: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def draw(self, method: str) -> str | None:
        """The fault for this request (one of KINDS), or None to serve it normally."""
        if self.rate <= 0 or method not in WRITES or self.rng.random() >= self.rate:
            return None
        self.injected += 1
        return self.rng.choice(KINDS)

    async def apply(self, kind: str, serve: Callable[[], Awaitable[object]]) -> tuple[int, dict]:
        """The (code, Status body) a faulted request answers; a timeout still serves it first."""
        if kind == "timeout":
            await serve()
            await trio.sleep(self.delay)
            return 504, status_object(504, "Timeout", "the server was unable to return a response "
                                                      "in the time allotted (injected fault)")
        if kind == "throttle":
            return 429, status_object(429, "TooManyRequests", "too many requests (injected fault)",
                                      {"retryAfterSeconds": 1})
        if kind == "conflict":
            return 409, status_object(409, "Conflict", "Operation cannot be fulfilled: the object has "
                                                       "been modified; please apply your changes to "
                                                       "the latest version and try again (injected fault)")
        exc = InternalError("Internal error occurred: injected fault")
        return exc.code, exc.status()
