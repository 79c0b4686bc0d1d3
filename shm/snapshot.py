"""The state snapshot: a double-buffered orjson document in NAME.state.

Layout (little-endian)::

    0    magic "YKSNAPV1"      8   version u32      16  size u64     24  half u64
    32   generation u64 (seqlock: odd while the header is being switched)
    40   active half u64       48  length u64       56  published_nano i64
    64   writer pid i64        72  instance uuid (16 bytes)
    4096 half 0 ... | 4096 + half: half 1 ...

The writer encodes into the idle half, then bumps the generation to odd, switches active / length /
timestamp, and bumps it to even.
A reader reads the generation (retrying while odd), copies the active half, and re-reads the
generation: any change means a writer overwrote what it copied (two publishes during one read), so
it retries. One writer per instance (flock).

The file is sized for the largest state the configuration allows (two halves of tens of MiB) but
allocated as it is written: the header and the first `FIRST_RESERVED` bytes of each half at
creation, each document's range beyond the half's high-water mark just before it is copied
(`segment.reserve_range`: a full /dev/shm is `SnapshotTooLargeError`, never a SIGBUS), and the
mapping is not populated. So the engine's memory (and its RSS) holds the high-water mark of the
documents it wrote, twice, not the whole file: ~103 MiB less at the defaults with 10,000 pods, whose
document is a few MiB.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
import time
import uuid as _uuid
from typing import Any

import orjson

from . import segment as _seg
from .errors import RingBusyError, RingFormatError, ShmError, SnapshotTooLargeError

__all__ = ["SnapshotWriter", "SnapshotReader"]

_MAGIC = b"YKSNAPV1"
_VERSION = 1
_HDR = 4096
_STATE = struct.Struct("<QQQq")   # generation, active, length, published_nano
_GEN = struct.Struct("<Q")
FIRST_RESERVED = 64 << 10
"""Bytes of each half allocated at creation: a small document (the `unavailable` one that replaces
a state that does not fit) always has room."""


def _busy(name: str, fd: int) -> RingBusyError:
    pid = 0
    try:
        raw = os.pread(fd, 72, 0)
        if raw[:8] == _MAGIC:
            pid = struct.unpack_from("<q", raw, 64)[0]
    except OSError:
        pass
    return RingBusyError(f"snapshot {name!r} already has a live writer (pid {pid})", pid)


class SnapshotWriter:
    """The engine's side of NAME.state."""

    def __init__(self, name: str, fd: int, mm: mmap.mmap, path: str) -> None:
        self.name = name
        self._fd = fd
        self._mm = mm
        self._path = path
        self._ino = os.fstat(fd).st_ino
        self._half = struct.unpack_from("<Q", mm, 24)[0]
        self._gen, self._active = struct.unpack_from("<QQ", mm, 32)
        self._reserved = [min(self._half, FIRST_RESERVED)] * 2
        """Bytes of each half allocated so far: a document within them needs no fallocate."""

    @classmethod
    def create(cls, name: str, size: int = 64 << 20, *, group: str | None = None) -> "SnapshotWriter":
        """Create (or replace) NAME.state of `size` bytes (two halves of (size - 4096) / 2)."""
        path = _seg.segment_paths(name).state
        if size < _HDR + 2 * 4096:
            raise ValueError(f"snapshot size must be at least {_HDR + 8192} bytes")
        old = _seg.lock_existing(path, lambda fd: _busy(name, fd), f"snapshot {name!r}")
        try:
            half = (size - _HDR) // 2
            fd, tmp = _seg.create_temp(path, size, group, reserve=_HDR + min(half, FIRST_RESERVED))
            try:
                _seg.reserve_range(fd, _HDR + half, min(half, FIRST_RESERVED))
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                mm = _seg.map_rw(fd, populate=False)
                struct.pack_into("<IIQQ", mm, 8, _VERSION, 0, size, half)
                struct.pack_into("<QQQqq", mm, 32, 0, 0, 0, 0, os.getpid())
                mm[72:88] = _uuid.uuid4().bytes
                mm[0:8] = _MAGIC
                os.rename(tmp, path)
            except BaseException:
                os.close(fd)
                os.unlink(tmp)
                raise
        finally:
            if old is not None:
                os.close(old)
        return cls(name, fd, mm, path)

    def publish(self, doc: dict[str, Any]) -> None:
        """Encode `doc` with orjson into the idle half, then flip to it."""
        data = orjson.dumps(doc)
        self.publish_raw(data)

    def publish_raw(self, data: bytes) -> None:
        if self._mm is None:
            raise ShmError("snapshot writer is closed")
        n = len(data)
        if n > self._half:
            raise SnapshotTooLargeError(
                f"snapshot document of {n} bytes exceeds half the segment ({self._half} bytes)")
        idle = 1 - self._active
        off = _HDR + idle * self._half
        try:
            if n > self._reserved[idle]:     # beyond this half's high-water mark: allocate first
                _seg.reserve_range(self._fd, off + self._reserved[idle], n - self._reserved[idle])
                self._reserved[idle] = n
        except OSError as exc:
            raise SnapshotTooLargeError(f"no room in {os.path.dirname(self._path)} for a snapshot "
                                        f"document of {n} bytes: {exc.strerror}") from exc
        mm = self._mm
        mm[off:off + n] = data
        gen = self._gen
        _GEN.pack_into(mm, 32, gen + 1)
        _STATE.pack_into(mm, 32, gen + 1, idle, n, time.time_ns())
        _GEN.pack_into(mm, 32, gen + 2)
        self._gen = gen + 2
        self._active = idle

    def close(self) -> None:
        if self._mm is not None:
            struct.pack_into("<q", self._mm, 64, 0)
            self._mm.close()
            self._mm = None
            os.close(self._fd)

    def unlink(self) -> None:
        if _seg.inode_of(self._path) == self._ino:
            try:
                os.unlink(self._path)
            except FileNotFoundError:
                pass


class SnapshotReader:
    """A read-only view of NAME.state."""

    def __init__(self, name: str, mm: mmap.mmap, path: str, ino: int) -> None:
        self.name = name
        self._mm = mm
        self._path = path
        self._ino = ino
        if len(mm) < _HDR or mm[0:8] != _MAGIC:
            mm.close()
            raise RingFormatError(f"{path} is not a ykshm snapshot segment")
        self._half = struct.unpack_from("<Q", mm, 24)[0]
        self._last_gen = -1
        self._last_doc: Any = None

    @classmethod
    def attach(cls, name: str) -> "SnapshotReader":
        """Map NAME.state read-only; RingNotFoundError if missing."""
        path = _seg.segment_paths(name).state
        mm, ino = _seg.open_ro(path)
        return cls(name, mm, path, ino)

    def _consistent(self) -> tuple[int, bytes | None, int]:
        mm = self._mm
        if mm is None:
            raise ShmError("snapshot reader is closed")
        for attempt in range(100000):
            gen, active, length, ts = _STATE.unpack_from(mm, 32)
            if gen & 1:
                if attempt > 100:
                    time.sleep(0.0001)
                continue
            if gen == 0:
                return 0, None, 0
            if length > self._half or active > 1:
                continue
            off = _HDR + active * self._half
            data = mm[off:off + length]
            if _GEN.unpack_from(mm, 32)[0] == gen:
                return gen, data, ts
        raise ShmError(f"snapshot {self.name!r}: no consistent read (writer too busy?)")

    def read_raw(self) -> bytes | None:
        """The latest consistent document's bytes (None before the first publish)."""
        return self._consistent()[1]

    def read(self) -> Any:
        """The latest consistent document, parsed (None before the first publish)."""
        gen, data, _ = self._consistent()
        if data is None:
            return None
        if gen != self._last_gen:
            self._last_doc = orjson.loads(data)
            self._last_gen = gen
        return self._last_doc

    def generation(self) -> int:
        return _GEN.unpack_from(self._mm, 32)[0]

    def published_nano(self) -> int:
        return self._consistent()[2]

    def writer_pid(self) -> int:
        return struct.unpack_from("<q", self._mm, 64)[0]

    def instance_changed(self) -> bool:
        return _seg.inode_of(self._path) != self._ino

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
