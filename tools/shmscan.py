"""Looking at an instance's shared-memory segments from the outside: files, memory, mappers.

Used by `ykshm ring stat|rm` and `ykshm status`. Nothing here attaches to a ring; it reads
/dev/shm and /proc only, so it works on a corrupt or half-created segment too. Names and paths
are `shm.segment`'s (pure Python: importing it does not load the ring's cffi extension).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from shm.segment import SHM_DIR, name_problem

SEGMENT_SUFFIXES = ("events", "requests", "state")


def segment_path(name: str, suffix: str = "events") -> str:
    return os.path.join(SHM_DIR, f"{name}.{suffix}")


def check_name(name: str) -> str | None:
    """Why NAME cannot be an instance name, or None if it can."""
    return name_problem(name, "ring")


def instance_segments(name: str) -> list[str]:
    """The existing segments /dev/shm/NAME.<suffix> of one instance.

    The known suffixes plus any other single-word suffix (NAME.x, not NAME.x.y: that would be
    the segment of another instance named "NAME.x").
    """
    prefix = name + "."
    found = []
    try:
        entries = os.listdir(SHM_DIR)
    except OSError:
        return []
    for entry in entries:
        if entry.startswith(prefix):
            suffix = entry[len(prefix):]
            if suffix and "." not in suffix:
                found.append(os.path.join(SHM_DIR, entry))
    order = {s: i for i, s in enumerate(SEGMENT_SUFFIXES)}
    found.sort(key=lambda p: (order.get(p.rsplit(".", 1)[1], 99), p))
    return found


def resident_bytes(path: str) -> int:
    """Memory a tmpfs file really uses (allocated blocks; untouched pages cost nothing)."""
    try:
        return os.stat(path).st_blocks * 512
    except OSError:
        return 0


def file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


@dataclass(frozen=True, slots=True)
class Mapper:
    pid: int
    name: str
    deleted: bool  # maps an unlinked (replaced or removed) copy of the segment


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return "?"


def mappers(path: str, *, exclude_self: bool = True) -> list[Mapper]:
    """Processes that have PATH mmapped, from /proc/PID/maps (processes we may not read are
    skipped). A mapping of an unlinked file shows as "PATH (deleted)"."""
    me = os.getpid()
    target = path.encode()
    deleted_target = target + b" (deleted)"
    found: list[Mapper] = []
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return found
    for pid in pids:
        if exclude_self and pid == me:
            continue
        try:
            with open(f"/proc/{pid}/maps", "rb") as f:
                data = f.read()
        except OSError:
            continue
        if target not in data:
            continue
        live = deleted = False
        for line in data.splitlines():
            if line.endswith(deleted_target):
                deleted = True
            elif line.endswith(target):
                live = True
        if live or deleted:
            found.append(Mapper(pid, _comm(pid), deleted and not live))
    return found

