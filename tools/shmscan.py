"""Looking at an instance's shared-memory segments from the outside: files, memory, mappers.

Used by `ykshm ring stat|rm` and `ykshm status`. Nothing here attaches to a ring; it reads
/dev/shm and the process table (psutil; each process's memory map) only, so it works on a corrupt or half-created segment too. Names and paths
are `shm.segment`'s (pure Python: importing it does not load the ring's cffi extension).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil

from shm.segment import name_problem, shm_dir

SEGMENT_SUFFIXES = ("events", "requests", "state")


def segment_path(name: str, suffix: str = "events") -> str:
    return os.path.join(shm_dir(), f"{name}.{suffix}")


def check_name(name: str) -> str | None:
    """Why NAME cannot be an instance name, or None if it can."""
    return name_problem(name, "ring")


def instance_segments(name: str) -> list[str]:
    """The existing segments /dev/shm/NAME.<suffix> of one instance.

    The known suffixes plus any other single-word suffix (NAME.x, not NAME.x.y: that would be
    the segment of another instance named "NAME.x"), and a known segment's temporary file
    (NAME.state.tmp-PID-RANDOM, shm.segment.create_temp) that a writer killed while creating it
    left behind.
    """
    prefix = name + "."
    found = []
    try:
        entries = os.listdir(shm_dir())
    except OSError:
        return []
    for entry in entries:
        if entry.startswith(prefix):
            suffix = entry[len(prefix):]
            base, _, tmp = suffix.partition(".tmp-")
            if (suffix and "." not in suffix) or (tmp and base in SEGMENT_SUFFIXES and "." not in tmp):
                found.append(os.path.join(shm_dir(), entry))
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


def _maps(proc: psutil.Process) -> bytes:
    """The process's /proc/PID/maps (b"" if we may not read it).

    Read directly, not through psutil's `memory_maps()`: that reads smaps (13x the cost over a
    host's processes: 0.31 s against 0.023 s for 112 processes) and drops the " (deleted)" mark,
    which is how a mapping of a replaced or removed segment is told from the live one."""
    try:
        with open(f"/proc/{proc.pid}/maps", "rb") as f:
            return f.read()
    except OSError:
        return b""


def mappers(path: str, *, exclude_self: bool = True) -> list[Mapper]:
    """Processes that have PATH mmapped (processes we may not read are skipped). A mapping of an
    unlinked file shows as "PATH (deleted)" in the kernel's list."""
    me = os.getpid()
    target = path.encode()
    deleted_target = target + b" (deleted)"
    found: list[Mapper] = []
    for proc in psutil.process_iter(["name"]):
        if exclude_self and proc.pid == me:
            continue
        data = _maps(proc)
        if target not in data:
            continue
        live = deleted = False
        for line in data.splitlines():
            if line.endswith(deleted_target):
                deleted = True
            elif line.endswith(target):
                live = True
        if live or deleted:
            found.append(Mapper(proc.pid, proc.info["name"] or "?", deleted and not live))
    return found
