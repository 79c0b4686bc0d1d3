"""How many connections a worker keeps open, and how long a request may take to arrive.

`Limits` are the settings (README "Connections and slow clients" names the defaults); `Gate`
counts a worker's open connections in all and per peer address. A connection over either cap is
answered 503 and closed at once, except that at the worker's cap the connection that has waited
longest for a request head (idle keep-alive, or a head trickling in) is closed to make room: a
worker full of silent or slowloris connections still takes a new client. Heads and bodies have
deadlines (connection.py, body.py), so a trickling client frees its place in bounded time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

import trio


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """Connection and slow-client limits of one worker (per process)."""

    max_connections: int = 4096
    """Open connections per worker; at the cap the longest-waiting idle one makes room."""
    max_per_peer: int = 256
    """Open connections per client address and worker; more are answered 503."""
    head_timeout: float = 10.0
    """Seconds from a request head's first byte to its end (slowloris)."""
    body_timeout: float = 30.0
    """Seconds for a whole request body a handler reads (a trickling body is answered 408)."""

    def check(self) -> None:
        """LimitError naming the first setting whose value makes no sense."""
        for name in ("max_connections", "max_per_peer"):
            if getattr(self, name) < 1:
                raise LimitError(name, getattr(self, name), "must be at least 1")
        for name in ("head_timeout", "body_timeout"):
            if not getattr(self, name) > 0:
                raise LimitError(name, getattr(self, name), "must be more than 0 seconds")


class LimitError(ValueError):
    """A Limits setting out of range: `name`, `value`, and the `rule` it breaks."""

    def __init__(self, name: str, value: object, rule: str) -> None:
        super().__init__(f"{name} {rule}, not {value}")
        self.name, self.value, self.rule = name, value, rule


class Gate:
    """Open connections of one worker by peer, and the ones waiting for a head (evictable)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.total = 0
        self.refused = 0
        self._peers: dict[str, int] = {}
        self._waiting: dict[int, trio.CancelScope] = {}  # insertion order: longest waiting first
        self._closing = False

    def admit(self, peer: str, *, capped: bool = True) -> bool:
        """Count a new connection from `peer`, or False (not counted) when it is over a cap.
        `capped=False`: a trusted proxy's, counted for its client once known (`move`)."""
        if (capped and self._peers.get(peer, 0) >= self.limits.max_per_peer) or not self._room():
            self.refused += 1
            return False
        self.total += 1
        self._peers[peer] = self._peers.get(peer, 0) + 1
        return True

    def move(self, peer: str, client: str) -> bool:
        """Count a connection counted for `peer` (a proxy) for `client` instead; False (still
        counted for `peer`) when `client` is at its cap."""
        if client == peer:
            return True
        if self._peers.get(client, 0) >= self.limits.max_per_peer:
            self.refused += 1
            return False
        self.release(peer)
        self._peers[client] = self._peers.get(client, 0) + 1
        self.total += 1
        return True

    def release(self, peer: str) -> None:
        self.total -= 1
        left = self._peers[peer] - 1
        if left:
            self._peers[peer] = left
        else:
            del self._peers[peer]

    def _room(self) -> bool:
        if self.total < self.limits.max_connections:
            return True
        oldest = next(iter(self._waiting), None)  # the longest waiting makes room
        if oldest is None:
            return False
        self._waiting.pop(oldest).cancel()
        return True

    @contextmanager
    def waiting(self, scope: trio.CancelScope) -> Iterator[None]:
        """`with gate.waiting(scope):` while a connection waits for a head; evictable meanwhile
        (and cancelled at once once the worker is closing)."""
        if self._closing:
            scope.cancel()
        else:
            self._waiting[id(scope)] = scope
        try:
            yield
        finally:
            self._waiting.pop(id(scope), None)

    def close_waiting(self) -> None:
        """At shutdown: connections waiting for a head close at once (as hypercorn's idle ones)."""
        self._closing = True
        for scope in self._waiting.values():
            scope.cancel()
        self._waiting.clear()
