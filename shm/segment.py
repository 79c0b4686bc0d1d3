"""Segment files: names, atomic creation, read-only and writable mappings.

An instance NAME owns ``/dev/shm/NAME.events`` (event ring and intern tables),
``/dev/shm/NAME.requests`` (request-event store) and ``/dev/shm/NAME.state`` (snapshot).
A segment is created under a temporary name (``NAME.events.tmp-PID-RANDOM``, O_CREAT|O_EXCL,
mode 0600 or 0640 + chgrp), sized with ftruncate, initialised, and only then renamed to its
final name, so a half-created segment is never visible.  OS errors are translated to
`shm.errors` here, at one boundary.
"""

from __future__ import annotations

import errno
import fcntl
import grp
import mmap
import os
import secrets
from collections.abc import Callable
from typing import NamedTuple

from .errors import RingBusyError, RingFormatError, RingNotFoundError, ShmError

__all__ = ["SHM_DIR", "SegmentPaths", "segment_paths", "list_instances", "name_problem",
           "validate_name"]

SHM_DIR = "/dev/shm"


class SegmentPaths(NamedTuple):
    events: str
    requests: str
    state: str


def pid_exists(pid: int) -> bool:
    """Whether a process with this pid exists (a pid of another user's process counts)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def name_problem(name: str, kind: str = "instance") -> str | None:
    """Why NAME cannot name an instance (it becomes a file name prefix under /dev/shm), or
    None if it can. `kind` is the word the caller's user knows it by ("ring")."""
    if not isinstance(name, str):
        return f"invalid {kind} name {name!r}: not a string"
    if not name:
        return f"the {kind} name is empty"
    if "/" in name or "\0" in name or name in (".", "..") or name.startswith("."):
        return f"invalid {kind} name {name!r} (no '/', NUL or leading '.')"
    if len(name) > 200:
        return f"the {kind} name is longer than 200 characters"
    return None


def validate_name(name: str) -> str:
    """Check an instance name; ValueError says what is wrong with it."""
    problem = name_problem(name)
    if problem is not None:
        raise ValueError(problem)
    return name


def segment_paths(name: str) -> SegmentPaths:
    """The three segment paths of instance NAME."""
    validate_name(name)
    base = os.path.join(SHM_DIR, name)
    return SegmentPaths(base + ".events", base + ".requests", base + ".state")


def list_instances() -> list[str]:
    """Names of the instances that have an event ring or a snapshot in /dev/shm, sorted."""
    names = set()
    try:
        entries = os.listdir(SHM_DIR)
    except OSError:
        return []
    for entry in entries:
        if ".tmp-" in entry:
            continue
        for suffix in (".events", ".state"):
            if entry.endswith(suffix) and len(entry) > len(suffix):
                names.add(entry[: -len(suffix)])
    return sorted(names)


def _gid(group: str | int) -> int:
    if isinstance(group, int):
        return group
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        if group.isdigit():
            return int(group)
        raise ShmError(f"unknown group {group!r}") from None


def create_temp(path: str, size: int, group: str | int | None) -> tuple[int, str]:
    """A new zero-filled file of `size` bytes under a temporary name next to `path`."""
    tmp = f"{path}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    mode = 0o640 if group is not None else 0o600
    try:
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    except OSError as exc:
        raise ShmError(f"cannot create {tmp}: {exc.strerror}") from exc
    try:
        os.fchmod(fd, mode)
        if group is not None:
            os.fchown(fd, -1, _gid(group))
        os.ftruncate(fd, size)
        try:
            # reserve the memory now: a full /dev/shm is an error here, never a SIGBUS later
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
    except BaseException as exc:
        os.close(fd)
        os.unlink(tmp)
        if isinstance(exc, OSError):
            raise ShmError(f"cannot size {tmp} to {size} bytes: {exc.strerror}") from exc
        raise
    return fd, tmp


def lock_existing(path: str, busy: Callable[[int], RingBusyError], what: str) -> int | None:
    """Open and exclusively lock (flock) the segment at `path` for a new writer; None if there
    is none.

    While a live writer holds the lock, raises `busy(fd)` (which may read the writer's pid from
    the file).  Retries if the file was replaced meanwhile.
    """
    for _ in range(100):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ShmError(f"cannot open {path}: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            err = busy(fd)
            os.close(fd)
            raise err from None
        if inode_of(path) == os.fstat(fd).st_ino:
            return fd
        os.close(fd)   # replaced while we locked it: try the new one
    raise RingBusyError(f"{what} keeps being replaced by another process")


def map_rw(fd: int) -> mmap.mmap:
    """A writable shared mapping, page tables populated up front (no page faults on the
    writer's hot path)."""
    flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
    return mmap.mmap(fd, os.fstat(fd).st_size, flags=flags, prot=mmap.PROT_READ | mmap.PROT_WRITE)


def open_ro(path: str) -> tuple[mmap.mmap, int]:
    """Map `path` read-only; returns (mapping, inode).  The fd is closed again."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise RingNotFoundError(f"no segment {path}") from exc
    except OSError as exc:
        raise ShmError(f"cannot open {path}: {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
        if st.st_size == 0:
            raise RingFormatError(f"{path} is empty, not a ykshm segment")
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ), st.st_ino
    finally:
        os.close(fd)


def inode_of(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None
