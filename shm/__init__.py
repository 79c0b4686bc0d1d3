"""ykshm shared memory: the event ring, the request-event store and the state snapshot.

The public names are exactly `__all__` (tests/shm/test_shm_exports.py enforces it); the modules
behind them are implementation:

    ring          the ring's layout (docstring) and what every part shares of the cffi extension
                  `_ringext` (ring.c): error texts, `Mapped` segments, `ring_bytes`, resources
    ringfiles     the ring's segment files: creation under temporary names, replacement, the
                  writer's lock, continuing an existing instance
    writer        `RingWriter`: publish (the hot path), the request store, heartbeat and wake
    reader        `RingReader` and `Cursor`: ranges, recent events, following, counters, and the
                  FUTEX_WAIT on the writer's wake word (`ykr_wait`, releasing the GIL)
    verification  `VerifyReport` and the invariant check (`ykr_verify`)
    _ring_build   the cffi build script of `_ringext` (setup.py runs it)
    record        `Event`: one record as Python sees it, and its REST JSON
    events        the seed's event enumerations (record type, change type, change detail)
    snapshot      the state snapshot segment (a seqlock-published JSON document)
    segment       segment files: names, paths, atomic creation, pid and lock helpers, and the
                  trust checks before a segment is mapped (no symlink, trusted owner, mode)
    errors        `ShmError` and its subclasses
    bench_support the synthetic event mix the benchmarks publish

Only `ring`, `ringfiles`, `writer`, `reader` and `verification` load the cffi extension, and
only when one of their names is first used (`RingWriter`, `RingReader`, ...; see `__getattr__`):
`shm.segment`, `shm.events` and `shm.snapshot` are pure Python, so `ykshm ring stat` or
`ykshm status` look at segments without it.
"""

import importlib as _importlib

from . import errors
from .errors import (
    RingBusyError,
    RingFormatError,
    RingNotFoundError,
    ShmError,
    SnapshotTooLargeError,
    UntrustedSegmentError,
)
from .record import Event
from .segment import SegmentPaths, list_instances, segment_paths
from .snapshot import SnapshotReader, SnapshotWriter

# the names of the modules that load the cffi extension, imported on first use
_RING_NAMES = {
    "Cursor": "reader", "CursorBatch": "reader", "CursorJsonBatch": "reader",
    "RingReader": "reader", "RingStats": "reader", "verify": "reader",
    "RingWriter": "writer", "VerifyReport": "verification",
    "encode_resource": "ring", "ring_bytes": "ring",
}

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
    "UntrustedSegmentError",
    "VerifyReport",
    "encode_resource",
    "errors",
    "list_instances",
    "ring_bytes",
    "segment_paths",
    "verify",
]


def __getattr__(name: str):
    """The ring's names, importing their module (and the cffi extension) on first use."""
    module = _RING_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'shm' has no attribute {name!r}")
    value = getattr(_importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_RING_NAMES))
