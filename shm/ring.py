"""The shared-memory event ring: one writer (the engine), many read-only readers.

Layout of ``NAME.events`` (declared once, as C structs, in ``shm/ring.h``)
--------------------------------------------------------------------------
::

    header   4096 B   magic, layout version, instance UUID, capacity, record size, offsets,
                      next id, lowest id, writer pid, heartbeat, superseded flag, counters
    records  48 B * C ykr_record {seq, timestamp_nano, reference[16], object_id, message,
                      resource, change_detail, type, flags}
    entries  20 B * E intern entries {next, refcount, hash, offset, length, size_class, kind}
    buckets   4 B * B hash chain heads (B = next power of two >= E)
    arena         A   string/resource bytes in blocks of 16 << k bytes, k = 0..6 (16..1024)

with C = capacity, E = C // 16 + 1024, B = next_pow2(E), A = round64(C * 3 // 2 + 1 MiB),
every part 64-byte aligned and the total rounded up to 4096:

    events_bytes(C)   = round4096(4096 + 48*C + 20*E + 4*B + A)          (+ alignment padding)
    requests_bytes(R) = 4096 + 4096*R
    total             = events_bytes(C) + requests_bytes(R)

For C = 9,000,000 and R = 1000 that is 462,020,608 + 4,100,096 = 466,120,704 bytes = 444.5 MiB
(51.8 bytes per event; the seed's normal mix needs about one intern entry per retained
application plus a few resources -- ~45k of the 563k entries for 9M events -- and no drops).  `ring_bytes(C, R)` computes the total; the snapshot segment (NAME.state) is not event
storage and is sized separately.  Segments are fallocate'd at creation (a full /dev/shm fails
`create`, never SIGBUSes the writer later) and the writer maps them with MAP_POPULATE.

Records and the seqlock
-----------------------
``seq`` is 0 for a slot never written, ``2*id+1`` while the writer fills it for event ``id``,
``2*(id+1)`` once stable.  The writer stores the odd value (release), then a release fence,
releases the old record's interned strings, interns the new ones, stores the fields, stores the
even value (release) and finally ``next_id`` (release).  A reader loads seq (acquire), copies the
record, renders the strings it references, then re-reads seq after an acquire fence: any change
means the slot (and possibly its strings) was overwritten, and the copy is discarded.  IDs start
at 0 per instance and never repeat.

Interning
---------
objectID, message, non-UUID referenceIDs (kind 0) and resources (kind 1, canonical sorted
compact JSON ``{"memory":1024,"vcore":1000}``) are interned with reference counts; a canonical
lowercase UUID referenceID is stored as its 16 raw bytes instead (it renders back identically).
When the last retained record using an entry is overwritten the entry and its arena block go
back to free lists (a size-class free list per block size; a larger free block is split when a
class is empty and the bump region is exhausted).  The seed's mix uses a handful of entries per
100-pod application, far below E.  When the table or arena is genuinely full (pathological,
all-unique strings) the field stores the YKR_OVERFLOW handle, which renders as
``<ykshm:intern-table-full>`` (a resource is then omitted), and ``intern_full_drops`` counts it:
never a silent loss, and never an early overwrite of older records.  Strings over 1024 bytes
are cut like messages (1021 bytes of whole UTF-8 characters + "..."), counted in
``messages_cut`` / ``strings_cut``.

Writers and instances
---------------------
One writer at a time: ``flock(LOCK_EX|LOCK_NB)`` on the segment held for the writer's life, and
its pid in the header.  `RingWriter.create` replaces a ring whose writer is dead: the new
segments are built under temporary names and renamed over the old ones, then the old header is
marked superseded; readers see `instance_changed()` (superseded flag or a different inode at
the path) and re-attach.

The writer's hot path
---------------------
What an engine publish costs is mostly crossing from Python into C (cffi converts each
`const char *` argument at ~45 ns, each int at ~12 ns), so the common event -- the same objectID
as the last one, no message, no or the same resource, the ring's clock -- passes only its kind
and referenceID: the current objectID and resource are *pinned* (interned, with one reference
the header holds, counted by `verify()`) and C takes them from the header (`_make_publish`).
The extension keeps the GIL during its calls (see `shm/_ring_build.py`), and a UUID is parsed
through a table, not a branch per hex digit. A closed writer's view is cleared, so a `publish`
kept from before `close()` raises ShmError instead of touching unmapped memory.

Readers are not thread-safe (one render buffer per reader); use one reader per thread.
"""

from __future__ import annotations

import dataclasses
import fcntl
import mmap
import os
import time
import uuid as _uuid
from collections.abc import Mapping
from typing import NamedTuple

import orjson

from . import futex as _futex
from . import segment as _seg
from ._ringext import ffi, lib
from .errors import RingBusyError, RingFormatError, RingNotFoundError, ShmError
from .record import Event, _from_rendered

__all__ = [
    "RingWriter",
    "RingReader",
    "Cursor",
    "CursorBatch",
    "CursorJsonBatch",
    "RingStats",
    "VerifyReport",
    "verify",
    "ring_bytes",
    "encode_resource",
]

_ERRORS = {
    lib.YKR_E_BADTYPE: "type must be 0..255",
    lib.YKR_E_BADCHANGE: "change_type must be 0..7",
    lib.YKR_E_BADDETAIL: "change_detail must be 0..65535",
    lib.YKR_E_BADRESOURCE: "resource must map non-empty names to int64 integers",
    lib.YKR_E_RESOURCE_TOO_LARGE: f"resource encodes to more than {lib.YKR_MAX_RESOURCE} bytes",
    lib.YKR_E_NOT_PINNED: "the ring holds no pin for this writer (closed, or another writer took over)",
    lib.YKR_E_CLOSED: "ring writer is closed",
    lib.YKR_E_MAGIC: "bad magic (not a ykshm segment of this kind)",
    lib.YKR_E_VERSION: "unsupported layout version",
    lib.YKR_E_SIZE: "file smaller than its header says",
    lib.YKR_E_KIND: "wrong segment kind",
    lib.YKR_E_LAYOUT: "header layout fields inconsistent",
}


def _publish_error(rc: int) -> Exception:
    """The exception for a negative publish result: ShmError once closed, else ValueError."""
    if rc == -lib.YKR_E_CLOSED:
        return ShmError("ring writer is closed")
    return ValueError(f"publish: {_ERRORS.get(-rc, rc)}")


def _bytes_len_trick_works() -> bool:
    probes = [b"", b"a", b"\x00\x00abc", b"x" * 5000, "é".encode(), bytes(range(256))]
    return all(lib.ykr_bytes_len_probe(b) == len(b) for b in probes)


_FAST = _bytes_len_trick_works()
_dumps = orjson.dumps
_SORT = orjson.OPT_SORT_KEYS
_loads = orjson.loads
_MAX_BUF = 64 << 20


def ring_bytes(capacity: int, request_capacity: int = 1000) -> int:
    """Total bytes of NAME.events + NAME.requests for these capacities."""
    a = ffi.new("ykr_layout *")
    lib.ykr_events_layout(capacity, a)
    b = ffi.new("ykr_layout *")
    lib.ykr_requests_layout(request_capacity, b)
    return a.total_size + b.total_size


def _now() -> int:
    return time.time_ns()


def _header_of(buf) -> "ffi.CData":
    return ffi.cast("ykr_header *", buf)


def _events(parts: list[bytes]) -> list[Event]:
    """Events from C-rendered JSON objects joined by "," (`parts` of ykr_render / ykr_req_take)."""
    return [_from_rendered(d) for d in _loads(b"[" + b",".join(parts) + b"]")]


def encode_resource(resource: Mapping[str, int] | bytes | None) -> bytes:
    """The ring's canonical encoding of a resource: compact JSON, names sorted, int64 values.

    `RingWriter.publish` accepts the result in place of the mapping, so a caller holding an
    immutable resource can encode it once.  Empty or None -> b"".
    """
    if not resource:
        return b""
    if isinstance(resource, (bytes, bytearray, memoryview)):
        return bytes(resource)
    if type(resource) is not dict:
        resource = dict(resource)
    return _dumps(resource, option=_SORT)


class _Mapped:
    """A mapped segment with its cffi buffer and view (writable or read-only)."""

    def __init__(self, mm: mmap.mmap, kind: int, path: str, ino: int) -> None:
        self.mm = mm
        self.path = path
        self.ino = ino
        self.buf = ffi.from_buffer("uint8_t[]", mm)
        self.view = ffi.new("ykr_view *")
        rc = lib.ykr_view_init(self.view, self.buf, len(mm), kind)
        if rc < 0:
            self.close()
            raise RingFormatError(f"{path}: {_ERRORS.get(-rc, rc)}")
        self.hdr = _header_of(self.buf)

    def close(self) -> None:
        if self.mm is None:
            return
        self.view = None
        self.hdr = None
        ffi.release(self.buf)
        self.buf = None
        try:
            self.mm.close()
        except BufferError:
            pass
        self.mm = None


def _init_segment(path: str, kind: int, capacity: int, uid: bytes, group) -> tuple[int, str, mmap.mmap]:
    layout = ffi.new("ykr_layout *")
    if kind == lib.YKR_KIND_EVENTS:
        lib.ykr_events_layout(capacity, layout)
    else:
        lib.ykr_requests_layout(capacity, layout)
    fd, tmp = _seg.create_temp(path, layout.total_size, group)
    try:
        mm = _seg.map_rw(fd)
        buf = ffi.from_buffer("uint8_t[]", mm)
        rc = lib.ykr_init(buf, len(mm), kind, capacity, uid, _now())
        ffi.release(buf)
        if rc < 0:
            raise ShmError(f"cannot initialise {tmp}: {_ERRORS.get(-rc, rc)}")
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    return fd, tmp, mm


def _busy(name: str, fd: int) -> RingBusyError:
    pid = 0
    try:
        mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        try:
            buf = ffi.from_buffer("uint8_t[]", mm)
            if len(mm) >= lib.YKR_HEADER_SIZE:
                pid = int(_header_of(buf).writer_pid)
            ffi.release(buf)
        finally:
            mm.close()
    except (OSError, ValueError):
        pass
    who = f"pid {pid}" if pid else "another process"
    return RingBusyError(f"ring {name!r} already has a live writer ({who}); "
                         f"stop it first or use another --name", pid)


def _lock_existing(name: str, path: str) -> int | None:
    return _seg.lock_existing(path, lambda fd: _busy(name, fd), f"ring {name!r}")


def _mark_superseded(fd: int) -> None:
    try:
        old = _Mapped(_seg.map_rw(fd), lib.YKR_KIND_EVENTS, "", 0)
    except (OSError, ValueError, RingFormatError):
        return   # empty or not a ring: nobody reads it as one
    try:
        h = old.hdr
        h.superseded = 1
        h.writer_pid = 0
        h.writer_closed = 1
    finally:
        old.close()


def _make_publish(view):
    """RingWriter.publish as a closure over the writer's view: every name it uses is a local or
    a cell, no attribute or global lookups on the hot path (same behaviour as the method).

    Fast path (no message, no explicit timestamp): the objectID and the resource are *pinned*
    in the ring (ykr_pin: interned, with one reference the header holds) and C takes them from
    the header, so the call converts one string, the reference, instead of three: cffi converts
    a `const char *` argument at ~45 ns, more than the C work of a record. The objectID pin is
    used while the very same str object comes again (str is immutable and `last_obj` holds a
    reference, so identity means equal content); the resource pin while an equal resource comes
    (`last_res` is a private copy, so a caller mutating its dict cannot make it stale).
    `verify()` counts the header's references.
    """
    publish_b = lib.ykr_publish_b
    publish_b2 = lib.ykr_publish_b2
    publish_b3 = lib.ykr_publish_b3
    publish_p0 = lib.ykr_publish_p0
    publish_p1 = lib.ykr_publish_p1
    pin = lib.ykr_pin
    dumps = orjson.dumps
    sort = orjson.OPT_SORT_KEYS
    encode = encode_resource
    # closure cells, cheaper on the hot path than attributes or list subscripts:
    last_obj = None        # the objectID str the header pins (None: do not use the pin)
    last_res = None        # a copy of the resource dict the header pins (None: no usable pin)
    res_pinned = False     # the header pins the last resource encoded (a dict or bytes)
    last_res_bytes = b""   # the encoding of the last resource encoded

    def pin_resource(resource) -> bytes:
        """Encode a resource unlike the last and pin it; its bytes (the pin may fail)."""
        nonlocal last_res, res_pinned, last_res_bytes
        try:
            res = dumps(resource, option=sort)
        except TypeError:
            res = encode(resource)
        res_pinned = bool(pin(view, 1, res, len(res)))
        last_res = resource.copy() if res_pinned and isinstance(resource, dict) else None
        last_res_bytes = res
        return res

    def publish_cold(type, change_type, change_detail, object_id, reference_id, message,
                     resource, timestamp_nano) -> int:
        """Everything but the hot case: a message, a timestamp, a new objectID or resource."""
        nonlocal last_obj
        res = b""
        if resource:
            res = last_res_bytes if resource == last_res else pin_resource(resource)
        if message or timestamp_nano:
            return publish_b(view, type, change_type, change_detail, timestamp_nano,
                             object_id.encode(), reference_id.encode(), message.encode(), res)
        if object_id is not last_obj:
            ob = object_id.encode()
            last_obj = object_id if pin(view, 0, ob, len(ob)) else None
        if last_obj is not None:
            if not resource:
                return publish_p0(view, type, change_type, change_detail, reference_id.encode())
            if res_pinned:
                return publish_p1(view, type, change_type, change_detail, reference_id.encode())
        if resource:
            return publish_b3(view, type, change_type, change_detail, object_id.encode(),
                              reference_id.encode(), res)
        return publish_b2(view, type, change_type, change_detail, object_id.encode(),
                          reference_id.encode())

    def publish(type: int, change_type: int, change_detail: int, object_id: str = "",
                reference_id: str = "", message: str = "",
                resource: Mapping[str, int] | bytes | None = None,
                timestamp_nano: int = 0) -> int:
        # hot case: the same objectID str as last time, no or an equal resource, nothing else
        if object_id is last_obj and not message and not timestamp_nano:
            if not resource:
                rid = publish_p0(view, type, change_type, change_detail, reference_id.encode())
            elif resource == last_res:
                rid = publish_p1(view, type, change_type, change_detail, reference_id.encode())
            else:
                rid = publish_cold(type, change_type, change_detail, object_id, reference_id,
                                   message, resource, timestamp_nano)
        else:
            rid = publish_cold(type, change_type, change_detail, object_id, reference_id,
                               message, resource, timestamp_nano)
        if rid < 0:
            raise _publish_error(rid)
        return rid

    return publish


class RingWriter:
    """The single writer of an instance's event ring and request store."""

    name: str
    instance_uuid: str
    capacity: int
    request_capacity: int

    def __init__(self, name: str, ev_fd: int, ev: _Mapped, req_fd: int, req: _Mapped) -> None:
        self.name = name
        self._ev_fd = ev_fd
        self._ev = ev
        self._req_fd = req_fd
        self._req = req
        self._view = ev.view
        self._req_view = req.view
        self.capacity = int(ev.hdr.capacity)
        self.request_capacity = int(req.hdr.capacity)
        self.instance_uuid = str(_uuid.UUID(bytes=bytes(ffi.buffer(ev.hdr.instance_uuid, 16))))
        self._take_buf = ffi.new("char[]", 1 << 20)
        self._take_len = ffi.new("uint64_t *")
        self._closed = False
        lib.ykr_set_writer(self._view, os.getpid(), _now())
        if _FAST:
            self.publish = _make_publish(self._view)  # type: ignore[method-assign]

    # -- construction

    @classmethod
    def create(cls, name: str, capacity: int, request_capacity: int = 1000,
               *, group: str | None = None) -> "RingWriter":
        """Create (or replace) NAME.events and NAME.requests; see the module docstring."""
        paths = _seg.segment_paths(name)
        if not isinstance(capacity, int) or not 1 <= capacity <= 0xFFFFFFFF:
            raise ValueError(f"ring capacity must be 1..4294967295, got {capacity!r}")
        if not isinstance(request_capacity, int) or not 0 <= request_capacity <= 0xFFFFFFFF:
            raise ValueError(f"request capacity must be 0..4294967295, got {request_capacity!r}")
        old_fd = _lock_existing(name, paths.events)
        made: list[tuple[int, str, mmap.mmap]] = []   # (fd, temp path, mapping) to undo
        try:
            uid = _uuid.uuid4().bytes
            made.append(_init_segment(paths.events, lib.YKR_KIND_EVENTS, capacity, uid, group))
            fcntl.flock(made[0][0], fcntl.LOCK_EX | fcntl.LOCK_NB)
            made.append(_init_segment(paths.requests, lib.YKR_KIND_REQUESTS, request_capacity,
                                      uid, group))
            os.rename(made[1][1], paths.requests)
            os.rename(made[0][1], paths.events)   # the new instance becomes visible here
            if old_fd is not None:
                _mark_superseded(old_fd)
        except BaseException:
            for fd, tmp, mm in made:
                mm.close()
                os.close(fd)
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass
            raise
        finally:
            if old_fd is not None:
                os.close(old_fd)   # releases the old lock
        (ev_fd, _, ev_mm), (req_fd, _, req_mm) = made
        ev = _Mapped(ev_mm, lib.YKR_KIND_EVENTS, paths.events, os.fstat(ev_fd).st_ino)
        req = _Mapped(req_mm, lib.YKR_KIND_REQUESTS, paths.requests, os.fstat(req_fd).st_ino)
        return cls(name, ev_fd, ev, req_fd, req)

    @classmethod
    def open_existing(cls, name: str) -> "RingWriter":
        """Become the writer of an existing ring (same instance UUID)."""
        paths = _seg.segment_paths(name)
        fd = _lock_existing(name, paths.events)
        if fd is None:
            raise RingNotFoundError(f"no ring named {name!r} ({paths.events} does not exist)")
        try:
            ev = _Mapped(_seg.map_rw(fd), lib.YKR_KIND_EVENTS, paths.events, os.fstat(fd).st_ino)
        except BaseException:
            os.close(fd)
            raise
        try:
            if ev.hdr.superseded:
                raise RingFormatError(f"ring {name!r} was superseded")
            nx = int(ev.hdr.next_id)
            if ev.view.records[nx % ev.view.capacity].seq & 1:
                # a writer died between the odd and even sequence store: the slot's strings may
                # be half released, so continuing this instance could corrupt refcounts
                raise RingFormatError(f"ring {name!r} was left mid-write by a crashed writer "
                                      f"(event {nx}); create a new instance instead")
            uid = bytes(ffi.buffer(ev.hdr.instance_uuid, 16))
            try:
                req_fd = os.open(paths.requests, os.O_RDWR | os.O_CLOEXEC)
                req = _Mapped(_seg.map_rw(req_fd), lib.YKR_KIND_REQUESTS, paths.requests,
                              os.fstat(req_fd).st_ino)
                if bytes(ffi.buffer(req.hdr.instance_uuid, 16)) != uid:
                    req.close()
                    os.close(req_fd)
                    raise FileNotFoundError
            except FileNotFoundError:
                req_fd, tmp, mm = _init_segment(paths.requests, lib.YKR_KIND_REQUESTS, 1000, uid, None)
                os.rename(tmp, paths.requests)
                req = _Mapped(mm, lib.YKR_KIND_REQUESTS, paths.requests, os.fstat(req_fd).st_ino)
        except BaseException:
            ev.close()
            os.close(fd)
            raise
        return cls(name, fd, ev, req_fd, req)

    # -- hot path

    def publish(self, type: int, change_type: int, change_detail: int, object_id: str = "",
                reference_id: str = "", message: str = "",
                resource: Mapping[str, int] | bytes | None = None, timestamp_nano: int = 0) -> int:
        """Append one event; returns its id.  Never blocks, no syscall.

        `resource` is a mapping name -> int (int64), or its `encode_resource` bytes.
        ValueError for out-of-range enums or resource values.

        This is the portable path (lengths passed explicitly). Where the interpreter lays out
        `bytes` as probed at import (`_FAST`), __init__ replaces it per writer with the
        `_make_publish` closure, which behaves the same and is faster.
        """
        if self._closed:
            raise ShmError("ring writer is closed")
        o = object_id.encode()
        r = reference_id.encode()
        m = message.encode()
        res = encode_resource(resource)
        rid = lib.ykr_publish(self._view, type, change_type, change_detail, timestamp_nano,
                              o, len(o), r, len(r), m, len(m), res, len(res))
        if rid < 0:
            raise _publish_error(rid)
        return rid

    def publish_request(self, object_id: str, reference_id: str, message: str,
                        resource: Mapping[str, int] | None = None,
                        timestamp_nano: int = 0) -> None:
        """Store a REQUEST/NONE event for the shim (dropped if the store has capacity 0)."""
        if self._closed:
            raise ShmError("ring writer is closed")
        if self.request_capacity == 0:
            return
        o = object_id.encode()
        r = reference_id.encode()
        m = message.encode()
        res = encode_resource(resource)
        rc = lib.ykr_req_publish(self._req_view, timestamp_nano, o, len(o), r, len(r),
                                 m, len(m), res, len(res))
        if rc < 0:
            raise ValueError(f"publish_request: {_ERRORS.get(-rc, rc)}")

    def take_requests(self, max_events: int = 1000) -> list[Event]:
        """Undelivered request events, oldest first; their slots are cleared."""
        if self._closed:
            raise ShmError("ring writer is closed")
        out: list[Event] = []
        while len(out) < max_events and self.request_capacity:
            n = lib.ykr_req_take(self._req_view, max_events - len(out), self._take_buf,
                                 len(self._take_buf), self._take_len)
            if n <= 0:
                break
            out.extend(_events([ffi.buffer(self._take_buf, self._take_len[0])[:]]))
        return out

    def heartbeat(self) -> None:
        """header.heartbeat_nano = now, and `wake()`: writers heartbeat between batches (the engine
        once per scheduling cycle), which is exactly when waiting readers should look."""
        if not self._closed:
            lib.ykr_heartbeat(self._view, 0)
            lib.ykr_wake(self._view)

    def wake(self) -> bool:
        """Wake readers waiting for new events (`RingReader.wait_for_wake`), if any were published
        since the last call: one FUTEX_WAKE syscall, whatever the number of waiters. Publish never
        does this itself; a writer calls it after a batch (the engine: around each cycle)."""
        if self._closed:
            return False
        return bool(lib.ykr_wake(self._view))

    @property
    def next_id(self) -> int:
        return int(self._ev.hdr.next_id)

    # -- lifecycle

    def close(self) -> None:
        """Stop writing and release the lock; the segments stay."""
        if self._closed:
            return
        lib.ykr_wake(self._view)        # what was published last reaches waiting readers now
        self._closed = True
        lib.ykr_unpin_all(self._view)   # a closed writer holds no references of its own
        lib.ykr_set_writer(self._view, 0, _now())
        self.publish = self._publish_closed  # type: ignore[method-assign]
        lib.ykr_view_clear(self._view)   # a publish kept from before now fails, touching nothing
        self._view = self._req_view = None
        self._ev.close()
        self._req.close()
        os.close(self._ev_fd)
        os.close(self._req_fd)

    def _publish_closed(self, *args, **kwargs) -> int:
        raise ShmError("ring writer is closed")

    def unlink(self) -> None:
        """Remove this instance's ring segments (not a newer instance's)."""
        for path, ino in ((self._ev.path, self._ev.ino), (self._req.path, self._req.ino)):
            if _seg.inode_of(path) == ino:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass

    def __enter__(self) -> "RingWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------------------------- readers


class CursorBatch(NamedTuple):
    events: list[Event]
    lost: tuple[int, int] | None


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
    strings_used: int            # live intern entries (strings + resources)
    strings_capacity: int
    resources_used: int          # live entries of kind resource
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


class VerifyReport(list):
    """verify()'s result: a list of violation strings (empty = consistent), plus context.

    The list stops at verify's `max_lines` with a last line "... and K more violations";
    `total` counts every violation found.
    """

    def __init__(self, violations, records: int, strings: int, caveats: list[str],
                 total: int) -> None:
        super().__init__(violations)
        self.records = records
        self.strings = strings
        self.caveats = caveats
        self.total = total

    @property
    def violations(self) -> list[str]:
        return list(self)

    @property
    def ok(self) -> bool:
        return not self


class RingReader:
    """A read-only view of NAME.events.  Never writes to shared memory."""

    name: str
    instance_uuid: str
    capacity: int

    def __init__(self, name: str, ev: _Mapped) -> None:
        self.name = name
        self._ev = ev
        self._view = ev.view
        self._hdr = ev.hdr
        self.capacity = int(self._hdr.capacity)
        self.instance_uuid = str(_uuid.UUID(bytes=bytes(ffi.buffer(self._hdr.instance_uuid, 16))))
        self._buflen = 1 << 20
        self._buf = ffi.new("char[]", self._buflen)
        self._res = ffi.new("ykr_render_result *")
        self._b = ffi.new("uint64_t[2]")

    @classmethod
    def attach(cls, name: str) -> "RingReader":
        """Map NAME.events read-only.  RingNotFoundError / RingFormatError."""
        path = _seg.segment_paths(name).events
        mm, ino = _seg.open_ro(path)
        return cls(name, _Mapped(mm, lib.YKR_KIND_EVENTS, path, ino))

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

    def wait_for_wake(self, seen: int, timeout: float) -> None:
        """Block this thread until the wake counter differs from `seen`, or `timeout` seconds.

        FUTEX_WAIT on the header word reads it only, so a read-only mapping can wait. Meant for a
        worker thread (`trio.to_thread`): ctypes releases the GIL around the syscall."""
        _futex.wait(int(ffi.cast("uintptr_t", ffi.addressof(self._h, "wake_seq"))), seen, timeout)

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
        return _events(parts)

    def read_range_json(self, start: int, count: int) -> tuple[bytes, int]:
        """The same as read_range, rendered in C to a JSON array (b"null" when none)."""
        if start < 0 or count <= 0:
            return b"null", 0
        parts, n, _, _ = self._render(start, count, 0, 0)
        if not n:
            return b"null", 0
        return b"[" + b",".join(parts) + b"]", n

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
            req = _Mapped(mm, lib.YKR_KIND_REQUESTS, path, ino)
        except ShmError:   # missing, or not a request store
            return None
        try:
            h = req.hdr
            if bytes(ffi.buffer(h.instance_uuid, 16)) != bytes(ffi.buffer(self._hdr.instance_uuid, 16)):
                return None
            return {"capacity": int(h.capacity), "size": int(h.total_size),
                    "written": int(h.events_written), "delivered": int(h.req_delivered),
                    "overwritten": int(h.req_overwritten)}
        finally:
            req.close()

    def stats(self) -> RingStats:
        h = self._h
        b = self.bounds()
        req = self._requests_header() or {"capacity": 0, "size": 0, "written": 0,
                                           "delivered": 0, "overwritten": 0}
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
        )

    def verify(self, max_lines: int = 1000) -> VerifyReport:
        """Check every invariant of the ring; returns the violations (empty = consistent).

        Sequence numbers encode the retained ids, every refcount equals the references from
        retained records (no leaked entries), hash chains hold exactly the live entries, the
        entry free list and the per-class arena free lists are consistent, and live + free
        blocks tile the used arena without overlap.  With a live writer the check races it:
        a caveat says so and violations may be transient.
        """
        h = self._h
        counts = ffi.new("uint32_t[]", int(h.entries_capacity))
        bitmap = ffi.new("uint8_t[]", int(h.arena_capacity) // 16 // 8 + 1)
        out = ffi.new("char[]", 200 * (max_lines + 1))
        n = lib.ykr_verify(self._view, counts, bitmap, out, len(out))
        text = ffi.string(out).decode("utf-8", "replace")
        lines = [ln for ln in text.split("\n") if ln]
        if n > len(lines):
            lines.append(f"... and {n - len(lines)} more violations")
        caveats = []
        if self.writer_alive():
            caveats.append(f"writer active (pid {self.writer_pid}): the check races it, "
                           f"violations may be transient")
        b = self.bounds()
        records = 0 if b is None else b[1] - b[0] + 1
        return VerifyReport(lines, records, int(h.entries_live), caveats, n)

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
        return CursorBatch(_events(parts), lost)

    def poll_json(self, max_events: int = 1000) -> CursorJsonBatch:
        """The same as poll, as NDJSON lines rendered in C."""
        if max_events <= 0:
            return CursorJsonBatch(b"", 0, None)
        parts, n, nid, lost = self._reader._render(self.next_id, max_events, 1, 1)
        self.next_id = nid
        return CursorJsonBatch(b"".join(parts), n, lost)


def verify(name_or_reader: "str | RingReader") -> VerifyReport:
    """verify() of the ring NAME (or of an attached reader)."""
    if isinstance(name_or_reader, RingReader):
        return name_or_reader.verify()
    with RingReader.attach(name_or_reader) as reader:
        return reader.verify()
