"""Ring semantics: bounds, ranges, recent, cursors, interning, against a plain-Python model."""

from __future__ import annotations

import functools
import subprocess
import sys
import uuid

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from shm import Event, RingReader, RingWriter, ShmError
from shm.events import cut_message
from shm.writer import valid_text

SLOW = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def ev(i: int) -> dict:
    return dict(type=2, change_type=2, change_detail=201, object_id=f"app-{i % 7}",
                reference_id=f"ref-{i}", message=f"m{i % 3}",
                resource={"memory": i, "vcore": 1} if i % 2 else None,
                timestamp_nano=1_000_000 + i)


def as_event(i: int, d: dict) -> Event:
    return Event(id=i, **d)


def publish_n(w: RingWriter, start: int, n: int) -> None:
    for i in range(start, start + n):
        assert w.publish(**ev(i)) == i


# -- the cases YuniKorn gets wrong ----------------------------------------------------------------


def test_twenty_slots_twenty_five_events(make_ring):
    w, r = make_ring(20)
    publish_n(w, 0, 25)
    assert r.bounds() == (5, 24)
    assert [e.id for e in r.read_range(6, 3)] == [6, 7, 8]
    assert r.read_range(6, 3) == [as_event(i, ev(i)) for i in (6, 7, 8)]
    assert [e.id for e in r.read_recent(22)] == list(range(5, 25))
    assert [e.id for e in r.read_recent(3)] == [22, 23, 24]
    assert r.read_range(4, 3) == []          # below lowest
    assert r.read_range(25, 3) == []         # above highest
    assert r.read_range_json(4, 3) == (b"null", 0)
    assert r.read_range_json(25, 1) == (b"null", 0)
    assert [e.id for e in r.read_range(20, 100)] == list(range(20, 25))
    assert r.bounds() == (5, 24)


@pytest.mark.parametrize("capacity", [1, 2, 20])
def test_verify_is_clean_at_exactly_capacity_plus_one_events(make_ring, capacity):
    """The first record that overwrites a slot (id == capacity) raises lowest_id to 1: a healthy
    ring that holds exactly capacity + 1 events (an engine gone quiet right after its first wrap)
    verifies clean, as it does before and after (`ykshm ring verify` reports no corruption)."""
    w, r = make_ring(capacity)
    publish_n(w, 0, capacity)
    assert r.verify() == [] and r.bounds() == (0, capacity - 1)
    publish_n(w, capacity, 1)
    assert r.verify() == []
    assert r.bounds() == (1, capacity) and r.stats().lowest_id == 1
    publish_n(w, capacity + 1, 1)
    assert r.verify() == [] and r.bounds() == (2, capacity + 1)


def test_empty_ring(make_ring):
    w, r = make_ring(20)
    assert r.bounds() is None
    assert r.read_range(0, 10) == []
    assert r.read_recent(5) == []
    assert r.read_range_json(0, 10) == (b"null", 0)
    c = r.cursor(0)
    assert c.poll() == ([], None)
    assert r.stats().lowest_id is None
    w.publish(2, 1, 203, "a")
    assert r.bounds() == (0, 0)
    assert [e.id for e in c.poll().events] == [0]


def test_ids_start_at_zero_and_json_always_has_id(make_ring):
    w, r = make_ring(4)
    assert w.publish(0, 0, 0, timestamp_nano=5) == 0
    assert r.read_range_json(0, 1) == (b'[{"id":0,"timestampNano":5}]', 1)


# -- the model ------------------------------------------------------------------------------------


@SLOW
@given(cap=st.integers(1, 40), steps=st.lists(st.tuples(st.integers(0, 90), st.integers(-5, 50),
                                                          st.integers(0, 60)), min_size=1, max_size=8))
def test_ring_matches_model(ring_name, cap, steps):
    w = RingWriter.create(ring_name, cap, 1)
    r = RingReader.attach(ring_name)
    try:
        written = 0
        for n, off, count in steps:
            publish_n(w, written, n)
            written += n
            lo = max(0, written - cap)
            hi = written - 1
            assert r.bounds() == (None if written == 0 else (lo, hi))
            start = lo + off
            got = [e.id for e in r.read_range(start, count)]
            want = [] if written == 0 or not lo <= start <= hi else list(range(start, min(hi + 1, start + count)))
            assert got == want
            data, k = r.read_range_json(start, count)
            assert k == len(want)
            assert data == (b"null" if not want else
                            b"[" + b",".join(as_event(i, ev(i)).to_json() for i in want) + b"]")
            want_recent = [] if written == 0 or count <= 0 else list(range(max(lo, hi - count + 1), hi + 1))
            assert [e.id for e in r.read_recent(count)] == want_recent
        assert r.verify() == []
    finally:
        r.close()
        w.close()
        w.unlink()


@SLOW
@given(cap=st.integers(1, 30), plan=st.lists(st.tuples(st.integers(0, 80), st.integers(1, 25)),
                                              min_size=1, max_size=10),
       start=st.integers(0, 10))
def test_cursor_matches_model(ring_name, cap, plan, start):
    w = RingWriter.create(ring_name, cap, 1)
    r = RingReader.attach(ring_name)
    try:
        c = r.cursor(start)
        cj = r.cursor(start)
        written = 0
        expect = start
        for n, max_events in plan:
            publish_n(w, written, n)
            written += n
            lo = max(0, written - cap)
            lost = None
            if expect < lo:
                lost = (expect, lo - 1)
                expect = lo
            ids = list(range(expect, min(written, expect + max_events))) if expect < written else []
            b = c.poll(max_events)
            assert b.lost == lost
            assert [e.id for e in b.events] == ids
            assert b.events == [as_event(i, ev(i)) for i in ids]
            jb = cj.poll_json(max_events)
            assert jb.lost == lost and jb.count == len(ids)
            assert jb.lines == b"".join(as_event(i, ev(i)).to_json() + b"\n" for i in ids)
            expect += len(ids)
            assert c.next_id == cj.next_id == expect
    finally:
        r.close()
        w.close()
        w.unlink()


def test_cursor_reports_exact_lost_range(make_ring):
    w, r = make_ring(10)
    c = r.cursor(0)
    publish_n(w, 0, 3)
    assert [e.id for e in c.poll().events] == [0, 1, 2]
    publish_n(w, 3, 30)                    # ids 3..32, retained 23..32
    b = c.poll(4)
    assert b.lost == (3, 22)
    assert [e.id for e in b.events] == [23, 24, 25, 26]
    b = c.poll()
    assert b.lost is None and [e.id for e in b.events] == list(range(27, 33))


# -- fields ---------------------------------------------------------------------------------------


def test_uuid_and_other_reference_ids_round_trip(make_ring):
    w, r = make_ring(50)
    u = str(uuid.uuid4())
    refs = [u, u.upper(), u.replace("-", ""), "{" + u + "}", u[:-1] + "g", "alloc-1", "", u + " ",
            "00000000-0000-0000-0000-000000000000"]
    for ref in refs:
        w.publish(2, 2, 200, "app", ref, timestamp_nano=7)
    assert [e.reference_id for e in r.read_range(0, 100)] == refs
    # a canonical UUID is stored raw: it interns no string
    s = r.stats()
    assert s.strings_used == 1 + len([x for x in refs if x and x not in (u, refs[-1])])


@SLOW
@given(u=st.uuids().map(str), pos=st.integers(0, 35), ch=st.characters())
def test_a_near_uuid_reference_reads_back_exactly(ring_name, u, pos, ch):
    """A canonical UUID with any one character replaced is stored raw only if it is still a
    canonical UUID; either way it reads back as written (a lone surrogate as U+FFFD: the writer
    never raises on text), on the hot (pinned) publish path too."""
    near = u[:pos] + ch + u[pos + 1:]
    try:
        canonical = near == str(uuid.UUID(near))
    except ValueError:
        canonical = False
    w = RingWriter.create(ring_name, 8, 1)
    r = RingReader.attach(ring_name)
    try:
        first = w.publish(2, 2, 200, "app", near, resource={"memory": 1})
        w.publish(2, 2, 201, "app", near, resource={"memory": 1})   # objectID, resource pinned
        w.publish(2, 2, 202, "app", near, timestamp_nano=5)
        assert [e.reference_id for e in r.read_range(first, 3)] == [valid_text(near)] * 3
        s = r.stats()   # the table holds strings and resources: "app" (+ the reference)
        assert s.strings_used - s.resources_used == (1 if canonical else 2)
        assert r.verify() == []
    finally:
        r.close()
        w.close()
        w.unlink()


TEXT = st.text(alphabet=st.characters(), max_size=40)   # st.characters() draws lone surrogates


@SLOW
@given(obj=TEXT, ref=TEXT, msg=TEXT, portable=st.booleans())
@example(obj="pod-\ud800", ref="\udfff", msg="x\ud83d", portable=False)
@example(obj="pod-\ud800", ref="\udfff", msg="", portable=True)
def test_publish_never_raises_on_text_and_valid_utf8_reads_back_exactly(ring_name, obj, ref, msg, portable):
    """Any str as objectID, referenceID, message, on the closure (hot) path and the portable one,
    events and the request store: never an exception; text UTF-8 can encode reads back exactly,
    and each lone surrogate reads back as U+FFFD (what Go's encoding/json makes of invalid UTF-8)."""
    w = RingWriter.create(ring_name, 8, 4)
    r = RingReader.attach(ring_name)
    publish = functools.partial(RingWriter.publish, w) if portable else w.publish
    try:
        first = publish(2, 2, 200, obj, ref, msg)
        publish(2, 2, 201, obj, ref)                      # the pinned objectID path
        w.publish_request(obj, ref, msg)
        events = r.read_range(first, 2) + w.take_requests()
        want = tuple(valid_text(t) for t in (obj, ref, msg))
        assert [(e.object_id, e.reference_id, e.message) for e in events] == \
            [want, want[:2] + ("",), want]
        for text in (obj, ref, msg):
            if not any("\ud800" <= c <= "\udfff" for c in text):
                assert valid_text(text) == text           # valid UTF-8: exactly as written
        assert r.verify() == []
    finally:
        r.close()
        w.close()
        w.unlink()


def test_message_cut_at_1024_bytes_multibyte(make_ring):
    w, r = make_ring(10)
    msgs = ["é" * 600, "x" * 1024, "x" * 1025, "a" + "€" * 400, "😀" * 300]
    for m in msgs:
        w.publish(2, 1, 203, "app", "", m, timestamp_nano=1)
    got = [e.message for e in r.read_range(0, 10)]
    assert got == [cut_message(m) for m in msgs]
    assert all(len(g.encode()) <= 1024 for g in got)
    assert got[1] == "x" * 1024 and got[2] == "x" * 1021 + "..."
    assert r.stats().messages_cut == 4


def test_long_ids_are_cut_and_counted(make_ring):
    w, r = make_ring(10)
    w.publish(2, 1, 203, "o" * 2000, "r" * 1500, timestamp_nano=1)
    e = r.read_range(0, 1)[0]
    assert e.object_id == cut_message("o" * 2000) and e.reference_id == cut_message("r" * 1500)
    assert r.stats().strings_cut == 2


def test_resource_round_trip_and_validation(make_ring):
    w, r = make_ring(10)
    w.publish(2, 2, 200, "a", resource={"vcore": 1000, "memory": -5, "nvidia.com/gpu": 2 ** 63 - 1,
                                        "ü\"x": 0})
    w.publish(2, 2, 200, "a", resource={})
    e0, e1 = r.read_range(0, 2)
    assert e0.resource == {"vcore": 1000, "memory": -5, "nvidia.com/gpu": 2 ** 63 - 1, "ü\"x": 0}
    assert e1.resource is None
    for bad in ({"m": 1.5}, {"m": True}, {"m": "1"}, {"m": 2 ** 63}, {"m": None}):
        try:
            w.publish(2, 2, 200, "a", resource=bad)
        except (ValueError, TypeError):
            pass
        else:
            raise AssertionError(f"accepted {bad}")
    assert r.bounds() == (0, 1)
    for args in ((256, 0, 0), (0, 8, 0), (0, 0, 70000), (-1, 0, 0)):
        try:
            w.publish(*args)
        except (ValueError, OverflowError):
            pass
        else:
            raise AssertionError(f"accepted {args}")
    assert r.bounds() == (0, 1)


def test_pre_encoded_resource(make_ring):
    from shm import encode_resource

    w, r = make_ring(10)
    enc = encode_resource({"vcore": 1, "memory": 2})
    assert enc == b'{"memory":2,"vcore":1}'
    w.publish(2, 2, 200, "a", resource=enc)
    assert r.read_range(0, 1)[0].resource == {"memory": 2, "vcore": 1}
    for bad in (b'{"vcore":1,"memory":2}', b'{"a":1,"a":2}', b'{"a":01}', b'{"a":-0}', b'{"":1}',
                b'{"a":1', b'{"a\\u0041":1}', b"[1]", b'{"a":1,}'):
        with pytest.raises(ValueError):
            w.publish(2, 2, 200, "a", resource=bad)
    assert r.bounds() == (0, 0)


def test_timestamp_zero_means_now(make_ring):
    import time

    w, r = make_ring(4)
    t0 = time.time_ns()
    w.publish(2, 1, 203, "a")
    t1 = time.time_ns()
    assert t0 <= r.read_range(0, 1)[0].timestamp_nano <= t1


# -- interning --------------------------------------------------------------------------------------


def test_refcounts_across_many_wraps_release_everything(make_ring):
    w, r = make_ring(37)
    for i in range(3000):
        w.publish(2, 2, 200, f"app-{i % 11}", f"ref-{i % 50}" if i % 3 else str(uuid.UUID(int=i)),
                  f"message {i % 13}" * (i % 5), {"memory": i % 17, "pods": 1} if i % 4 else None)
        if i % 500 == 0:
            assert r.verify() == []
    assert r.verify() == []
    s = r.stats()
    assert s.strings_interned - s.strings_released == s.strings_used
    assert s.strings_released > 0 and s.intern_full_drops == 0
    # overwrite everything with empty events: every interned string is released
    for _ in range(37):
        w.publish(1, 0, 0)
    # a live writer pins its last objectID and resource (an empty one pins nothing); closed, none
    assert r.stats().strings_used == 2 and r.verify() == []
    w.close()
    s = r.stats()
    assert s.strings_used == 0 and s.intern_bytes_used == 0 and s.resources_used == 0
    assert r.verify() == []


def test_intern_table_full_is_counted_never_silent(make_ring):
    w, r = make_ring(100)
    strings_cap = r.stats().strings_capacity
    n = strings_cap // 3 + 60
    for i in range(n):        # all-unique strings: more than the table holds... but the ring
        w.publish(2, 2, 200, f"o{i}", f"r{i}", f"m{i}")   # only retains 100, so none are lost
    assert r.stats().intern_full_drops == 0
    assert r.verify() == []


def test_intern_overflow_marker(ring_name):
    # capacity 20000 -> 2274 entries; 3 unique strings per event fill it
    w = RingWriter.create(ring_name, 20000, 1)
    r = RingReader.attach(ring_name)
    try:
        cap = r.stats().strings_capacity
        for i in range(cap):
            w.publish(2, 2, 200, f"obj-{i}", f"ref-{i}", f"msg-{i}", timestamp_nano=1)
        s = r.stats()
        assert s.intern_full_drops > 0
        assert s.strings_used == cap
        last = r.read_range(cap - 1, 1)[0]
        assert last.object_id == "<ykshm:intern-table-full>"
        assert r.read_range(0, 1)[0].object_id == "obj-0"
        assert r.verify() == []
    finally:
        r.close()
        w.close()
        w.unlink()


def test_closed_writer_refuses(make_ring):
    w, r = make_ring(4)
    w.publish(1, 0, 0)
    w.close()
    try:
        w.publish(1, 0, 0)
    except ShmError:
        pass
    else:
        raise AssertionError("closed writer published")
    assert r.bounds() == (0, 0)
    assert not r.writer_alive()


_KEPT_PUBLISH = """
import sys
from shm import RingWriter, ShmError
w = RingWriter.create(sys.argv[1], 8, 1)
publish = w.publish            # kept, as an event sink keeps it
publish(2, 2, 200, "app", "r1", "", {"memory": 1})
w.close()
w.unlink()
for args in [(2, 2, 200, "app", "r2"), (2, 2, 200, "app", "r2", "", {"memory": 1}),
             (2, 2, 200, "new-app", "r2", "", {"memory": 2}), (2, 2, 200, "app", "r2", "msg")]:
    try:
        publish(*args)
    except ShmError as e:
        print(e)
"""


def test_publish_kept_from_before_close_raises_instead_of_crashing(ring_name):
    """The engine's sink keeps `writer.publish`; once the writer is closed (its segments
    unmapped), every path of that kept function raises ShmError instead of touching the
    unmapped memory. Run in a child so a crash is a failure, not the end of the test run."""
    out = subprocess.run([sys.executable, "-c", _KEPT_PUBLISH, ring_name], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["ring writer is closed"] * 4


def test_closed_reader_raises(ring_name):
    w = RingWriter.create(ring_name, 4, 1)
    r = RingReader.attach(ring_name)
    c = r.cursor(0)
    r.close()
    r.close()
    for call in (r.bounds, lambda: r.read_range(0, 1), lambda: r.read_range_json(0, 1),
                 lambda: r.read_recent(1), c.poll, c.poll_json, r.stats, r.verify,
                 r.writer_alive, r.instance_changed, r.heartbeat_nano):
        with pytest.raises(ShmError):
            call()
    w.close()
    w.unlink()


def test_verify_finds_corruption(make_ring):
    from shm._ringext import ffi

    w, r = make_ring(8)
    for i in range(20):
        w.publish(2, 2, 200, f"app-{i % 3}", f"ref-{i % 4}", "m", {"memory": i % 2 + 1})
    assert r.verify() == []
    view = w._view
    e = view.records[3].object_id
    view.entries[e].refcount += 1
    v = r.verify()
    assert any(f"entry {e}: refcount" in x for x in v), v
    view.entries[e].refcount -= 1
    view.records[5].seq += 2
    assert any("slot 5: seq" in x for x in r.verify())
    view.records[5].seq -= 2
    h = ffi.cast("ykr_header *", view.hdr)
    h.entry_free_count += 1
    assert any("entry_free_count" in x for x in r.verify())
    h.entry_free_count -= 1
    assert r.verify() == []
    w.close()
    rep = r.verify()
    assert rep == [] and rep.caveats == [] and rep.records == 8 and rep.strings == r.stats().strings_used


def test_list_instances_and_paths(make_ring, ring_name):
    import shm

    make_ring(4)
    assert ring_name in shm.list_instances()
    p = shm.segment_paths(ring_name)
    assert p.events == f"/dev/shm/{ring_name}.events" and p.state.endswith(".state")
    for bad in ("", "a/b", ".x", "a\0b"):
        with pytest.raises(ValueError):
            shm.segment_paths(bad)
    assert shm.ring_bytes(9_000_000, 1000) <= 450 * 2 ** 20
    with RingReader.attach(ring_name) as r:
        assert r.stats().bytes_in_use == shm.ring_bytes(4, 8)


def test_seed_mix_never_fills_the_intern_table(make_ring):
    from shm.bench_support import seed_mix

    w, r = make_ring(20000)
    for e in seed_mix(70000):
        w.publish(*e)
    s = r.stats()
    assert s.intern_full_drops == 0 and s.strings_used < s.strings_capacity // 4
    assert r.verify() == []
    assert r.read_recent(1)[0].object_id.startswith("spark-app-")


def test_heartbeat(make_ring):
    import time

    w, r = make_ring(4)
    before = r.heartbeat_nano()
    time.sleep(0.001)
    w.heartbeat()
    assert r.heartbeat_nano() > before


def test_pinned_fast_path_keeps_values_exact_and_refuses_after_close(make_ring):
    """The writer passes its current objectID/resource to C as pinned handles: a caller that
    mutates its resource dict, or switches objects, still gets exactly what it published."""
    w, r = make_ring(64)
    res = {"memory": 1, "pods": 1}
    app = "app-a"
    w.publish(2, 2, 200, app, "ref-1", "", res)
    res["memory"] = 2                      # mutated in place: must not reuse the old encoding
    w.publish(2, 2, 200, app, "ref-2", "", res)
    w.publish(2, 2, 200, "app-b", "ref-3", "", None)
    w.publish(2, 2, 200, app, "ref-4", "", {"memory": 2, "pods": 1})
    got = [(e.object_id, e.reference_id, e.resource) for e in r.read_range(0, 4)]
    assert got == [("app-a", "ref-1", {"memory": 1, "pods": 1}), ("app-a", "ref-2", {"memory": 2, "pods": 1}),
                   ("app-b", "ref-3", None), ("app-a", "ref-4", {"memory": 2, "pods": 1})]
    assert r.verify() == []
    w.close()
    with pytest.raises(ShmError, match="closed"):
        w.publish(2, 2, 200, app, "ref-5", "", {"memory": 2, "pods": 1})
    assert r.verify() == []


def test_portable_publish_writes_what_the_fast_path_writes(make_ring):
    """RingWriter.publish (explicit lengths, used where the bytes-layout probe fails) and the
    per-writer fast closure store identical events."""
    from shm import RingWriter

    w, r = make_ring(16)
    cases = [(2, 2, 200, "app-1", str(uuid.UUID(int=7)), "", {"memory": 3, "pods": 1}, 0),
             (3, 1, 304, "node-1", "", "capacity é", {"vcore": 2}, 42),
             (4, 2, 405, "root.a", "app-1", "", None, 0)]
    for args in cases:
        w.publish(*args)                 # the fast closure (this interpreter passes the probe)
        RingWriter.publish(w, *args)     # the portable method
    events = r.read_range(0, 6)
    for fast, portable in zip(events[0::2], events[1::2]):
        assert (fast.type, fast.change_type, fast.change_detail, fast.object_id, fast.reference_id,
                fast.message, fast.resource) == (
            portable.type, portable.change_type, portable.change_detail, portable.object_id,
            portable.reference_id, portable.message, portable.resource)
    assert events[3].timestamp_nano == 42 and r.verify() == []


def test_a_segment_of_the_old_layout_is_refused_by_name(ring_name):
    """A ring made by a release with layout version 1 (48-byte records): readers and a new writer
    get a RingFormatError naming both versions, never a misread record."""
    import mmap
    import os

    from shm import RingFormatError, segment_paths
    from shm._ringext import ffi, lib

    w = RingWriter.create(ring_name, 16, 1)
    w.publish(2, 2, 200, "app", str(uuid.uuid4()), resource={"memory": 1})
    w.close()
    try:
        paths = segment_paths(ring_name)
        for path in (paths.events, paths.requests):
            fd = os.open(path, os.O_RDWR)
            try:
                with mmap.mmap(fd, 4096) as mm:
                    ffi.cast("ykr_header *", ffi.from_buffer(mm)).version = 1
            finally:
                os.close(fd)
        want = f"layout version 1, this ykshm reads version {lib.YKR_LAYOUT_VERSION}"
        assert lib.YKR_LAYOUT_VERSION == 2
        with pytest.raises(RingFormatError, match=want):
            RingReader.attach(ring_name)
        with pytest.raises(RingFormatError, match=want):
            RingWriter.open_existing(ring_name)
    finally:
        w.unlink()


def test_message_and_resource_pairs_overflow_to_the_marker(ring_name):
    """An event with a message and a resource keeps both in one pair entry; when the table is
    full the message reads as the overflow marker (never another event's message) and the ring
    stays consistent."""
    w = RingWriter.create(ring_name, 20000, 1)
    r = RingReader.attach(ring_name)
    try:
        w.publish(2, 2, 200, "app", "", "first", {"memory": 1})
        first = r.read_range(0, 1)[0]
        assert (first.message, first.resource) == ("first", {"memory": 1})
        assert r.stats().pairs_used == 1
        i = 0
        while r.stats().intern_full_drops == 0:
            i += 1
            w.publish(2, 2, 200, f"obj-{i}", "", f"msg-{i}", {"memory": i})
        last = r.read_range(i, 1)[0]
        assert last.message == "<ykshm:intern-table-full>"
        assert r.read_range(0, 1)[0].message == "first"
        assert r.verify() == []
    finally:
        r.close()
        w.close()
        w.unlink()
