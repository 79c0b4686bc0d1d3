"""The writer of an instance's event ring and request store (the engine's side).

The writer's hot path
---------------------
What an engine publish costs is mostly crossing from Python into C (cffi converts each
`const char *` argument at ~45 ns, each int at ~12 ns), so the common event -- the same objectID
as the last one, no message, no or the same resource, the ring's clock -- passes only its kind
and referenceID: the current objectID and resource are *pinned* (interned, with one reference
the header holds, counted by `verify()`) and C takes them from the header (`make_publish`).
The extension keeps the GIL during its calls (see `shm/_ring_build.py`), and a UUID is parsed
through a table, not a branch per hex digit. A closed writer's view is cleared, so a `publish`
kept from before `close()` raises ShmError instead of touching unmapped memory.

Text that UTF-8 cannot encode
-----------------------------
A Python str can hold a lone surrogate (U+D800..U+DFFF: from `os.fsdecode`, a `surrogateescape`
decode, a JSON `"\\ud800"` escape) that has no UTF-8 form, and `.encode()` raises
UnicodeEncodeError. The writer never raises for it: the engine must not die on a pod name. Every
lone surrogate in the objectID, referenceID or message is written as U+FFFD (the replacement
character), as Go's encoding/json writes an invalid UTF-8 byte, so readers and YuniKorn clients
always get valid UTF-8; text that is valid reads back exactly. The replacement is done only on the
exception path (`valid_text`): the hot path encodes as before.

What bounds it (perf, the seed mix's hot path, layout 1 and 2 alike): the C side (publish_impl,
release, the wrapper, clock_gettime) is ~14% of the samples; the rest is the interpreter (~21%
in the eval loop), cffi's argument checks and conversions (~10%), `resource == last` (~12%,
a 3-key dict compare) and the call itself. A smaller record cannot move it; fewer crossings can
only come from an entry that takes the Python objects itself (a CPython METH_FASTCALL function:
no per-argument conversion, no `.encode()`, the resource compared in C) or from handing C a
whole cycle's events at once.
"""

from __future__ import annotations

import os
import re
import uuid as _uuid
from collections.abc import Mapping

import orjson

from . import ringfiles
from . import segment as _seg
from ._ringext import ffi, lib
from .errors import ShmError
from .record import Event
from .ring import Mapped, encode_resource, error_text, events_from, instance_uuid_bytes, now

__all__ = ["RingWriter"]


_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """`text` with each lone surrogate (the only str content UTF-8 cannot encode) as U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


def _publish_error(rc: int) -> Exception:
    """The exception for a negative publish result: ShmError once closed, else ValueError."""
    if rc == -lib.YKR_E_CLOSED:
        return ShmError("ring writer is closed")
    return ValueError(f"publish: {error_text(rc)}")


def _encoded(*texts: str) -> tuple[bytes, ...]:
    """The UTF-8 of each text; a lone surrogate becomes U+FFFD (on the exception path only)."""
    try:
        return tuple(t.encode() for t in texts)
    except UnicodeEncodeError:
        return tuple(valid_text(t).encode() for t in texts)


def _bytes_len_trick_works() -> bool:
    probes = [b"", b"a", b"\x00\x00abc", b"x" * 5000, "é".encode(), bytes(range(256))]
    return all(lib.ykr_bytes_len_probe(b) == len(b) for b in probes)


_FAST = _bytes_len_trick_works()


def make_publish(view):
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
        try:
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
        except UnicodeEncodeError:  # a lone surrogate: nothing was published, U+FFFD for it
            return publish(type, change_type, change_detail, valid_text(object_id),
                           valid_text(reference_id), valid_text(message), resource, timestamp_nano)
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

    def __init__(self, name: str, ev_fd: int, ev: Mapped, req_fd: int, req: Mapped) -> None:
        self.name = name
        self._ev_fd = ev_fd
        self._ev = ev
        self._req_fd = req_fd
        self._req = req
        self._view = ev.view
        self._req_view = req.view
        self.capacity = int(ev.hdr.capacity)
        self.request_capacity = int(req.hdr.capacity)
        self.instance_uuid = str(_uuid.UUID(bytes=instance_uuid_bytes(ev.hdr)))
        self._take_buf = ffi.new("char[]", 1 << 20)
        self._take_len = ffi.new("uint64_t *")
        self._closed = False
        lib.ykr_set_writer(self._view, os.getpid(), now())
        if _FAST:
            self.publish = make_publish(self._view)  # type: ignore[method-assign]

    # -- construction


    # -- construction

    @classmethod
    def create(cls, name: str, capacity: int, request_capacity: int = 1000,
               *, group: str | None = None) -> "RingWriter":
        """Create (or replace) NAME.events and NAME.requests; see `shm.ringfiles`."""
        _seg.validate_name(name)
        if not isinstance(capacity, int) or not 1 <= capacity <= 0xFFFFFFFF:
            raise ValueError(f"ring capacity must be 1..4294967295, got {capacity!r}")
        if not isinstance(request_capacity, int) or not 0 <= request_capacity <= 0xFFFFFFFF:
            raise ValueError(f"request capacity must be 0..4294967295, got {request_capacity!r}")
        return cls(name, *ringfiles.create(name, capacity, request_capacity, group))

    @classmethod
    def open_existing(cls, name: str) -> "RingWriter":
        """Become the writer of an existing ring (same instance UUID)."""
        return cls(name, *ringfiles.open_existing(name))

    # -- hot path

    def publish(self, type: int, change_type: int, change_detail: int, object_id: str = "",
                reference_id: str = "", message: str = "",
                resource: Mapping[str, int] | bytes | None = None, timestamp_nano: int = 0) -> int:
        """Append one event; returns its id.  Never blocks, no syscall.

        `resource` is a mapping name -> int (int64), or its `encode_resource` bytes.
        ValueError for out-of-range enums or resource values. A lone surrogate in the text is
        written as U+FFFD, never an exception (see the module docstring).

        This is the portable path (lengths passed explicitly). Where the interpreter lays out
        `bytes` as probed at import (`_FAST`), __init__ replaces it per writer with the
        `_make_publish` closure, which behaves the same and is faster.
        """
        if self._closed:
            raise ShmError("ring writer is closed")
        o, r, m = _encoded(object_id, reference_id, message)
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
        o, r, m = _encoded(object_id, reference_id, message)
        res = encode_resource(resource)
        rc = lib.ykr_req_publish(self._req_view, timestamp_nano, o, len(o), r, len(r),
                                 m, len(m), res, len(res))
        if rc < 0:
            raise ValueError(f"publish_request: {error_text(rc)}")

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
            out.extend(events_from([ffi.buffer(self._take_buf, self._take_len[0])[:]]))
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
        lib.ykr_set_writer(self._view, 0, now())
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
