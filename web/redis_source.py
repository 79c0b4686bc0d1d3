"""Read replicas: the web's ring, snapshot and watcher served from Redis (`ykshm web --source redis://`).

`ykshm export` writes the stream `ykshm:{NAME}:events` (entry `G-E` = event E of engine generation G,
field `j` = the event's REST JSON exactly as the ring renders it), the state hash and the exporter
hash (export/keys.py). These classes give the web's handlers the same interface the shared-memory
sources give them (web/sources.py: `get()`, `bounds()`, `read_range_json()`, `cursor().poll_json()`,
`instance_changed()`, `doc()`), so /ws/v1/events/batch and /events/stream send the same bytes with
the same parameters, limits and error lines, and every state view answers from the exported
snapshot. Any number of replicas on any machine; none of them ever reaches the engine.

Mapping onto the ring's semantics
- The *instance* a replica serves is the newest generation in the stream (its InstanceUUID from
  the `instances` hash). LowestID/HighestID are its first and last event still in Redis.
- A gap entry (the exporter was lapped) names lost ids: a stream whose cursor reaches it ends with
  the ring's 410 line naming them, as a lapped reader would; a `start` trimmed away by retention
  (below LowestID) gets the same 410 line, a batch outside the bounds `EventRecords: null`.
- A new generation in Redis (the engine restarted) ends open streams with the 503 line.
- Live events: one thread per worker waits in `XREAD BLOCK` on the stream and wakes the streams
  (RedisWatcher, the RingWatcher of a replica); idle streams cost nothing.
- Health: the engine's pid liveness and heartbeat are the ones the exporter relays every 0.5 s
  in its hash; a dead exporter stops refreshing them, so the replica reports the engine stale.

Redis calls from handlers are short and synchronous (bounded by a 2 s socket timeout); a Redis
that cannot be reached answers 503 with the reason, after one reconnect (a Cluster failover moves
the slot to a promoted replica: the topology is re-read).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson
import trio

from export.keys import GAP_FIELD, MAX_SEQ, STREAM_FIELD, Keys, parse_gap, parse_stream_id

from .errors import Unavailable
from .sources import SnapshotSource, StreamWatcher, usable

if TYPE_CHECKING:
    from export.redisauth import RedisAuth
    from shm.reader import JsonPieces

log = logging.getLogger("ykshm.web")

EXPORTER_STALE_SECONDS = 5.0


class JsonBatch(NamedTuple):
    """The shape of `shm.CursorJsonBatch`."""

    lines: bytes
    count: int
    lost: tuple[int, int] | None


def _raw(response, **_options):
    return response


class RedisStore:
    """One worker's connection to the Redis that holds instance NAME (standalone or Cluster)."""

    def __init__(self, url: str, instance: str, auth: "RedisAuth | None" = None) -> None:
        self.url = url
        self.auth = auth
        self.keys = Keys.for_instance(instance)
        self._link: Any = None
        self._blocking: Any = None
        self._uuids: dict[int, str] = {}
        self.newest: tuple[int, int] = (0, -1)     # newest stream ID the watcher saw

    def _node(self):
        from export.redisconn import Link

        if self._link is None:
            self._link = Link.open(self.url, self.keys.events, self.auth)
            self._link.node.set_response_callback("XRANGE", _raw)
            self._link.node.set_response_callback("XREVRANGE", _raw)
        return self._link.node

    def close(self) -> None:
        for link in (self._link, self._blocking):
            if link is not None:
                link.close()
        self._link = self._blocking = None

    def wait_after(self, after: tuple[int, int], timeout: float) -> tuple[int, int] | None:
        """Block in XREAD BLOCK until an entry after `after` is in the stream, at most `timeout`
        seconds; the newest ID then (None if nothing came, or Redis failed: then it sleeps up to
        `timeout` instead). A connection of its own: call it from one thread at a time."""
        from export.redisconn import Link

        try:
            if self._blocking is None:
                self._blocking = Link.open(self.url, self.keys.events, self.auth)
                self._blocking.node.set_response_callback("XREAD", _raw)
                self._blocking.node.set_response_callback("XREVRANGE", _raw)
            node = self._blocking.node
            got = node.execute_command("XREAD", "COUNT", 1, "BLOCK", max(1, int(timeout * 1000)), "STREAMS",
                                       self.keys.events, "%d-%d" % after)
            if not got:
                return None
            newest = node.execute_command("XREVRANGE", self.keys.events, "+", "-", "COUNT", 1)
        except Exception as exc:  # Redis down: the handlers answer 503 meanwhile
            log.debug("replica: XREAD BLOCK failed: %s", exc)
            if self._blocking is not None:
                self._blocking.close()
                self._blocking = None
            time.sleep(min(timeout, 0.5))
            return None
        if not newest:
            return None
        seen = parse_stream_id(newest[0][0])
        if seen > self.newest:
            self.newest = seen
        return seen

    def call(self, *args: Any) -> Any:
        """One command; after a failure one reconnect and retry, then `Unavailable` with the reason."""
        from export.redisconn import RedisProblem, describe, redact

        for attempt in (0, 1):
            try:
                return self._node().execute_command(*args)
            except RedisProblem as exc:
                reason = str(exc)
            except Exception as exc:  # redis errors, OSError
                reason = describe(exc)
            if self._link is not None:
                self._link.close()
                self._link = None
            if attempt:
                raise Unavailable(f"Read replica: Redis {redact(self.url)} is not available: {reason}")
        raise AssertionError("unreachable")

    def entries(self, low: tuple[int, int], high: tuple[int, int], count: int | None = None,
                reverse: bool = False) -> list:
        """Raw [[id, [field, value, ...]], ...] of XRANGE (XREVRANGE: high..low)."""
        lo, hi = "%d-%d" % low, "%d-%d" % high
        args = ["XREVRANGE", self.keys.events, hi, lo] if reverse else ["XRANGE", self.keys.events, lo, hi]
        if count is not None:
            args += ["COUNT", count]
        return self.call(*args) or []

    def newest_id(self) -> tuple[int, int] | None:
        got = self.call("XREVRANGE", self.keys.events, "+", "-", "COUNT", 1)
        return parse_stream_id(got[0][0]) if got else None

    def uuid_of(self, generation: int) -> str:
        uuid = self._uuids.get(generation)
        if uuid is None:
            raw = self.call("HGET", self.keys.instances, f"gen:{generation}")
            uuid = raw.decode() if raw else f"generation-{generation}"
            self._uuids[generation] = uuid
        return uuid

    def exporter(self) -> dict[bytes, bytes]:
        raw = self.call("HGETALL", self.keys.exporter) or []
        if isinstance(raw, dict):
            return raw
        return dict(zip(raw[::2], raw[1::2]))


def _fields(entry) -> dict[bytes, bytes]:
    values = entry[1]
    return dict(zip(values[::2], values[1::2]))


def _last_event(entry) -> int:
    fields = _fields(entry)
    if GAP_FIELD in fields:
        return parse_gap(fields[GAP_FIELD])[1]
    return parse_stream_id(entry[0])[1]


class RedisRingReader:
    """The events of one generation in Redis, with `shm.RingReader`'s reading interface."""

    def __init__(self, store: RedisStore, generation: int, uuid: str, capacity: int) -> None:
        self.store = store
        self.generation = generation
        self.instance_uuid = uuid
        self.name = store.keys.events
        self.capacity = capacity
        self._exporter: dict[bytes, bytes] = {}
        self._exporter_at = 0.0

    def bounds(self) -> tuple[int, int] | None:
        """(first event in Redis, last event or last lost id) of this generation; None if no event.
        Leading gap entries name lost ids: LowestID is the first event after them."""
        g = self.generation
        last = self.store.entries((g, 0), (g, MAX_SEQ), count=1, reverse=True)
        if not last:
            return None
        lowest = None
        after = 0
        while lowest is None:
            head = self.store.entries((g, after), (g, MAX_SEQ), count=16)
            if not head:
                return None
            for entry in head:
                if entry[1][0] == STREAM_FIELD:
                    lowest = parse_stream_id(entry[0])[1]
                    break
            after = _last_event(head[-1]) + 1
        return lowest, max(lowest, _last_event(last[0]))

    def _events(self, start: int, count: int) -> list:
        g = self.generation
        return self.store.entries((g, start), (g, min(start + count - 1, MAX_SEQ)))

    def read_range_json(self, start: int, count: int) -> tuple[bytes, int]:
        if start < 0 or count <= 0:
            return b"null", 0
        # entries are [id, [b"j", json]] (an event) or [id, [b"gap", .., b"ts", ..]] (skipped)
        parts = [e[1][1] for e in self._events(start, count) if e[1][0] == STREAM_FIELD]
        if not parts:
            return b"null", 0
        return b"[" + b",".join(parts) + b"]", len(parts)

    def read_range_json_parts(self, start: int, count: int, part: int, head: bytes = b"",
                              tail: bytes = b"", pieces: JsonPieces | None = None) -> Iterator[bytes]:
        """As `shm.RingReader.read_range_json_parts`, in one piece (the entries come in one XRANGE)."""
        body, n = self.read_range_json(start, count)
        if pieces is not None:
            pieces.count, pieces.done = n, True
        yield b"".join((head, body, tail))

    def cursor(self, next_id: int) -> "RedisCursor":
        if next_id < 0:
            raise ValueError(f"cursor start must be >= 0, got {next_id}")
        return RedisCursor(self, next_id)

    def wait_beyond(self, next_id: int, timeout: float) -> bool:
        """As `shm.RingReader.wait_beyond`: block (in a thread of its own) until an entry after
        event next_id - 1 of this generation is in Redis (XREAD BLOCK), at most `timeout` s."""
        after = (self.generation, next_id - 1) if next_id else (self.generation - 1, MAX_SEQ)
        return self.store.wait_after(after, timeout) is not None

    def instance_changed(self) -> bool:
        """A newer generation is in Redis (the engine restarted), as far as the watcher has seen."""
        newest = self.store.newest
        return newest[0] > self.generation

    # -- what the health check and metrics ask of a ring: relayed by the exporter

    def _exporter_fields(self) -> dict[bytes, bytes]:
        now = time.monotonic()
        if now - self._exporter_at > 0.5:
            self._exporter = self.store.exporter()
            self._exporter_at = now
        return self._exporter

    def _int(self, field: bytes) -> int:
        try:
            return int(float(self._exporter_fields().get(field, b"0")))
        except ValueError:
            return 0

    @property
    def writer_pid(self) -> int:
        return self._int(b"engine_pid")

    def heartbeat_nano(self) -> int:
        return self._int(b"engine_heartbeat_nano")

    def writer_alive(self) -> bool:
        fresh = (time.time_ns() - self._int(b"updated_nano")) / 1e9 < EXPORTER_STALE_SECONDS
        return fresh and bool(self._int(b"engine_alive"))

    def stats_dict(self) -> dict:
        raise Unavailable("a read replica has no ring statistics")


class RedisCursor:
    """Follows one generation from `next_id` on; `poll_json` as `shm.Cursor.poll_json`."""

    def __init__(self, reader: RedisRingReader, next_id: int) -> None:
        self._reader = reader
        self.next_id = next_id

    def poll_json(self, max_events: int = 1000) -> JsonBatch:
        if max_events <= 0:
            return JsonBatch(b"", 0, None)
        reader = self._reader
        g = reader.generation
        got = reader.store.entries((g, self.next_id), (g, MAX_SEQ), count=max_events)
        if not got:
            return JsonBatch(b"", 0, None)
        first_seq = parse_stream_id(got[0][0])[1]
        if first_seq > self.next_id:          # trimmed by retention before it was read
            lost = (self.next_id, first_seq - 1)
            self.next_id = first_seq
            return JsonBatch(b"", 0, lost)
        lines = []
        for entry in got:
            fields = _fields(entry)
            gap = fields.get(GAP_FIELD)
            if gap is not None:
                if lines:
                    break                      # report the gap on the next call
                lost = parse_gap(gap)
                self.next_id = lost[1] + 1
                return JsonBatch(b"", 0, lost)
            lines.append(fields[STREAM_FIELD])
            self.next_id = parse_stream_id(entry[0])[1] + 1
        return JsonBatch(b"\n".join(lines) + b"\n", len(lines), None)


class RedisRingSource:
    """`RingSource` of a replica: `get()` is a reader of the newest generation in Redis."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self.name = store.keys.events
        self._reader: RedisRingReader | None = None

    def get(self) -> RedisRingReader:
        newest = self.store.newest_id()
        if newest is None:
            raise Unavailable(f"Read replica: no events in Redis yet (stream {self.store.keys.events} is "
                              "empty or missing: is `ykshm export` running?)")
        if newest > self.store.newest:
            self.store.newest = newest
        reader = self._reader
        if reader is None or reader.generation != newest[0]:
            capacity = 0
            try:
                capacity = int(self.store.exporter().get(b"ring_capacity", b"0"))
            except (Unavailable, ValueError):
                pass
            reader = RedisRingReader(self.store, newest[0], self.store.uuid_of(newest[0]), capacity)
            self._reader = reader
        return reader


class RedisWatcher(StreamWatcher):
    """The watcher of a replica (web.sources.StreamWatcher): one thread waits in XREAD BLOCK on
    the stream (`RedisStore.wait_after`) and wakes the streams waiting for a newer event."""

    BLOCK_SECONDS = 1.0

    def __init__(self, store: RedisStore) -> None:
        super().__init__()
        self.store = store
        self._after: tuple[int, int] | None = None
        """The newest stream ID seen (None before the first look)."""

    async def _news(self) -> int | None:
        if self._after is None:
            self._after = await trio.to_thread.run_sync(self._newest, abandon_on_cancel=True)
            return None
        seen = await trio.to_thread.run_sync(self.store.wait_after, self._after, self.BLOCK_SECONDS,
                                             abandon_on_cancel=True)
        if seen is None or seen == self._after:
            return None
        self._after = seen
        return seen[1]

    def _progress(self) -> int:
        return self._after[1] if self._after is not None else 0

    def _newest(self) -> tuple[int, int]:
        try:
            return self.store.newest_id() or (0, 0)
        except Unavailable:
            return 0, 0


class RedisSnapshotSource(SnapshotSource):
    """`SnapshotSource` of a replica: the exported state hash, parsed once per (instance, generation)."""

    def __init__(self, store: RedisStore) -> None:
        super().__init__(store.keys.state)
        self.store = store
        self._version: tuple[bytes, bytes] | None = None
        self._published = 0

    def _ensure(self) -> None:
        now = time.monotonic()
        if now - self._checked < 0.2 and self._doc is not None:
            return
        self._checked = now
        generation, instance, published = self.store.call(
            "HMGET", self.store.keys.state, "generation", "instance", "published_nano")
        if generation is None:
            self._doc = None
            return
        version = (instance or b"", generation)
        if version != self._version or self._doc is None:
            raw = self.store.call("HGET", self.store.keys.state, "doc")
            self._doc = orjson.loads(raw) if raw else None
            self._version = version
            self._cache.clear()
        self._published = int(published or 0)

    def doc(self) -> dict:
        self._ensure()
        if self._doc is None:
            raise Unavailable("No scheduler state: the exporter has not copied the engine's state to Redis "
                              f"({self.store.keys.state} is missing); only the event endpoints are served")
        return usable(self._doc)

    def published_nano(self) -> int:
        try:
            self._ensure()
        except Unavailable:
            return 0
        return self._published


def replica_sources(url: str, instance: str, auth: "RedisAuth | None" = None
                    ) -> tuple[RedisRingSource, RedisSnapshotSource, RedisWatcher]:
    """The (ring, snapshot, watcher) of a worker serving from Redis."""
    store = RedisStore(url, instance, auth)
    return RedisRingSource(store), RedisSnapshotSource(store), RedisWatcher(store)
