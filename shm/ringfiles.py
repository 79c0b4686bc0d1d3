"""The ring's two segment files: creating, replacing and locking them for a writer.

One writer at a time: ``flock(LOCK_EX|LOCK_NB)`` on NAME.events held for the writer's life, and
its pid in the header.  `create` replaces a ring whose writer is dead: the new segments are built
under temporary names (O_EXCL, `shm.segment.create_temp`) and renamed over the old ones, then the
old header is marked superseded; readers see `instance_changed()` (superseded flag or a different
inode at the path) and re-attach.  A segment another user planted under the name is refused
(`shm.segment.lock_existing`), never written to or renamed over.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import uuid as _uuid
from typing import NamedTuple

from . import segment as _seg
from ._ringext import ffi, lib
from .errors import RingBusyError, RingFormatError, RingNotFoundError, ShmError
from .ring import Mapped, error_text, header_of, instance_uuid_bytes, now

__all__ = ["RingFiles", "create", "open_existing"]


class RingFiles(NamedTuple):
    """A writer's open, locked segments: the fds stay open (the events fd holds the flock)."""

    ev_fd: int
    ev: Mapped
    req_fd: int
    req: Mapped


def _layout(kind: int, capacity: int):
    layout = ffi.new("ykr_layout *")
    if kind == lib.YKR_KIND_EVENTS:
        lib.ykr_events_layout(capacity, layout)
    else:
        lib.ykr_requests_layout(capacity, layout)
    return layout


def _init_segment(path: str, kind: int, capacity: int, uid: bytes,
                  group) -> tuple[int, str, mmap.mmap]:
    """A new initialised segment under a temporary name: (fd, temp path, writable mapping)."""
    fd, tmp = _seg.create_temp(path, _layout(kind, capacity).total_size, group)
    try:
        mm = _seg.map_rw(fd)
        buf = ffi.from_buffer("uint8_t[]", mm)
        rc = lib.ykr_init(buf, len(mm), kind, capacity, uid, now())
        ffi.release(buf)
        if rc < 0:
            raise ShmError(f"cannot initialise {tmp}: {error_text(rc)}")
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    return fd, tmp, mm


def _busy(name: str, fd: int) -> RingBusyError:
    """The error for a ring whose lock a live writer holds, naming its pid when readable."""
    pid = 0
    try:
        mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        try:
            buf = ffi.from_buffer("uint8_t[]", mm)
            if len(mm) >= lib.YKR_HEADER_SIZE:
                pid = int(header_of(buf).writer_pid)
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
        old = Mapped(_seg.map_rw(fd), lib.YKR_KIND_EVENTS, "", 0)
    except (OSError, ValueError, RingFormatError):
        return   # empty or not a ring: nobody reads it as one
    try:
        h = old.hdr
        h.superseded = 1
        h.writer_pid = 0
        h.writer_closed = 1
    finally:
        old.close()


def _mapped(fd: int, mm: mmap.mmap, kind: int, path: str) -> Mapped:
    return Mapped(mm, kind, path, os.fstat(fd).st_ino)


def create(name: str, capacity: int, request_capacity: int, group: str | None) -> RingFiles:
    """Create (or replace) NAME.events and NAME.requests, locked for the caller."""
    paths = _seg.segment_paths(name)
    _seg.refuse_foreign(paths.requests)
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
    return RingFiles(ev_fd, _mapped(ev_fd, ev_mm, lib.YKR_KIND_EVENTS, paths.events),
                     req_fd, _mapped(req_fd, req_mm, lib.YKR_KIND_REQUESTS, paths.requests))


def _check_resumable(name: str, ev: Mapped) -> None:
    if ev.hdr.superseded:
        raise RingFormatError(f"ring {name!r} was superseded")
    nx = int(ev.hdr.next_id)
    if ev.view.records[nx % ev.view.capacity].seq & 1:
        # a writer died between the odd and even sequence store: the slot's strings may
        # be half released, so continuing this instance could corrupt refcounts
        raise RingFormatError(f"ring {name!r} was left mid-write by a crashed writer "
                              f"(event {nx}); create a new instance instead")


def _open_requests(path: str, uid: bytes) -> tuple[int, Mapped]:
    """The instance's request store, or a new one (capacity 1000) if missing or of another."""
    try:
        req_fd = _seg.open_own_rw(path)
        try:
            req = _mapped(req_fd, _seg.map_rw(req_fd), lib.YKR_KIND_REQUESTS, path)
        except BaseException:
            os.close(req_fd)
            raise
        if instance_uuid_bytes(req.hdr) == uid:
            return req_fd, req
        req.close()
        os.close(req_fd)
    except RingNotFoundError:
        pass
    req_fd, tmp, mm = _init_segment(path, lib.YKR_KIND_REQUESTS, 1000, uid, None)
    os.rename(tmp, path)
    return req_fd, _mapped(req_fd, mm, lib.YKR_KIND_REQUESTS, path)


def open_existing(name: str) -> RingFiles:
    """Lock and map an existing ring for a writer that continues it (same instance UUID)."""
    paths = _seg.segment_paths(name)
    fd = _lock_existing(name, paths.events)
    if fd is None:
        raise RingNotFoundError(f"no ring named {name!r} ({paths.events} does not exist)")
    try:
        ev = _mapped(fd, _seg.map_rw(fd), lib.YKR_KIND_EVENTS, paths.events)
    except BaseException:
        os.close(fd)
        raise
    try:
        _check_resumable(name, ev)
        req_fd, req = _open_requests(paths.requests, instance_uuid_bytes(ev.hdr))
    except BaseException:
        ev.close()
        os.close(fd)
        raise
    return RingFiles(fd, ev, req_fd, req)
