"""The shared-memory event ring: its layout, and the binding to the C extension every part shares.

One writer (the engine, `shm.writer`), many read-only readers (`shm.reader`); segments are
created and locked by `shm.ringfiles`, checked by `shm.verification`.

Layout of ``NAME.events`` (declared once, as C structs, in ``shm/ring.h``)
--------------------------------------------------------------------------
::

    header   4096 B   magic, layout version, instance UUID, capacity, record size, offsets,
                      next id, lowest id, writer pid, heartbeat, superseded flag, counters
    records  40 B * C ykr_record {seq (u32), object_id, timestamp_nano, reference[16], aux,
                      change_detail, type, flags}: no padding
    entries  20 B * E intern entries {next, refcount, hash, offset, length, size_class, kind}
    buckets   4 B * B hash chain heads (B = next power of two >= E)
    arena         A   string/resource/pair bytes in blocks of 16 << k bytes, k = 0..6 (16..1024)

with C = capacity, E = C // 16 + 1024, B = next_pow2(E), A = round64(C * 3 // 2 + 1 MiB),
every part 64-byte aligned and the total rounded up to 4096:

    events_bytes(C)   = round4096(4096 + 40*C + 20*E + 4*B + A)          (+ alignment padding)
    requests_bytes(R) = 4096 + 4096*R
    total             = events_bytes(C) + requests_bytes(R)

For C = 9,000,000 and R = 1000 that is 390,021,120 + 4,100,096 = 394,121,216 bytes = 375.9 MiB
(43.8 bytes per event: records 360.0 MB, entries 11.3 MB, buckets 4.2 MB, arena 14.5 MB,
request store 4.1 MB; the seed's normal mix needs about one intern entry per retained
application plus a few resources -- ~45k of the 563k entries for 9M events -- and no drops).
`ring_bytes(C, R)` computes the total; the snapshot segment (NAME.state) is not event storage
and is sized separately.  Segments are fallocate'd at creation (a full /dev/shm fails `create`,
never SIGBUSes the writer later) and the writer maps them with MAP_POPULATE.

Layout version 2 (this one) replaced version 1's 48-byte record {u64 seq, timestamp,
reference[16], object_id, message, resource, change_detail, type, flags}: seq counts the slot's
laps in 32 bits and the message and resource share one handle, ``aux``.  A segment of another
version is refused with a RingFormatError naming both versions (`version_error`).

Records and the seqlock
-----------------------
``seq`` is 0 for a slot never written, ``2*lap+1`` while the writer fills it, ``2*lap+2`` once
stable, where ``lap = id // C`` counted modulo 2**31 - 1 (the slot is ``id % C``, so slot and
lap together name the id).  The writer stores the odd value (release), then a release fence,
releases the old record's interned strings, interns the new ones, stores the fields, stores the
even value (release) and finally ``next_id`` (release).  A reader loads seq (acquire), copies
the record, renders the strings it references, then re-reads seq after an acquire fence: any
change means the slot (and possibly its strings) was overwritten, and the copy is discarded.
32 bits of laps could only fool a reader whom the writer lapped 2**31 - 1 times between those
two loads (at C = 16, 3.4e10 events inside one record copy).  IDs start at 0 per instance and
never repeat.

Interning
---------
objectID, message, non-UUID referenceIDs (kind string) and resources (kind resource, canonical
sorted compact JSON ``{"memory":1024,"vcore":1000}``) are interned with reference counts; a
canonical lowercase UUID referenceID is stored as its 16 raw bytes instead (it renders back
identically).  ``aux`` (flags bits 4-5 say which) is the message's handle, the resource's, or --
only for an event with both -- a *pair* entry (kind pair, 8 bytes: the two handles) that holds
one reference on each; equal pairs are shared like strings.  When the last retained record
using an entry is overwritten the entry and its arena block go back to free lists (a
size-class free list per block size; a larger free block is split when a class is empty and
the bump region is exhausted); a pair released to zero releases its two parts.  The seed's mix
uses a handful of entries per 100-pod application, far below E.  When the table or arena is
genuinely full (pathological, all-unique strings) the field stores the YKR_OVERFLOW handle,
which renders as ``<ykshm:intern-table-full>`` (a resource is then omitted; a pair that does
not fit renders that marker as the message and no resource), and ``intern_full_drops`` counts
it: never a silent loss, and never an early overwrite of older records.  Strings over 1024
bytes are cut like messages (1021 bytes of whole UTF-8 characters + "..."), counted in
``messages_cut`` / ``strings_cut``.

Why 40 bytes and not less: seq (4), objectID (4), timestamp (8, any int64), UUID (16), aux (4)
and type/change/detail/flags (4) are all used by the seed's common event, a pod's allocation.
Measured: one handle for objectID, message and resource together (a 36-byte record) needs an
intern entry per distinct triple, and a node's or a stress run's events make one per record,
which overflows the C // 16 table (the torn-read stress showed overflow markers).

Readers are not thread-safe (one render buffer per reader); use one reader per thread.
"""

from __future__ import annotations

import mmap
import time
from collections.abc import Mapping

import orjson

from ._ringext import ffi, lib
from .errors import RingFormatError
from .record import Event, _from_rendered

__all__ = ["ring_bytes", "encode_resource"]

ERRORS = {
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


def error_text(rc: int) -> str:
    """What a negative ykr_* result means (the number itself if unknown)."""
    return ERRORS.get(-rc, str(rc))


def ring_bytes(capacity: int, request_capacity: int = 1000) -> int:
    """Total bytes of NAME.events + NAME.requests for these capacities."""
    a = ffi.new("ykr_layout *")
    lib.ykr_events_layout(capacity, a)
    b = ffi.new("ykr_layout *")
    lib.ykr_requests_layout(request_capacity, b)
    return a.total_size + b.total_size


def now() -> int:
    return time.time_ns()


def header_of(buf) -> "ffi.CData":
    return ffi.cast("ykr_header *", buf)


def version_error(buf) -> str:
    """Why a segment of another layout version cannot be read, naming both versions."""
    found = int(header_of(buf).version)
    return (f"layout version {found}, this ykshm reads version {lib.YKR_LAYOUT_VERSION} (the "
            f"segment was made by another ykshm release: read it with that release, or restart "
            f"its writer with this one)")


def instance_uuid_bytes(hdr) -> bytes:
    """The 16 bytes that name a ring instance (shared by its events and requests segments)."""
    return bytes(ffi.buffer(hdr.instance_uuid, 16))


def events_from(parts: list[bytes]) -> list[Event]:
    """Events from C-rendered JSON objects joined by "," (`parts` of ykr_render / ykr_req_take)."""
    return [_from_rendered(d) for d in orjson.loads(b"[" + b",".join(parts) + b"]")]


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
    return orjson.dumps(resource, option=orjson.OPT_SORT_KEYS)


class Mapped:
    """A mapped segment with its cffi buffer and view (writable or read-only)."""

    def __init__(self, mm: mmap.mmap, kind: int, path: str, ino: int) -> None:
        self.mm = mm
        self.path = path
        self.ino = ino
        self.buf = ffi.from_buffer("uint8_t[]", mm)
        self.view = ffi.new("ykr_view *")
        rc = lib.ykr_view_init(self.view, self.buf, len(mm), kind)
        if rc < 0:
            text = version_error(self.buf) if rc == -lib.YKR_E_VERSION else error_text(rc)
            self.close()
            raise RingFormatError(f"{path}: {text}")
        self.hdr = header_of(self.buf)

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
