"""The engine's state snapshot, copied to one Redis hash when it changed, at most every interval.

`ykshm:{NAME}:state` holds `doc` (the snapshot document's bytes, exactly as the engine published
them), `generation` (the snapshot segment's publish counter), `instance` (the ring's
InstanceUUID, so a replica notices an engine restart even when the counter starts again) and
`published_nano`. One HSET writes them together, so a reader never sees a document with another
document's generation.
"""

from __future__ import annotations

import time
from typing import Any


class StateExporter:
    """Follows /dev/shm/NAME.state read-only; `maybe_export` HSETs a changed snapshot."""

    def __init__(self, name: str, key: str, interval: float) -> None:
        self.name = name
        self.key = key
        self.interval = interval
        self._reader: Any = None
        self._next_at = 0.0
        self._exported: tuple[int, int] | None = None  # (inode-ish identity, generation)
        self._identity = 0

    def _attach(self) -> Any:
        from shm import SnapshotReader
        from shm.errors import ShmError

        if self._reader is not None and self._reader.instance_changed():
            self._reader.close()
            self._reader = None
        if self._reader is None:
            try:
                self._reader = SnapshotReader.attach(self.name)
            except ShmError:
                return None
            self._identity += 1
        return self._reader

    def maybe_export(self, node, instance_uuid: str, now: float) -> int | None:
        """Export if due and changed; the generation exported, else None. Redis errors raise."""
        if self.interval <= 0 or now < self._next_at:
            return None
        self._next_at = now + self.interval
        reader = self._attach()
        if reader is None:
            return None
        generation = reader.generation()
        if generation == 0 or self._exported == (self._identity, generation):
            return None
        data = reader.read_raw()
        if data is None:
            return None
        node.hset(self.key, mapping={
            "doc": data, "generation": generation, "instance": instance_uuid,
            "published_nano": reader.published_nano(), "exported_nano": time.time_ns(),
        })
        self._exported = (self._identity, generation)
        return generation

    def document(self) -> Any:
        """The engine's snapshot document (None: none yet), read through the reader kept open
        (what `--leader-only` asks of it while it waits)."""
        reader = self._attach()
        return reader.read() if reader is not None else None

    def forget(self) -> None:
        """Export again at the next chance (Redis may have lost the key in a failover)."""
        self._exported = None
        self._next_at = 0.0

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
