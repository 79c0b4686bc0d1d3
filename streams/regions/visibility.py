"""Waiting until a watch has seen a write: the seed's consistency rule, for the status writer.

The operator's status writer PUTs a ConsistentRegion's status, gets the new resourceVersion back,
and must return only once the operator's own watch (informer) has delivered that version, so the
next event starts from a state every part of the operator agrees on. `Visibility` joins the two:
the informer's consumer calls `observed(key, rv)` for every ADDED/MODIFIED object, the writer
calls `await wait(key, rv)`.

- The watch may deliver the version before the writer starts waiting: the last few versions per
  key are remembered, so `wait` returns at once then.
- resourceVersions are compared for equality only (Kubernetes says they are opaque).
- A version can be skipped: a relist after a 410 delivers only the newest state, and another
  writer may have changed the object again in between. Waiting for ever would stall the region;
  `wait` gives up after `timeout` seconds and says so (False), and the caller goes on — the write
  itself succeeded, only its echo was not seen.
Pure trio, no Kubernetes import: the lead's writer and informer supply keys and versions.
"""

from __future__ import annotations

import collections

import trio

HISTORY = 16
"""Versions remembered per key (a write is awaited right after it returns: a few suffice)."""


class Visibility:
    """Which resourceVersion of which object the watch has delivered, and who waits for one."""

    def __init__(self, timeout: float = 10.0) -> None:
        self.timeout = timeout
        self._seen: dict[str, collections.deque[str]] = {}
        self._waiting: dict[tuple[str, str], trio.Event] = {}

    def observed(self, key: str, resource_version: str) -> None:
        """The watch delivered this version of the object `key` (namespace/name)."""
        seen = self._seen.setdefault(key, collections.deque(maxlen=HISTORY))
        seen.append(resource_version)
        event = self._waiting.pop((key, resource_version), None)
        if event is not None:
            event.set()

    def forget(self, key: str) -> None:
        """The object was deleted: its waiters are released (there is nothing left to see)."""
        self._seen.pop(key, None)
        for (k, rv), event in list(self._waiting.items()):
            if k == key:
                del self._waiting[(k, rv)]
                event.set()

    async def wait(self, key: str, resource_version: str) -> bool:
        """Until the watch has delivered this version; False when `timeout` passed first."""
        if resource_version in self._seen.get(key, ()):
            return True
        event = self._waiting.setdefault((key, resource_version), trio.Event())
        with trio.move_on_after(self.timeout):
            await event.wait()
            return True
        self._waiting.pop((key, resource_version), None)
        return False


def visible_writer(put_status, key_of, visibility: Visibility):
    """A status writer (operator.StatusWriter) from a PUT and a Visibility:
    `put_status(index, doc) -> resourceVersion` writes ConsistentRegion `index`'s status (e.g.
    PUT .../consistentregions/<name>/status with retries on conflicts), `key_of(index)` is its
    informer key (namespace/name). Returns once the watch has delivered the written version."""

    async def write(index: int, doc: dict) -> None:
        resource_version = await put_status(index, doc)
        await visibility.wait(key_of(index), resource_version)

    return write
