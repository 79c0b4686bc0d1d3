"""ykshm shared memory: the event ring, the request-event store and the state snapshot.

The public names are exactly `__all__` (tests/shm/test_exports.py enforces it); the modules
behind them (`ring`, `record`, `segment`, `snapshot`, `_ringext`) are implementation.
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
from .ring import (
    Cursor,
    CursorBatch,
    CursorJsonBatch,
    RingReader,
    RingStats,
    RingWriter,
    VerifyReport,
    encode_resource,
    ring_bytes,
    verify,
)
from .segment import SegmentPaths, list_instances, segment_paths
from .snapshot import SnapshotReader, SnapshotWriter

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
