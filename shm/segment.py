"""Segment files: names, atomic creation, read-only and writable mappings.

An instance NAME owns ``/dev/shm/NAME.events`` (event ring and intern tables),
``/dev/shm/NAME.requests`` (request-event store) and ``/dev/shm/NAME.state`` (snapshot).
A segment is created under a temporary name (``NAME.events.tmp-PID-RANDOM``, O_CREAT|O_EXCL,
mode 0600 or 0640 + chgrp), sized with ftruncate, initialised, and only then renamed to its
final name, so a half-created segment is never visible.  OS errors are translated to
`shm.errors` here, at one boundary.

Nobody else's file is mapped or written.  /dev/shm is writable by every local user, so a segment
name can be squatted (a file or symlink planted before the engine starts) or swapped.  Every
open here uses O_NOFOLLOW and checks the open file (fstat, no race with the path) before mapping
it: a regular file, owned by a trusted user (`trusted_owners`: the process's own uid, root, the
`ykshm` service user if it exists, and `$YKSHM_SHM_OWNER` -- a user name or uid -- for readers
that run as another user and read through the segment's group), and a mode no wider than ykshm
creates (0600, or 0640 with a group: no group or other write, no other read).  Anything else is
`UntrustedSegmentError`, naming the file and the reason; a reader then serves nothing rather
than forged events or a forged "Healthy".

The directory is ``/dev/shm`` unless ``$YKSHM_SHM_DIR`` names another (`shm_dir`): in a
Kubernetes pod the engine, shim and web share a memory-backed emptyDir mounted there, and
sim-cluster's process pods (local processes that all see the host's /dev/shm) get the env value
rewritten to the pod's own volume, so each scheduler pod has a ring of its own.
"""

from __future__ import annotations

import errno
import fcntl
import grp
import mmap
import os
import pwd
import secrets
import stat
from collections.abc import Callable
from typing import NamedTuple

from .errors import (
    RingBusyError,
    RingFormatError,
    RingNotFoundError,
    ShmError,
    UntrustedSegmentError,
)

__all__ = ["SHM_DIR", "SHM_DIR_ENV", "shm_dir", "OWNER_ENV", "SegmentPaths", "segment_paths", "list_instances",
           "name_problem", "validate_name", "trusted_owners", "open_checked"]

SHM_DIR = "/dev/shm"             # the default directory of an instance's segments
SHM_DIR_ENV = "YKSHM_SHM_DIR"   # another directory (a pod's in-memory emptyDir)
OWNER_ENV = "YKSHM_SHM_OWNER"   # one more trusted owner of segments: a user name or a uid
SERVICE_USER = "ykshm"          # the user deploy/sysusers.d creates and the units run as
_MODE_SHARED = 0o640            # the widest mode ykshm creates (0640 with a group, else 0600)


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


def shm_dir() -> str:
    """Where the segments live: `$YKSHM_SHM_DIR`, else /dev/shm."""
    return os.environ.get(SHM_DIR_ENV) or SHM_DIR


def segment_paths(name: str) -> SegmentPaths:
    """The three segment paths of instance NAME."""
    validate_name(name)
    base = os.path.join(shm_dir(), name)
    return SegmentPaths(base + ".events", base + ".requests", base + ".state")


def list_instances() -> list[str]:
    """Names of the instances that have an event ring or a snapshot in /dev/shm, sorted."""
    names = set()
    try:
        entries = os.listdir(shm_dir())
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


def create_temp(path: str, size: int, group: str | int | None, *,
                reserve: int | None = None) -> tuple[int, str]:
    """A new zero-filled file of `size` bytes under a temporary name next to `path`, its first
    `reserve` bytes (default: all) allocated now: a full /dev/shm is an error here, never a
    SIGBUS later. A writer that reserves less allocates each range before it writes it
    (`reserve_range`)."""
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
            os.posix_fallocate(fd, 0, size if reserve is None else min(size, reserve))
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
    the file).  Retries if the file was replaced meanwhile.  A file that is not this user's own
    (planted by someone else, or a symlink) is refused: UntrustedSegmentError.
    """
    for _ in range(100):
        refuse_foreign(path)
        try:
            fd = open_own_rw(path)
        except RingNotFoundError:
            return None
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


def map_rw(fd: int, *, populate: bool = True) -> mmap.mmap:
    """A writable shared mapping, page tables populated up front (no page faults on the
    writer's hot path) unless `populate` is False: populating a file that is not all allocated
    would allocate it all."""
    flags = mmap.MAP_SHARED | (getattr(mmap, "MAP_POPULATE", 0) if populate else 0)
    return mmap.mmap(fd, os.fstat(fd).st_size, flags=flags, prot=mmap.PROT_READ | mmap.PROT_WRITE)


def reserve_range(fd: int, offset: int, length: int) -> None:
    """Allocate [offset, offset + length) of a segment before writing it (a no-op for pages
    already allocated): OSError (ENOSPC) here instead of a SIGBUS at the write."""
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise


def _uid_of(user: str) -> int | None:
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return int(user) if user.isdigit() else None


def trusted_owners() -> frozenset[int]:
    """The uids whose segments this process believes (see the module docstring).

    Read each time (a lookup in the password database): a test or a unit can set $YKSHM_SHM_OWNER.
    An unknown $YKSHM_SHM_OWNER is an error naming it, not silently nobody."""
    owners = {os.geteuid(), 0}
    service = _uid_of(SERVICE_USER)
    if service is not None:
        owners.add(service)
    configured = os.environ.get(OWNER_ENV, "").strip()
    if configured:
        uid = _uid_of(configured)
        if uid is None:
            raise ShmError(f"{OWNER_ENV}={configured!r}: no such user")
        owners.add(uid)
    return frozenset(owners)


def trust_problem(st: os.stat_result, owners: frozenset[int],
                  writable_by_us: bool = False) -> str | None:
    """Why a file with this fstat must not be trusted as a segment, or None.

    `writable_by_us`: the caller will write to it (a writer continuing a ring, a web segment),
    so the file must be this process's own."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if writable_by_us and st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    if st.st_uid not in owners:
        return (f"owned by uid {st.st_uid}, not by a trusted user (uids "
                f"{', '.join(map(str, sorted(owners)))}; see ${OWNER_ENV})")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        return f"mode {mode:04o} lets the group or others write it (ykshm creates 0600 or 0640)"
    if mode & ~_MODE_SHARED:
        return f"mode {mode:04o} is wider than ykshm creates (0600 or 0640)"
    return None


def open_checked(path: str, flags: int = os.O_RDONLY, *, own: bool = False) -> int:
    """Open a segment without following a symlink and check it (`trust_problem`) on the open fd.

    RingNotFoundError if it does not exist, UntrustedSegmentError if it must not be trusted."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise RingNotFoundError(f"no segment {path}") from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UntrustedSegmentError(f"refusing {path}: it is a symbolic link") from exc
        raise ShmError(f"cannot open {path}: {exc.strerror}") from exc
    try:
        problem = trust_problem(os.fstat(fd), trusted_owners(), own)
    except BaseException:
        os.close(fd)
        raise
    if problem is not None:
        os.close(fd)
        raise UntrustedSegmentError(f"refusing {path}: {problem}; remove it if it is not ykshm's")
    return fd


def open_own_rw(path: str) -> int:
    """An existing segment of this user's, opened for writing (a writer continuing it)."""
    return open_checked(path, os.O_RDWR, own=True)


def refuse_foreign(path: str) -> None:
    """Fail with a clear error if `path` exists and is not this user's plain file: a writer
    would rename its new segment over it, which another user's file in sticky /dev/shm refuses
    (EPERM) only after the work is done, and a symlink must never be taken over."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    problem = trust_problem(st, frozenset({os.geteuid()}), writable_by_us=True)
    if problem is not None:
        raise UntrustedSegmentError(f"refusing to replace {path}: {problem}; "
                                    f"remove it (as its owner or root) or use another --name")


def open_ro(path: str) -> tuple[mmap.mmap, int]:
    """Map `path` read-only after the trust checks; returns (mapping, inode).  The fd is closed
    again."""
    fd = open_checked(path)
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
