"""Visibility: a status write is awaited until the watch delivers its resourceVersion."""

from __future__ import annotations

import trio
import trio.testing

from streams.regions.visibility import Visibility


async def test_wait_returns_when_the_watch_delivers_the_version(autojump_clock):
    vis = Visibility(timeout=10.0)
    done = []

    async def writer():
        done.append(await vis.wait("ns/job-cr-0", "42"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        await trio.testing.wait_all_tasks_blocked()
        vis.observed("ns/job-cr-0", "41")  # an older version, or another object's
        vis.observed("ns/job-cr-1", "42")
        await trio.testing.wait_all_tasks_blocked()
        assert done == []
        vis.observed("ns/job-cr-0", "42")
    assert done == [True]


async def test_a_version_seen_before_waiting_returns_at_once():
    vis = Visibility()
    vis.observed("ns/cr", "7")
    vis.observed("ns/cr", "8")
    with trio.testing.assert_no_checkpoints():
        assert await vis.wait("ns/cr", "7") is True


async def test_a_version_never_seen_gives_up_after_the_timeout(autojump_clock):
    vis = Visibility(timeout=5.0)
    start = trio.current_time()
    assert await vis.wait("ns/cr", "9") is False
    assert trio.current_time() - start == 5.0
    vis.observed("ns/cr", "9")  # late: nobody waits any more, nothing breaks


async def test_deleting_the_object_releases_its_waiters(autojump_clock):
    vis = Visibility(timeout=100.0)
    results = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: _collect(vis, results))
        await trio.testing.wait_all_tasks_blocked()
        vis.forget("ns/cr")
    assert results == [True] and trio.current_time() < 100.0


async def _collect(vis, results):
    results.append(await vis.wait("ns/cr", "3"))


async def test_visible_writer_returns_once_the_watch_echoes_the_write(autojump_clock):
    from streams.regions.visibility import visible_writer

    vis = Visibility()
    puts = []

    async def put_status(index, doc):
        puts.append((index, doc))
        return str(len(puts) + 100)

    write = visible_writer(put_status, lambda i: f"ns/job-{i}", vis)
    finished = trio.Event()

    async def writer():
        await write(3, {"state": "PROCESSING"})
        finished.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        await trio.testing.wait_all_tasks_blocked()
        assert puts == [(3, {"state": "PROCESSING"})] and not finished.is_set()
        vis.observed("ns/job-3", "101")
    assert finished.is_set()
