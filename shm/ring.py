"""The shared-memory event ring: its layout, and the binding to the C extension every part shares.

One writer (the engine, `shm.writer`), many read-only readers (`shm.reader`); segments are
created and locked by `shm.ringfiles`, checked by `shm.verification`.

Layout of ``NAME.events`` (declared once, as C structs, in ``shm/ring.h``)
--------------------------------------------------------------------------
::

    header   4096 B   magic, layout version, instance UUID, capacity, record size, offsets,
                      next id, lowest id, writer pid, heartbeat, superseded flag, counters
    records  36 B * C ykr_record {seq (u32), timestamp_lo, timestamp_hi, reference[16],
                      context, change_detail, type, flags}: 4-byte aligned, no padding
    entries  20 B * E intern entries {next, refcount, hash, offset, length, size_class, kind}
    buckets   4 B * B hash chain heads (B = next power of two >= E)
    arena         A   string/resource/context bytes in blocks of 16 << k bytes, k = 0..6 (16..1024)

with C = capacity, E = C // 16 + 1024, B = next_pow2(E), A = round64(C * 3 // 2 + 1 MiB),
every part 64-byte aligned and the total rounded up to 4096:

    events_bytes(C)   = round4096(4096 + 36*C + 20*E + 4*B + A)          (+ alignment padding)
    requests_bytes(R) = 4096 + 4096*R
    total             = events_bytes(C) + requests_bytes(R)

For C = 9,000,000 and R = 1000 that is 354,021,376 + 4,100,096 = 358,121,472 bytes = 341.5 MiB
(39.8 bytes per event: records 324.0 MB, entries 11.3 MB, buckets 4.2 MB, arena 14.5 MB,
request store 4.1 MB; the seed's normal mix needs about three intern entries per retained
application -- its objectID and two contexts -- plus a few resources, ~130k of the 563k
entries for 9M events, and no drops).  `ring_bytes(C, R)` computes the total; the snapshot
segment (NAME.state) is not event storage and is sized separately.  Segments are fallocate'd
at creation (a full /dev/shm fails `create`, never SIGBUSes the writer later) and the writer
maps them with MAP_POPULATE.

Layout version 2 (this one) replaced version 1's 48-byte record {u64 seq, i64 timestamp,
reference[16], object_id, message, resource, ...}: the three handles became one *context* and
seq counts laps in 32 bits.  A segment of another version is refused with a RingFormatError
naming both versions (`version_error`).

Records and the seqlock
-----------------------
``seq`` is 0 for a slot never written, ``2*lap+1`` while the writer fills it, ``2*lap+2`` once
stable, where ``lap = id // C`` counted modulo 2**31 - 1 (the slot is ``id % C``, so slot and
lap together name the id).  The writer stores the odd value (release), then a release fence,
releases the old record's context and reference, interns the new ones, stores the fields,
stores the even value (release) and finally ``next_id`` (release).  A reader loads seq
(acquire), copies the record, renders the strings it references, then re-reads seq after an
acquire fence: any change means the slot (and possibly its strings) was overwritten, and the
copy is discarded.  A 32-bit seq could only fool a reader whom the writer lapped 2**31 - 1
times between those two loads (for C = 65,536 that is 1.4e14 events inside one record copy).
IDs start at 0 per instance and never repeat.

Interning
---------
objectID, message, non-UUID referenceIDs (kind string) and resources (kind resource, canonical
sorted compact JSON ``{"memory":1024,"vcore":1000}``) are interned with reference counts; a
canonical lowercase UUID referenceID is stored as its 16 raw bytes instead (it renders back
identically).  A record's objectID, message and resource are one *context* entry (kind
context, 12 bytes: the three handles), which holds one reference on each of them; the record
holds one on the context.  Events of one application share a handful of contexts, so this
costs a few entries per application and saves 8 bytes per record.  When the last retained
record using an entry is overwritten the entry and its arena block go back to free lists (a
size-class free list per block size; a larger free block is split when a class is empty and
the bump region is exhausted); a context released to zero releases its three parts.  When the
table or arena is genuinely full (pathological, all-unique strings) the field stores the
YKR_OVERFLOW handle, which renders as ``<ykshm:intern-table-full>`` (a resource is then
omitted; a full table for the context itself renders that objectID with no message or
resource), and ``intern_full_drops`` counts it: never a silent loss, and never an early
overwrite of older records.  Strings over 1024 bytes are cut like messages (1021 bytes of
whole UTF-8 characters + "..."), counted in ``messages_cut`` / ``strings_cut``.

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
