"""Render once, send to many (web.fanout) and the futex wake of the ring watcher (web.sources)."""

from __future__ import annotations

import threading
import uuid

import orjson
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from fuzzbudget import examples

from shm import RingReader, RingWriter
from shm import segment as shm_segment
from web.fanout import ChunkCache
from web.sources import RingSource, RingWatcher


def _unlink(name: str) -> None:
    paths = shm_segment.segment_paths(name)
    for path in (paths.events, paths.requests):
        try:
            import os

            os.unlink(path)
        except FileNotFoundError:
            pass


def _ids(lines: bytes) -> list[int]:
    return [orjson.loads(line)["id"] for line in lines.splitlines()] if lines else []


STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("publish"), st.integers(1, 40)),
        st.tuples(st.just("poll"), st.integers(0, 5), st.sampled_from([4, 16])),
    ),
    max_size=60,
)


@settings(max_examples=examples(200, 80), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(starts=st.lists(st.sampled_from([0, 4, 20, 30]), min_size=1, max_size=6), steps=STEPS)
def test_streams_sharing_chunks_each_get_their_own_events_in_order(starts, steps):
    """Cursors at any positions, polled through one cache in any interleaving with publishes:
    each sees exactly the ids from its start on, in order, no gap, no repeat, and a ring that
    laps a cursor still reports the loss to that cursor. (Few starts and chunk sizes, so cursors
    meet at the same position and share chunks often.)"""
    name = f"t-fan-{uuid.uuid4().hex[:10]}"
    writer = RingWriter.create(name, 64)
    try:
        for i in range(30):
            writer.publish(2, 1, 201, f"app-{i}", f"pod-{i}")
        reader = RingReader.attach(name)
        cache = ChunkCache()
        cursors = [reader.cursor(s) for s in starts]
        seen: list[list[int]] = [[] for _ in starts]
        lapped = [False] * len(starts)
        published = 30
        for step in steps:
            if step[0] == "publish":
                for _ in range(step[1]):
                    writer.publish(2, 1, 201, f"app-{published}", f"pod-{published}")
                    published += 1
                continue
            _, which, n = step
            which %= len(cursors)
            if lapped[which]:
                continue
            got = cache.poll(reader, cursors[which], n)
            if got.lost is not None:
                lapped[which] = True
                continue
            ids = _ids(got.lines)
            assert len(ids) == got.count <= n
            seen[which].extend(ids)
        for i, start in enumerate(starts):
            ids = seen[i]
            assert ids == list(range(start, start + len(ids)))
            assert cursors[i].next_id == start + len(ids) or lapped[i]
        reader.close()
    finally:
        writer.close()
        _unlink(name)


def test_a_chunk_is_rendered_once_for_streams_at_the_same_position(ring_name):
    writer = RingWriter.create(ring_name, 1000)
    try:
        reader = RingReader.attach(ring_name)
        cache = ChunkCache()
        cursors = [reader.cursor(0) for _ in range(50)]
        for i in range(10):
            writer.publish(2, 1, 201, "app", f"pod-{i}")
        bodies = {cache.poll(reader, c, 256).lines for c in cursors}
        assert len(bodies) == 1 and _ids(next(iter(bodies))) == list(range(10))
        assert (cache.rendered, cache.reused) == (1, 49)
        assert all(c.next_id == 10 for c in cursors)
        reader.close()
    finally:
        writer.close()


async def test_watcher_is_woken_by_the_writer_not_by_a_timer(ring_name):
    """With the fallback look pushed to an hour, only the writer's futex wake can make the watcher
    fire within the test's deadline."""
    writer = RingWriter.create(ring_name, 1000)
    try:
        writer.publish(2, 1, 201, "app", "pod-0")
        writer.heartbeat()  # a waking writer: the watcher will sleep on the futex
        watcher = RingWatcher(RingSource(ring_name))
        watcher.FALLBACK_SECONDS = 3600.0
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watcher.run)
            with trio.fail_after(10):
                while watcher.highest != 0:
                    await watcher.wait_beyond(0, 3600)
                await trio.testing.wait_all_tasks_blocked(0.05)  # the watcher is parked in FUTEX_WAIT

                def publish_and_wake():
                    writer.publish(2, 1, 201, "app", "pod-1")
                    writer.heartbeat()

                threading.Thread(target=publish_and_wake).start()
                await watcher.wait_beyond(1, 3600)
            assert watcher.highest == 1
            nursery.cancel_scope.cancel()
    finally:
        writer.close()
