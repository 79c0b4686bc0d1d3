"""The replica's reads (web/redis_source.py) against a model, on a real redis-server: for streams
with random gap entries and a random retention cut, `bounds`, `read_range_json` and a cursor's
`poll_json` give exactly what the ring's readers would for the events Redis still holds, and a lost
range is reported exactly once, naming exactly the missing ids."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.redis_server import RedisServer
from export.keys import Keys
from web.redis_source import replica_sources


@pytest.fixture(scope="module")
def server():
    s = RedisServer()
    yield s
    s.close()


def event_json(i: int) -> bytes:
    return orjson.dumps({"id": i, "type": 2, "objectID": f"app-{i % 7}"})


@st.composite
def scenarios(draw):
    n = draw(st.integers(1, 60))
    gaps = []
    i = 0
    present = []
    while i < n:
        if draw(st.integers(0, 9)) == 0:
            length = draw(st.integers(1, 5))
            gaps.append((i, i + length - 1))
            i += length
        else:
            present.append(i)
            i += 1
    cut = draw(st.integers(0, n))
    return n, gaps, present, cut


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenarios(), st.integers(0, 70), st.integers(1, 80), st.integers(1, 7))
def test_replica_reads_match_the_model(server, scenario, start, count, chunk):
    n, gaps, present, cut = scenario
    name = "fuzz"
    key = Keys.for_instance(name)
    with server.client() as client:
        client.delete(key.events, key.instances)
        client.hset(key.instances, mapping={"gen:1": "uuid-1", "uuid:uuid-1": 1, "top": 1})
        entries = [(g[0], {"gap": f"{g[0]}-{g[1]}", "ts": 1}) for g in gaps] + [(i, {"j": event_json(i)}) for i in present]
        for seq, fields in sorted(entries, key=lambda e: e[0]):
            client.xadd(key.events, fields, id=f"1-{seq}")
        client.execute_command("XTRIM", key.events, "MINID", f"1-{cut}")
    kept = [i for i in present if i >= cut]   # XTRIM MINID (exact) keeps ids >= cut
    kept_gaps = [g for g in gaps if g[0] >= cut]
    ring, _snapshot, _watcher = replica_sources(server.url, name)
    try:
        check_reads(ring, n, kept, kept_gaps, start, count, chunk)
    finally:
        ring.store.close()


def check_reads(ring, n, kept, kept_gaps, start, count, chunk) -> None:
    try:
        reader = ring.get()
    except Exception:
        assert not kept and not kept_gaps       # an empty stream: 503, nothing to serve
        return
    # bounds: the first event still there .. the last event (or the end of a trailing gap)
    bounds = reader.bounds()
    if not kept:
        assert bounds is None
    else:
        trailing = [g[1] for g in kept_gaps if g[0] > kept[-1]]
        assert bounds == (kept[0], max([kept[-1]] + trailing))
    # batch: exactly the retained events in [start, start + count - 1]
    wanted = [i for i in kept if start <= i < start + count]
    body, got_n = reader.read_range_json(start, count)
    assert got_n == len(wanted)
    assert body == (b"[" + b",".join(event_json(i) for i in wanted) + b"]" if wanted else b"null")
    # cursor from `start`: events in order; the first loss names exactly the missing ids
    cursor = reader.cursor(start)
    seen = []
    lost = None
    for _ in range(200):
        batch = cursor.poll_json(chunk)
        if batch.lost is not None:
            lost = batch.lost
            break
        if not batch.count:
            break
        seen += [orjson.loads(line)["id"] for line in batch.lines.splitlines()]
    later = [i for i in kept if i >= start]
    if lost is None:
        assert seen == later
        missing = [i for i in range(start, (later[-1] + 1) if later else start) if i not in kept]
        assert missing == []
    else:
        lo, hi = lost
        assert seen == [i for i in later if i < lo]
        assert lo == (seen[-1] + 1 if seen else start)
        assert all(i not in kept for i in range(lo, hi + 1))
        assert hi + 1 in kept or any(g[0] == hi + 1 for g in kept_gaps) or hi + 1 >= n or hi + 1 > max(kept + [-1])


def test_wait_beyond_blocks_in_xread_until_the_next_entry(server):
    """RingReader.wait_beyond's contract on a replica (a thread blocked in XREAD BLOCK)."""
    import threading
    import time

    name = "waiter"
    key = Keys.for_instance(name)
    with server.client() as client:
        client.delete(key.events, key.instances)
        client.hset(key.instances, mapping={"gen:1": "uuid-1", "uuid:uuid-1": 1, "top": 1})
        client.xadd(key.events, {"j": event_json(0)}, id="1-0")
        ring, _snapshot, _watcher = replica_sources(server.url, name)
        try:
            reader = ring.get()
            began = time.monotonic()
            assert reader.wait_beyond(1, 0.3) is False          # nothing after event 0
            assert time.monotonic() - began >= 0.25
            assert reader.wait_beyond(0, 5.0) is True           # event 0 itself is beyond "nothing"
            result = []
            waiter = threading.Thread(target=lambda: result.append(reader.wait_beyond(1, 10.0)))
            waiter.start()
            time.sleep(0.2)
            assert waiter.is_alive()                            # blocked, not polling to an answer
            client.xadd(key.events, {"j": event_json(1)}, id="1-1")
            waiter.join(5)
            assert result == [True]
            client.xadd(key.events, {"j": event_json(0)}, id="2-0")   # a new engine instance
            assert reader.wait_beyond(2, 1.0) is True and reader.instance_changed()
        finally:
            ring.store.close()
