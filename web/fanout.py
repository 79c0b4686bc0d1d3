"""Render once, send to many: the per-worker cache of NDJSON chunks that live streams share.

Most live streams of a worker sit at the head of the ring, so when the writer wakes them they
all ask for the same events. The first stream to ask for the chunk starting at id S renders it
(`Cursor.poll_json`); every other stream whose cursor is at S gets the same bytes and moves its
cursor to where that chunk ended. A stream behind the head reads with its own cursor as before.

Why this keeps every rule of a stream (web.events): a rendered chunk is the events S..E in id
order, and an event's JSON never changes once published, so whoever sends the chunk sends what
its own cursor would have read — no gap, no repeat, same order. A chunk is cached only when it
was read without loss; a stream whose cursor was overwritten gets its 410 from its own read.
The cache is keyed by the reader too, so a new engine instance (ids restart at 0) never gets the
old instance's chunks. It holds the last `SIZE` chunks: bounded memory, whatever the stream count.
"""

from __future__ import annotations

import collections
from typing import Any, NamedTuple


class Chunk(NamedTuple):
    lines: bytes
    count: int
    lost: tuple[int, int] | None


class ChunkCache:
    """Chunks rendered by one stream, reused by the next streams at the same position."""

    SIZE = 32

    def __init__(self) -> None:
        self._chunks: collections.OrderedDict[tuple[int, int], tuple[Any, bytes, int, int]] = (
            collections.OrderedDict())
        self.rendered = 0
        self.reused = 0

    def poll(self, reader: Any, cursor: Any, max_events: int) -> Chunk:
        """The next chunk of `cursor` (at most `max_events`), rendered once per worker."""
        start = cursor.next_id
        key = (id(reader), start)
        hit = self._chunks.get(key)
        if hit is not None and hit[0] is reader and hit[2] <= max_events:
            _reader, lines, count, next_id = hit
            cursor.next_id = next_id
            self.reused += 1
            return Chunk(lines, count, None)
        got = cursor.poll_json(max_events)
        self.rendered += 1
        if got.count and got.lost is None:
            self._chunks[key] = (reader, got.lines, got.count, cursor.next_id)
            if len(self._chunks) > self.SIZE:
                self._chunks.popitem(last=False)
        return Chunk(got.lines, got.count, got.lost)
