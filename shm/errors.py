"""Errors of the shared-memory layer.

::

    ShmError                      base, never raised itself
    ├── RingNotFoundError         no such segment (nothing created yet, or removed)
    ├── RingFormatError           the file is not a ykshm segment of this layout version
    ├── RingBusyError             another live writer holds the ring
    ├── UntrustedSegmentError     a symlink, a file of an untrusted owner or a writable mode
    └── SnapshotTooLargeError     a snapshot document does not fit its half of NAME.state

OS errors from opening and mapping segments are translated at one boundary
(`shm.segment`) and re-raised `from` the original exception.
"""

from __future__ import annotations


class ShmError(Exception):
    """Base of every shm error; catch this to handle them all."""


class RingNotFoundError(ShmError, FileNotFoundError):
    """Raised by attach/open_existing when the segment does not exist (or was just removed)."""


class RingFormatError(ShmError):
    """Raised when a segment exists but its header is not ours: wrong magic, layout version,
    kind or size (a half-written or foreign file, or a ring made by another build)."""


class RingBusyError(ShmError):
    """Raised by RingWriter.create/open_existing while another writer (a live process holding
    the segment's lock) owns the ring.  The message names that writer's pid."""

    def __init__(self, message: str, pid: int = 0) -> None:
        super().__init__(message)
        self.pid = pid


class UntrustedSegmentError(ShmError, PermissionError):
    """Raised instead of mapping (or writing) a segment that someone else could have forged: a
    symlink, a file not owned by a trusted user (`shm.segment.trusted_owners`), or a mode that
    lets the group or others write (or others read). The message names the file and the reason."""


class SnapshotTooLargeError(ShmError, ValueError):
    """Raised by SnapshotWriter.publish when the encoded document exceeds half the segment."""
