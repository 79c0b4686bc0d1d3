"""Readers of an instance's event ring: `RingReader` (ranges, recent events, counters) and
`Cursor` (following the ring), each a read-only mapping that never writes to shared memory.

A reader copies a record under the slot's seqlock and renders it in C (`ykr_render`); see
`shm.ring` for the layout and the protocol.  Segments are opened through `shm.segment.open_ro`,
which refuses a symlink, a file of an untrusted owner and a group/world-writable mode, so a
forged segment never serves events or a "Healthy" writer.

Readers are not thread-safe (one render buffer per reader); use one reader per thread.
"""

from __future__ import annotations

import dataclasses
import uuid as _uuid
from collections.abc import Iterator
from typing import NamedTuple

from . import segment as _seg
from . import verification as _verification
from ._ringext import ffi, lib
from .errors import ShmError
from .record import Event
from .ring import Mapped, events_from, instance_uuid_bytes

__all__ = ["RingReader", "Cursor", "CursorBatch", "CursorJsonBatch", "JsonPieces", "RingStats", "verify"]

_MAX_BUF = 64 << 20


class CursorBatch(NamedTuple):
    events: list[Event]
    lost: tuple[int, int] | None


@dataclasses.dataclass(slots=True)
class JsonPieces:
    """What `read_range_json_parts` rendered so far: events, and whether the piece it yielded
    last was the last one (so a sender can mark it so without rendering ahead)."""

    count: int = 0
    done: bool = False


class CursorJsonBatch(NamedTuple):
    lines: bytes
    count: int
    lost: tuple[int, int] | None


@dataclasses.dataclass(frozen=True, slots=True)
class RingStats:
    """Everything `ykshm ring stat` and /ws/v1/metrics show about one ring."""

    name: str
    instance_uuid: str
    capacity: int
    lowest_id: int | None
    highest_id: int | None
    next_id: int
    events_retained: int
    events_written: int
    writer_pid: int
    writer_alive: bool
    heartbeat_nano: int
    created_nano: int
    superseded: bool
    writers_attached: int
    strings_used: int            # live intern entries (strings, resources and pairs)
    strings_capacity: int
    resources_used: int          # live entries of kind resource
    pairs_used: int              # live entries of kind pair (an event's message + resource)
    intern_high_water: int
    strings_interned: int
    strings_released: int
    intern_hits: int
    intern_full_drops: int
    strings_cut: int
    messages_cut: int
    intern_bytes_used: int       # arena bytes in live blocks
    intern_bytes_capacity: int
    arena_bump_bytes: int
    events_segment_bytes: int
    requests_segment_bytes: int
    bytes_in_use: int            # sum of the segment sizes (NAME.events + NAME.requests)
    bytes_per_event: float       # bytes_in_use / capacity
    request_capacity: int
    requests_written: int
    requests_delivered: int
    requests_overwritten: int
    requests_skipped: int        # corrupt or forged request slots refused by the taker


class RingReader:
    """A read-only view of NAME.events.  Never writes to shared memory."""

    name: str
    instance_uuid: str
    capacity: int

    def __init__(self, name: str, ev: Mapped) -> None:
        self.name = name
        self._ev = ev
        self._view = ev.view
        self._hdr = ev.hdr
        self.capacity = int(self._hdr.capacity)
        self.instance_uuid = str(_uuid.UUID(bytes=instance_uuid_bytes(self._hdr)))
        self._buflen = 1 << 20
        self._buf = ffi.new("char[]", self._buflen)
        self._res = ffi.new("ykr_render_result *")
        self._b = ffi.new("uint64_t[2]")

    @classmethod
    def attach(cls, name: str) -> "RingReader":
        """Map NAME.events read-only.  RingNotFoundError / RingFormatError."""
        path = _seg.segment_paths(name).events
        mm, ino = _seg.open_ro(path)
        return cls(name, Mapped(mm, lib.YKR_KIND_EVENTS, path, ino))

    # -- header

    @property
    def _h(self):
        if self._ev is None:
            self._closed()
        return self._hdr

    @property
    def writer_pid(self) -> int:
        return int(self._h.writer_pid)

    def heartbeat_nano(self) -> int:
        return int(self._h.heartbeat_nano)

    def writer_alive(self) -> bool:
        h = self._h
        if h.superseded or h.writer_closed:
            return False
        return _seg.pid_exists(int(h.writer_pid))

    def instance_changed(self) -> bool:
        """True once this instance was superseded, replaced or removed (re-attach then)."""
        if self._h.superseded:
            return True
        return _seg.inode_of(self._ev.path) != self._ev.ino

    def _closed(self) -> None:
        raise ShmError(f"ring reader {self.name!r} is closed")

    def wake_seq(self) -> int:
        """The writer's wake counter (0 until a writer calls `RingWriter.wake`)."""
        return int(self._h.wake_seq)

    def wait_for_wake(self, seen: int, timeout: float) -> bool:
        """Block this thread until the wake counter differs from `seen`, or `timeout` seconds.

        FUTEX_WAIT on the header word (`ykr_wait`, ring.c) reads it only, so a read-only mapping
        can wait. Meant for a worker thread (`trio.to_thread`): the call releases the GIL while
        it sleeps. True when woken (or the counter already differed), False on timeout."""
        return bool(lib.ykr_wait(self._h, seen & 0xFFFFFFFF, max(0.0, timeout)))

    def bounds(self) -> tuple[int, int] | None:
        if self._ev is None:
            self._closed()
        b = self._b
        if not lib.ykr_bounds(self._view, b, b + 1):
            return None
        return int(b[0]), int(b[1]) - 1

    # -- reading

    def _render(self, start: int, count: int, mode: int, cursor: int):
        if self._ev is None:
            self._closed()
        parts: list[bytes] = []
        total = 0
        lost = None
        nid = start
        res = self._res
        while total < count:
            lib.ykr_render(self._view, nid, count - total, mode, cursor, self._buf,
                           self._buflen, res)
            if res.has_lost:
                if total:
                    break       # report this loss on the next call
                lost = (int(res.lost_first), int(res.lost_last))
            if res.length:
                parts.append(ffi.buffer(self._buf, res.length)[:])
            total += res.count
            nid = int(res.next_id)
            if not res.more:
                break
            if self._buflen < _MAX_BUF:
                # grow once to what the rest needs at this call's bytes/event (+ headroom)
                per = max(64, res.length // max(1, res.count))
                want = per * (count - total) * 5 // 4 + 2 * lib.YKR_MAX_EVENT_JSON
                self._buflen = min(_MAX_BUF, max(self._buflen * 2, want))
                self._buf = ffi.new("char[]", self._buflen)
        return parts, total, nid, lost

    def read_range(self, start: int, count: int) -> list[Event]:
        """Events start..start+count-1 that are retained, in order ([] outside the bounds)."""
        if start < 0 or count <= 0:
            return []
        parts, n, _, _ = self._render(start, count, 0, 0)
        if not n:
            return []
        return events_from(parts)

    def read_range_json(self, start: int, count: int) -> tuple[bytes, int]:
        """The same as read_range, rendered in C to a JSON array (b"null" when none)."""
        pieces = JsonPieces()
        body = b"".join(self.read_range_json_parts(start, count, count, pieces=pieces))
        return body, pieces.count

    def read_range_json_parts(self, start: int, count: int, part: int, head: bytes = b"",
                              tail: bytes = b"", pieces: "JsonPieces | None" = None) -> Iterator[bytes]:
        """read_range_json's array, `head` before it and `tail` after it, in pieces of at most
        `part` events, each rendered when asked for: an answer sent while the rest renders.

        Each piece is copied out of the render buffer once (with its `[`/`,` and, on the last,
        `]` + tail): for 10,000 events 2.8 MB are copied once, not four times as a join of joins
        did, and fresh pages cost more than the copy (a page fault per 4 KiB, measured 58% of a
        render loop's CPU in the kernel). Events overwritten while a piece renders are skipped,
        as in read_range_json; `pieces` counts them and tells the last piece."""
        pieces = JsonPieces() if pieces is None else pieces
        if start < 0 or count <= 0 or part <= 0:
            pieces.done = True
            yield head + b"null" + tail
            return
        b = self.bounds()
        end = start if b is None else min(start + count, b[1] + 1)
        lead, nid, res, opened = head + b"[", start, self._res, False
        while nid < end:
            lib.ykr_render(self._view, nid, min(part, end - nid), 0, 0, self._buf, self._buflen, res)
            if not res.count:
                b = self.bounds()
                if not opened or b is None or nid >= b[0]:
                    break    # a range that starts below the lowest event is none (read_range)
                nid = b[0]   # lapped since the last piece: go on from the lowest retained event
                continue
            nid = int(res.next_id)
            pieces.count += int(res.count)
            close = b"]" + tail if nid >= end else b""
            pieces.done = bool(close)
            yield b"".join((lead, ffi.buffer(self._buf, res.length), close))
            if close:
                return
            lead, opened = b",", True
        pieces.done = True
        yield b"]" + tail if opened else head + b"null" + tail

    def _recent_start(self, n: int) -> tuple[int, int] | None:
        b = self.bounds()
        if b is None or n <= 0:
            return None
        lo = max(b[0], b[1] - n + 1)
        return lo, b[1] - lo + 1

    def read_recent(self, n: int) -> list[Event]:
        """The most recent n retained events (all retained ones if fewer), oldest first."""
        r = self._recent_start(n)
        return [] if r is None else self.read_range(*r)

    def read_recent_json(self, n: int) -> tuple[bytes, int]:
        r = self._recent_start(n)
        return (b"null", 0) if r is None else self.read_range_json(*r)

    def cursor(self, next_id: int) -> "Cursor":
        if next_id < 0:
            raise ValueError(f"cursor start must be >= 0, got {next_id}")
        return Cursor(self, next_id)

    # -- counters and checks

    def _requests_header(self):
        path = _seg.segment_paths(self.name).requests
        try:
            mm, ino = _seg.open_ro(path)
            req = Mapped(mm, lib.YKR_KIND_REQUESTS, path, ino)
        except ShmError:   # missing, or not a request store
            return None
        try:
            h = req.hdr
            if instance_uuid_bytes(h) != instance_uuid_bytes(self._hdr):
                return None
            return {"capacity": int(h.capacity), "size": int(h.total_size),
                    "written": int(h.events_written), "delivered": int(h.req_delivered),
                    "overwritten": int(h.req_overwritten), "skipped": int(h.req_skipped)}
        finally:
            req.close()

    def stats(self) -> RingStats:
        h = self._h
        b = self.bounds()
        req = self._requests_header() or {"capacity": 0, "size": 0, "written": 0,
                                           "delivered": 0, "overwritten": 0, "skipped": 0}
        total = int(h.total_size) + req["size"]
        return RingStats(
            name=self.name,
            instance_uuid=self.instance_uuid,
            capacity=self.capacity,
            lowest_id=None if b is None else b[0],
            highest_id=None if b is None else b[1],
            next_id=int(h.next_id),
            events_retained=0 if b is None else b[1] - b[0] + 1,
            events_written=int(h.events_written),
            writer_pid=int(h.writer_pid),
            writer_alive=self.writer_alive(),
            heartbeat_nano=int(h.heartbeat_nano),
            created_nano=int(h.created_nano),
            superseded=bool(h.superseded),
            writers_attached=int(h.writers_attached),
            strings_used=int(h.entries_live),
            strings_capacity=int(h.entries_capacity) - 1,
            resources_used=int(h.entries_live_resources),
            pairs_used=int(h.entries_live_pairs),
            intern_high_water=int(h.entries_hwm) - 1,
            strings_interned=int(h.strings_interned),
            strings_released=int(h.strings_released),
            intern_hits=int(h.intern_hits),
            intern_full_drops=int(h.intern_full_drops),
            strings_cut=int(h.strings_cut),
            messages_cut=int(h.messages_cut),
            intern_bytes_used=int(h.arena_live_bytes),
            intern_bytes_capacity=int(h.arena_capacity),
            arena_bump_bytes=int(h.arena_bump),
            events_segment_bytes=int(h.total_size),
            requests_segment_bytes=req["size"],
            bytes_in_use=total,
            bytes_per_event=total / self.capacity,
            request_capacity=req["capacity"],
            requests_written=req["written"],
            requests_delivered=req["delivered"],
            requests_overwritten=req["overwritten"],
            requests_skipped=req["skipped"],
        )

    def verify(self, max_lines: int = 1000) -> _verification.VerifyReport:
        """Check every invariant of the ring; returns the violations (empty = consistent).
        See `shm.verification`."""
        caveats = []
        if self.writer_alive():
            caveats.append(f"writer active (pid {self.writer_pid}): the check races it, "
                           f"violations may be transient")
        b = self.bounds()
        records = 0 if b is None else b[1] - b[0] + 1
        return _verification.check(self._view, self._h, max_lines, caveats, records)

    def stats_dict(self) -> dict:
        return dataclasses.asdict(self.stats())

    def close(self) -> None:
        if self._ev is not None:
            self._view = self._hdr = None
            self._ev.close()
            self._ev = None

    def __enter__(self) -> "RingReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Cursor:
    """Follows a ring from `next_id` on; see poll()."""

    def __init__(self, reader: RingReader, next_id: int) -> None:
        self._reader = reader
        self.next_id = next_id

    def poll(self, max_events: int = 1000) -> CursorBatch:
        """New events (up to max_events).  lost = (first, last) ids overwritten before this
        cursor read them; the cursor then continues at the lowest retained id."""
        if max_events <= 0:
            return CursorBatch([], None)
        parts, n, nid, lost = self._reader._render(self.next_id, max_events, 0, 1)
        self.next_id = nid
        if not n:
            return CursorBatch([], lost)
        return CursorBatch(events_from(parts), lost)

    def poll_json(self, max_events: int = 1000) -> CursorJsonBatch:
        """The same as poll, as NDJSON lines rendered in C."""
        if max_events <= 0:
            return CursorJsonBatch(b"", 0, None)
        parts, n, nid, lost = self._reader._render(self.next_id, max_events, 1, 1)
        self.next_id = nid
        return CursorJsonBatch(b"".join(parts), n, lost)


def verify(name_or_reader: "str | RingReader") -> _verification.VerifyReport:
    """verify() of the ring NAME (or of an attached reader)."""
    if isinstance(name_or_reader, RingReader):
        return name_or_reader.verify()
    with RingReader.attach(name_or_reader) as reader:
        return reader.verify()
