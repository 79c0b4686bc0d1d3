"""ykshm shared memory: the event ring, the request-event store and the state snapshot.

The public names are exactly `__all__` (tests/shm/test_shm_exports.py enforces it); the modules
behind them are implementation:

    ring          event ring writer/reader/cursors over the cffi extension `_ringext` (ring.c)
    _ring_build   the cffi build script of `_ringext` (setup.py runs it)
    record        `Event`: one record as Python sees it, and its REST JSON
    events        the seed's event enumerations (record type, change type, change detail)
    snapshot      the state snapshot segment (a seqlock-published JSON document)
    segment       segment files: names, paths, atomic creation, pid and lock helpers
    futex         FUTEX_WAIT on the ring header's wake word (ctypes; how web workers sleep)
    errors        `ShmError` and its subclasses
    bench_support the synthetic event mix the benchmarks publish

Only `ring` loads the cffi extension, and only when one of its names is first used
(`RingWriter`, `RingReader`, ...; see `__getattr__`): `shm.segment`, `shm.events` and
`shm.snapshot` are pure Python, so `ykshm ring stat` or `ykshm status` look at segments
without it.
"""

from . import errors
from .errors import (
    RingBusyError,
    RingFormatError,
    RingNotFoundError,
    ShmError,
    SnapshotTooLargeError,
)
from .record import Event
from .segment import SegmentPaths, list_instances, segment_paths
from .snapshot import SnapshotReader, SnapshotWriter

_RING_NAMES = ("Cursor", "CursorBatch", "CursorJsonBatch", "RingReader", "RingStats", "RingWriter",
               "VerifyReport", "encode_resource", "ring_bytes", "verify")

__all__ = [
    "Cursor",
    "CursorBatch",
    "CursorJsonBatch",
    "Event",
    "RingBusyError",
    "RingFormatError",
    "RingNotFoundError",
    "RingReader",
    "RingStats",
    "RingWriter",
    "SegmentPaths",
    "ShmError",
    "SnapshotReader",
    "SnapshotTooLargeError",
    "SnapshotWriter",
    "VerifyReport",
    "encode_resource",
    "errors",
    "list_instances",
    "ring_bytes",
    "segment_paths",
    "verify",
]


def __getattr__(name: str):
    """The ring's names, importing `shm.ring` (and the cffi extension) on first use."""
    if name not in _RING_NAMES:
        raise AttributeError(f"module 'shm' has no attribute {name!r}")
    from . import ring

    for ring_name in _RING_NAMES:
        globals()[ring_name] = getattr(ring, ring_name)
    return globals()[name]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_RING_NAMES))
