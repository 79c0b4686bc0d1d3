"""GET /ws/v1/events/stream against a real `ykshm web` (2 workers) and a real ring.

The shared server runs with maxStreams 6, maxStreamsPerHost 4, --stall-timeout 2 (TCP_USER_TIMEOUT).
"""

from __future__ import annotations

import re
import threading
import time

import httpx
import orjson
import trio

from rawhttp import open_stream


def port(web) -> int:
    return web.port


async def wait_open_streams(web, n: int, timeout: float = 20.0) -> None:
    deadline = trio.current_time() + timeout
    while True:
        text = httpx.get(web.url + "/ws/v1/metrics", timeout=5).text
        m = re.search(r"^ykshm_web_streams_open (\S+)$", text, re.M)
        if m and float(m.group(1)) == n:
            return
        if trio.current_time() > deadline:
            raise AssertionError(f"open streams != {n}: {m and m.group(1)}")
        await trio.sleep(0.05)


async def test_header_then_history_then_live(web):
    web.ring.publish(20)
    s = await open_stream(port(web), "/ws/v1/events/stream?count=5")
    try:
        assert s.status == 200
        assert s.headers["content-type"].startswith("application/x-ndjson")
        assert await s.obj() == {"InstanceUUID": web.ring.writer.instance_uuid}
        assert [e["id"] for e in await s.objs(5)] == [15, 16, 17, 18, 19]
        web.ring.publish(30, start=20)
        got = [e["id"] for e in await s.objs(30)]
        assert got == list(range(20, 50))
    finally:
        s.close()


async def test_default_count_is_live_only(web):
    web.ring.publish(10)
    s = await open_stream(port(web), "/ws/v1/events/stream")
    try:
        await s.obj()
        web.ring.publish(3, start=10)
        assert [e["id"] for e in await s.objs(3)] == [10, 11, 12]
    finally:
        s.close()


async def test_history_and_live_never_interleave_repeat_or_skip(web):
    """A writer publishes without pause while clients join with history: ids stay consecutive."""
    web.ring.renew(100_000)
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            web.ring.publish(50, start=i)
            i += 50
            time.sleep(0.001)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        await trio.sleep(0.05)
        streams = [await open_stream(port(web), f"/ws/v1/events/stream?count={c}") for c in (0, 7, 500)]
        try:
            for s in streams:
                await s.obj()
                got = [e["id"] for e in await s.objs(3000)]
                assert got == list(range(got[0], got[0] + 3000)), "gap or repeat"
        finally:
            for s in streams:
                s.close()
    finally:
        stop.set()
        thread.join()


async def test_resume_with_start(web):
    web.ring.publish(40)
    s = await open_stream(port(web), "/ws/v1/events/stream?start=33&count=2")  # start wins
    try:
        await s.obj()
        assert [e["id"] for e in await s.objs(7)] == list(range(33, 40))
        web.ring.publish(1, start=40)
        assert (await s.obj())["id"] == 40
    finally:
        s.close()
    # start == next id is allowed (nothing missed); beyond it is an error naming the next id
    s = await open_stream(port(web), "/ws/v1/events/stream?start=41")
    s.close()
    assert s.status == 200
    r = httpx.get(web.url + "/ws/v1/events/stream?start=99", timeout=5)
    assert r.status_code == 400 and "next event ID 41" in r.json()["message"]
    for q in ("count=-1", "count=x", "start=-1", f"count={2**64}"):
        r = httpx.get(web.url + "/ws/v1/events/stream?" + q, timeout=5)
        assert r.status_code == 400 and r.json()["message"].startswith("strconv.ParseUint: parsing")


async def test_start_below_lowest_reports_the_lost_range(web):
    web.ring.publish(250)  # 150..249 retained
    s = await open_stream(port(web), "/ws/v1/events/stream?start=120")
    try:
        await s.obj()
        last = await s.obj()
        assert last["status_code"] == 410 and "lost events 120-149" in last["message"]
        assert "the start was below LowestID" in last["message"]    # not only the lapped-client words
        assert await s.rest() == []
    finally:
        s.close()


async def test_lapped_client_gets_lost_range_line_then_close(web):
    """A client that stops reading while the writer laps the ring: delivered ids are consecutive,
    then one last line names the lost ids, then the response ends."""
    s = await open_stream(port(web), "/ws/v1/events/stream", rcvbuf=4096)
    try:
        await s.obj()
        big = "x" * 1000
        web.ring.publish(6000, message=big)  # far more than socket buffers + ring capacity 100
        await trio.sleep(0.3)
        web.ring.publish(200, start=6000, message=big)
        lines = await s.rest()
        *events, last = lines
        got = [e["id"] for e in events]
        assert got == list(range(0, len(got)))
        assert last["status_code"] == 410
        m = re.search(r"lost events (\d+)-(\d+)", last["message"])
        assert m and int(m.group(1)) == len(got)
    finally:
        s.close()


async def test_instance_change_ends_streams(web):
    web.ring.publish(3)
    s = await open_stream(port(web), "/ws/v1/events/stream?count=3")
    try:
        await s.objs(4)
        web.ring.renew(100)
        with trio.fail_after(5):
            last = await s.obj()
        assert last["status_code"] == 503 and "new instance" in last["message"]
        assert await s.rest() == []
    finally:
        s.close()


async def test_stream_limits_total_and_per_peer_address(web):
    opened = []
    try:
        for _ in range(4):
            opened.append(await open_stream(port(web), "/ws/v1/events/stream", local="127.0.0.1"))
        assert all(s.status == 200 for s in opened)
        # 5th from the same peer address: per-host limit, whatever Host header it sends
        r = await open_stream(port(web), "/ws/v1/events/stream", local="127.0.0.1", host_header="other")
        assert r.status == 503
        body = orjson.loads(r.body)
        assert body == {"status_code": 503, "message": "Too many streaming connections",
                        "description": "Too many streaming connections"}
        for local in ("127.0.0.2", "127.0.0.3"):
            opened.append(await open_stream(port(web), "/ws/v1/events/stream", local=local))
            assert opened[-1].status == 200
        # total of 6 reached: a new peer is refused too
        r = await open_stream(port(web), "/ws/v1/events/stream", local="127.0.0.4")
        assert r.status == 503
        r = await open_stream(port(web), "/ws/v1/events/stream", local="127.0.0.4")
        assert r.status == 503
    finally:
        for s in opened:
            s.close()
    await wait_open_streams(web, 0)
    s = await open_stream(port(web), "/ws/v1/events/stream", local="127.0.0.4")
    assert s.status == 200
    s.close()
    await wait_open_streams(web, 0)


async def test_stalled_client_is_closed_within_seconds_others_continue(web):
    """A client that never reads: TCP_USER_TIMEOUT (2 s here) resets it; a reading client on the
    same server keeps getting every event."""
    await wait_open_streams(web, 0)
    stalled = await open_stream(port(web), "/ws/v1/events/stream", rcvbuf=4096)
    good = await open_stream(port(web), "/ws/v1/events/stream")
    web.ring.renew(100_000)  # ends both; reconnect to the new instance
    stalled.close()
    good.close()
    await wait_open_streams(web, 0)
    stalled = await open_stream(port(web), "/ws/v1/events/stream", rcvbuf=4096)
    good = await open_stream(port(web), "/ws/v1/events/stream")
    try:
        await stalled.obj()
        await good.obj()
        await wait_open_streams(web, 2)
        big = "y" * 1000
        t0 = trio.current_time()
        next_id = 0
        received = []
        closed_at = None
        while trio.current_time() - t0 < 20:
            web.ring.publish(200, start=next_id, message=big)
            next_id += 200
            with trio.move_on_after(0.05):
                while len(received) < next_id:
                    received.append((await good.obj())["id"])
            text = httpx.get(web.url + "/ws/v1/metrics", timeout=5).text
            if re.search(r"^ykshm_web_streams_open 1\.0$", text, re.M):
                closed_at = trio.current_time() - t0
                break
        assert closed_at is not None, "stalled client was not dropped"
        print("stalled closed after", closed_at, "s; sent", next_id)
        assert closed_at < 15  # 2 s TCP_USER_TIMEOUT once the buffers are full; slack for a busy box
        # the good client still gets everything, in order
        web.ring.publish(10, start=next_id)
        next_id += 10
        with trio.fail_after(10):
            while len(received) < next_id:
                received.append((await good.obj())["id"])
        assert received == list(range(next_id))
    finally:
        stalled.close()
        good.close()
    await wait_open_streams(web, 0)
