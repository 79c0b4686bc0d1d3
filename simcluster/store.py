"""The in-memory object store: buckets of objects, one global resourceVersion, bounded history.

Rules:

1. Stored objects are never mutated. An update stores a new dict; the history and every watcher
   may keep a reference to an old one, which is therefore a true snapshot of that version.
2. Every change (create, update, delete) takes the next resourceVersion from a single counter,
   writes it into the object's `metadata.resourceVersion`, is appended to the history and is handed
   to every matching watcher before the mutating call returns. Nothing here awaits, so under trio a
   watcher registered with `watch()` sees exactly the changes after its starting point, no gap and
   no repeat.
3. The history keeps the last `history_size` changes. A watch (or continue token) from a
   resourceVersion older than the oldest change still kept is `Expired` (410).
4. A watcher that does not drain its queue (`queue_size` events behind) is closed; its client sees
   the stream end and re-watches from the last resourceVersion it got, as with a real apiserver.

A DELETED change carries the object's last state with the deletion's resourceVersion.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
import trio

from .errors import Expired
from .selectors import Matcher

Key = tuple[str, str]  # (namespace or "", name)
Obj = dict[str, Any]

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


@dataclass(eq=False)
class Change:
    """One stored change. `prev` is the state before a MODIFIED (for selector transitions)."""

    rv: int
    type: str
    bucket: str
    obj: Obj
    prev: Obj | None = None
    _line: bytes | None = None

    def line(self) -> bytes:
        """`{"type":..,"object":..}\\n`, encoded once and shared by every watcher."""
        if self._line is None:
            self._line = orjson.dumps({"type": self.type, "object": self.obj}) + b"\n"
        return self._line


@dataclass(eq=False)
class Watcher:
    """A registered watch: filters, and a queue its HTTP stream drains."""

    bucket: str
    namespace: str | None
    label: Matcher | None
    fields: Matcher | None
    send: trio.MemorySendChannel[Change]
    receive: trio.MemoryReceiveChannel[Change]
    overflowed: bool = False

    def matches(self, obj: Mapping[str, Any] | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        if self.label is not None and not self.label(obj):
            return False
        return self.fields is None or self.fields(obj)

    def translate(self, change: Change) -> Change | None:
        """The change as this watcher sees it: selector entry is ADDED, exit is DELETED."""
        now = self.matches(change.obj)
        if change.type != MODIFIED:
            return change if now else None
        before = self.matches(change.prev)
        if now and before:
            return change
        if now:
            return Change(change.rv, ADDED, change.bucket, change.obj)
        if before:
            return Change(change.rv, DELETED, change.bucket, change.obj)
        return None

    def close(self) -> None:
        self.send.close()


@dataclass
class _Bucket:
    objects: dict[Key, Obj] = field(default_factory=dict)
    keys: list[Key] = field(default_factory=list)  # sorted
    watchers: set[Watcher] = field(default_factory=set)


class Store:
    """Objects by bucket and (namespace, name); see the module rules."""

    def __init__(self, buckets: Iterable[str], history_size: int = 10_000, queue_size: int = 100_000) -> None:
        self.rv = 0
        self._buckets = {b: _Bucket() for b in buckets}
        self._history: deque[Change] = deque(maxlen=max(1, history_size))
        self._dropped_rv = 0  # newest rv no longer in the history
        self._queue_size = queue_size
        self.listeners: list[Callable[[Change], None]] = []

    # -- reads -------------------------------------------------------------------------------
    def get(self, bucket: str, namespace: str, name: str) -> Obj | None:
        return self._buckets[bucket].objects.get((namespace, name))

    def has_bucket(self, bucket: str) -> bool:
        return bucket in self._buckets

    def add_bucket(self, bucket: str) -> None:
        """A new kind of object (a CRD was established); no-op when it exists."""
        self._buckets.setdefault(bucket, _Bucket())

    def drop_bucket(self, bucket: str) -> None:
        """Stop storing a kind (its CRD is gone): its watchers' streams end; the caller emptied it."""
        b = self._buckets.pop(bucket, None)
        if b is not None:
            for watcher in list(b.watchers):
                watcher.close()

    def count(self, bucket: str) -> int:
        return len(self._buckets[bucket].objects)

    def list(
        self,
        bucket: str,
        namespace: str | None = None,
        label: Matcher | None = None,
        fields: Matcher | None = None,
        after: Key | None = None,
        limit: int = 0,
    ) -> tuple[list[Obj], Key | None, int]:
        """Objects in key order after `after`; returns (items, last key if more remain, remaining)."""
        b = self._buckets[bucket]
        keys = b.keys
        if namespace is not None:
            lo = bisect.bisect_left(keys, (namespace, ""))
            hi = bisect.bisect_left(keys, (namespace + "\x00", ""))
        else:
            lo, hi = 0, len(keys)
        if after is not None:
            lo = max(lo, bisect.bisect_right(keys, after))
        items: list[Obj] = []
        i = lo
        while i < hi:
            obj = b.objects[keys[i]]
            i += 1
            if (label is None or label(obj)) and (fields is None or fields(obj)):
                items.append(obj)
                if limit and len(items) >= limit:
                    break
        if limit and len(items) >= limit and i < hi:
            remaining = sum(
                1 for k in keys[i:hi]
                if (label is None or label(b.objects[k])) and (fields is None or fields(b.objects[k]))
            ) if (label or fields) else hi - i
            if remaining:
                return items, keys[i - 1], remaining
        return items, None, 0

    def check_rv(self, rv: int) -> None:
        """Raise Expired when changes after `rv` are no longer all in the history."""
        if rv < self._dropped_rv:
            raise Expired(f"too old resource version: {rv} ({self._dropped_rv})")

    # -- writes ------------------------------------------------------------------------------
    def _emit(self, change: Change) -> None:
        if len(self._history) == self._history.maxlen:
            self._dropped_rv = self._history[0].rv
        self._history.append(change)
        b = self._buckets[change.bucket]
        for watcher in list(b.watchers):
            seen = watcher.translate(change)
            if seen is None:
                continue
            try:
                watcher.send.send_nowait(seen)
            except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
                watcher.overflowed = True
                watcher.close()
                b.watchers.discard(watcher)
        for listener in self.listeners:
            listener(change)

    def _stamp(self, obj: Obj) -> int:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        return self.rv

    def create(self, bucket: str, obj: Obj) -> Obj:
        """Store a new object (the caller checked it does not exist) and emit ADDED."""
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        b = self._buckets[bucket]
        rv = self._stamp(obj)
        b.objects[key] = obj
        bisect.insort(b.keys, key)
        self._emit(Change(rv, ADDED, bucket, obj))
        return obj

    def replace(self, bucket: str, obj: Obj) -> Obj:
        """Store a new version of an existing object and emit MODIFIED."""
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        b = self._buckets[bucket]
        prev = b.objects[key]
        rv = self._stamp(obj)
        b.objects[key] = obj
        self._emit(Change(rv, MODIFIED, bucket, obj, prev))
        return obj

    def delete(self, bucket: str, namespace: str, name: str, last_state: Obj | None = None) -> Obj:
        """Remove an object and emit DELETED with its last state at the deletion's version
        (`last_state`: the update that removed it, e.g. its last finalizer taken away)."""
        key = (namespace, name)
        b = self._buckets[bucket]
        old = b.objects.pop(key)
        i = bisect.bisect_left(b.keys, key)
        del b.keys[i]
        source = last_state if last_state is not None else old
        last = dict(source)
        last["metadata"] = dict(source["metadata"])
        rv = self._stamp(last)
        self._emit(Change(rv, DELETED, bucket, last))
        return last

    # -- watches -----------------------------------------------------------------------------
    def watch(
        self,
        bucket: str,
        namespace: str | None,
        label: Matcher | None,
        fields: Matcher | None,
        since: int | None,
    ) -> tuple[list[Change], Watcher]:
        """Register a watcher; returns the events before live ones (synthetic ADDED or history).

        since None: synthetic ADDED for every current match ("" and "0" on a real apiserver).
        since N: every change after N from the history, or Expired.
        """
        if since is not None:
            self.check_rv(since)
        send, receive = trio.open_memory_channel[Change](self._queue_size)
        watcher = Watcher(bucket, namespace, label, fields, send, receive)
        initial: list[Change] = []
        if since is None:
            for obj in self.list(bucket, namespace, label, fields)[0]:
                initial.append(Change(int(obj["metadata"]["resourceVersion"]), ADDED, bucket, obj))
        else:
            start = bisect.bisect_right(self._history, since, key=lambda c: c.rv)
            for i in range(start, len(self._history)):
                change = self._history[i]
                if change.bucket == bucket:
                    seen = watcher.translate(change)
                    if seen is not None:
                        initial.append(seen)
        self._buckets[bucket].watchers.add(watcher)
        return initial, watcher

    def unwatch(self, watcher: Watcher) -> None:
        b = self._buckets.get(watcher.bucket)
        if b is not None:
            b.watchers.discard(watcher)
        watcher.close()

    def watcher_count(self) -> int:
        return sum(len(b.watchers) for b in self._buckets.values())
