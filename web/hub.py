"""One task per worker sends to every stream at the head of the ring (the direct path, web.direct).

Why: with a task per stream, each new batch of events woke ~50 tasks per worker one after the
other, and each send went through hypercorn/h11 (~75 us of CPU per stream wake, measured); the
last stream of a worker got an event tens of ms after the first. Here the watcher's fire wakes
one task, which for each position that streams share renders and frames the new events once
(`web.fanout`, `common.http1.wire.frame`) and writes the same bytes to each of those streams with one
non-blocking `write` — no task wake, no per-stream framing.

Pacing: rounds follow the watcher's fires (its linger batches what was published meanwhile into
one write per stream), start at least PACE_SECONDS per write of the last round apart (many streams:
fewer, fuller writes), and share the worker's send budget (web.budget) with streams catching up.

A stream belongs to the hub only while it is at the head and its socket takes what it is given.
When a write is short (the client is slow or stalled) or the stream has to end, the hub hands the
stream back to its own task (`Follower.scope` is cancelled) with the bytes it could not write in
`pending`; that task writes them with a blocking `send_all` — never under a timeout, a stalled
peer is reset by TCP_USER_TIMEOUT — reads on with its own cursor until it is at the head again
and rejoins. So one slow client never delays the others, and every rule of a stream (web.events:
order, no gap, no repeat, the 410/503 last lines) holds: the hub reads with the streams' own
cursors, through the same cache, and sends the same lines.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import trio

from .events import (CHUNK, COALESCE_BYTES, INSTANCE_CHECK_SECONDS, WAKE_SECONDS, collect_more,
                     instance_line, lapped_line, shutdown_line)
from common.http1.tls import TlsStream
from common.http1.wire import LAST_CHUNK, frame

if TYPE_CHECKING:
    from .app import App


class Follower:
    """A stream served by the hub while it is at the head."""

    __slots__ = ("fd", "tls", "reader", "cursor", "scope", "pending", "end")

    def __init__(self, fd: int, reader: Any, cursor: Any, tls: TlsStream | None = None) -> None:
        self.fd = fd
        self.tls = tls
        """A TLS stream is written through its own TLS engine (common.http1.tls): what the socket
        does not take stays in its ciphertext backlog, which the task's next send_all flushes."""
        self.reader = reader
        self.cursor = cursor
        self.scope = trio.CancelScope()
        self.pending = b""
        """What the hub could not write: the stream's task sends it before anything else."""
        self.end: str | None = None
        """The close reason once the stream's last bytes are in `pending` (or written)."""


class Hub:
    """The streams of one worker that sit at the head of the ring, and the task that feeds them."""

    PACE_SECONDS = 40e-6
    """After a round of N writes the next round starts N x this later at the earliest (besides the
    watcher's linger after each fire): with many streams, fewer and fuller writes — what a write
    costs (kernel included) is what the machine's CPU per delivered event is made of. 1,000 streams
    at 100 events/s, 2 workers: ~20 ms between rounds, ~2 events per write."""

    def __init__(self, app: "App") -> None:
        self._app = app
        self._followers: dict[Follower, None] = {}  # insertion-ordered set
        self._wake = trio.Event()
        self._next_check: dict[int, float] = {}  # id(reader) -> when to ask instance_changed again
        self.writes = 0  # writes and bytes so far: what paces the rounds
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._followers)

    def join(self, follower: Follower) -> None:
        """`follower` is at the head (its task read all there was); the hub sends from now on."""
        self._followers[follower] = None
        if follower.cursor.next_id <= self._app.watcher.highest or self._app.stopping.is_set():
            self.poke()  # published after the stream's last read: do not wait for the next fire

    def leave(self, follower: Follower) -> None:
        self._followers.pop(follower, None)

    def poke(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        self._app.watcher.subscribe(self.poke)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._poke_on_stop)
            while True:
                with trio.move_on_after(WAKE_SECONDS):
                    await self._wake.wait()
                self._wake = trio.Event()
                if self._followers:
                    started, writes, sent = trio.current_time(), self.writes, self.bytes
                    if self.round():
                        self.poke()  # someone read COALESCE_BYTES and is not at the head yet
                    pause = self._app.budget.spend(self.bytes - sent, trio.current_time())
                    await trio.sleep_until(max(started + (self.writes - writes) * self.PACE_SECONDS,
                                               trio.current_time() + pause))

    async def _poke_on_stop(self) -> None:
        await self._app.stopping.wait()
        self.poke()

    def round(self) -> bool:
        """Send what is new to every follower; True if a group is still behind the head."""
        app = self._app
        now = trio.current_time()
        stopping = app.stopping.is_set()
        groups: dict[tuple[int, int], list[Follower]] = {}
        for f in self._followers:
            groups.setdefault((id(f.reader), f.cursor.next_id), []).append(f)
        behind = False
        for group in groups.values():
            reader, cursor = group[0].reader, group[0].cursor
            if stopping:
                self._end(group, shutdown_line(cursor.next_id), "shutdown")
                continue
            if self._instance_changed(reader, now):
                self._end(group, instance_line(reader, cursor.next_id), "instance_changed")
                continue
            got = app.chunks.poll(reader, cursor, CHUNK)
            if got.lost is not None:
                self._end(group, lapped_line(got.lost), "lapped")
                continue
            if not got.count:
                continue
            body, size, lost = collect_more(app, reader, cursor, got)
            next_id = cursor.next_id
            data = frame(body)
            for f in group:
                f.cursor.next_id = next_id
                self._write(f, data)
            self.bytes += len(data) * len(group)
            if lost is not None:
                self._end([f for f in group if f in self._followers], lapped_line(lost), "lapped")
            elif size >= COALESCE_BYTES:
                behind = True
        return behind

    def _instance_changed(self, reader: Any, now: float) -> bool:
        key = id(reader)
        if now < self._next_check.get(key, 0.0):
            return False
        if len(self._next_check) > 64:
            self._next_check.clear()
        self._next_check[key] = now + INSTANCE_CHECK_SECONDS
        return bool(reader.instance_changed())

    def _write(self, f: Follower, data: bytes) -> None:
        """One non-blocking write; a short one hands the stream back to its task."""
        self.writes += 1
        try:
            if f.tls is not None:
                if not f.tls.send_nowait(data):
                    self._hand_back(f, b"", None)
                return
            n = os.write(f.fd, data)
        except BlockingIOError:
            n = 0
        except OSError:  # reset, broken pipe, TCP_USER_TIMEOUT: the task sees it too
            self._hand_back(f, b"", "client_closed")
            return
        if n < len(data):
            self._hand_back(f, data[n:], None)

    def _end(self, group: list[Follower], line: bytes, reason: str) -> None:
        data = frame(line) + LAST_CHUNK
        for f in group:
            self._write(f, data)
            if f in self._followers:
                self._hand_back(f, b"", reason)
            elif f.end is None:
                f.end = reason  # the short write handed it back: it sends the rest, then ends

    def _hand_back(self, f: Follower, pending: bytes, end: str | None) -> None:
        self._followers.pop(f, None)
        f.pending = pending
        f.end = end
        f.scope.cancel()
