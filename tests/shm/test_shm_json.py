"""The C renderer and Event.to_json() agree byte for byte, for arbitrary unicode."""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shm import Event, RingReader, RingWriter
from shm.reader import JsonPieces
from shm.events import cut_message

text = st.text(st.characters(exclude_categories=("Cs",)), max_size=60)
long_text = st.one_of(text, st.text(st.characters(exclude_categories=("Cs",)), min_size=300,
                                     max_size=700))
res_names = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=12)
resources = st.one_of(st.none(), st.dictionaries(res_names, st.integers(-2 ** 63, 2 ** 63 - 1),
                                                 max_size=5))
events = st.builds(
    dict,
    type=st.integers(0, 255),
    change_type=st.integers(0, 3),
    change_detail=st.integers(0, 65535),
    object_id=text,
    reference_id=st.one_of(text, st.uuids().map(str)),
    message=long_text,
    resource=resources,
    timestamp_nano=st.integers(-2 ** 63, 2 ** 63 - 1),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(events, min_size=1, max_size=12))
def test_c_json_equals_python_to_json(ring_name, batch):
    w = RingWriter.create(ring_name, 7, 1)
    r = RingReader.attach(ring_name)
    try:
        for d in batch:
            w.publish(**d)
        lo, hi = r.bounds()
        data, n = r.read_range_json(lo, 100)
        read = r.read_range(lo, 100)
        assert n == len(read) == hi - lo + 1
        assert data == b"[" + b",".join(e.to_json() for e in read) + b"]"
        for i, e in zip(range(lo, hi + 1), read):
            d = batch[len(batch) - (hi + 1 - i)]
            ts = d["timestamp_nano"] or e.timestamp_nano    # 0 = "now", filled in by the ring
            want = Event(id=i, type=d["type"], change_type=d["change_type"],
                         change_detail=d["change_detail"], timestamp_nano=ts,
                         object_id=cut_message(d["object_id"]),
                         reference_id=cut_message(d["reference_id"]),
                         message=cut_message(d["message"]), resource=d["resource"] or None)
            assert e == want
            assert e.to_json() == want.to_json()
            assert Event.from_json_obj(orjson.loads(e.to_json())) == e
        c = r.cursor(lo)
        lines = c.poll_json(100).lines
        assert lines == b"".join(e.to_json() + b"\n" for e in read)
    finally:
        r.close()
        w.close()
        w.unlink()


def test_escaping_of_control_characters(make_ring):
    w, r = make_ring(4)
    s = "".join(chr(i) for i in range(0x20)) + "\"\\/\x7f\u2028é😀"
    w.publish(2, 0, 0, s, s, s, timestamp_nano=1)
    data, _ = r.read_range_json(0, 1)
    assert b"\\u0000" in data and b"\\n" in data and b"\\b" in data and b"\\u001f" in data
    assert orjson.loads(data)[0]["objectID"] == s
    assert data == b"[" + r.read_range(0, 1)[0].to_json() + b"]"


def test_from_json_obj_names_bad_field():
    import pytest

    with pytest.raises(ValueError, match="objectID"):
        Event.from_json_obj({"objectID": 5})
    with pytest.raises(ValueError, match="timestampNano"):
        Event.from_json_obj({"timestampNano": "x"})
    with pytest.raises(ValueError, match="resource"):
        Event.from_json_obj({"resource": {"resources": {"m": {"value": 1.5}}}})
    e = Event.from_json_obj({"id": 3, "type": 2, "resource": {"resources": {"m": {"value": 1}}}})
    assert e.id == 3 and e.resource == {"m": 1}
    assert Event.from_json_obj({"id": 3}, id=9).id == 9


def _publish(w, ids):
    for i in ids:
        w.publish(2, 2, 201, object_id=f"app-{i}", reference_id=f"ask-{i}", resource={"vcore": i})


def test_json_parts_join_to_the_whole_array(make_ring):
    w, r = make_ring(64)
    _publish(w, range(50))
    whole, n = r.read_range_json(3, 40)
    pieces = JsonPieces()
    parts = list(r.read_range_json_parts(3, 40, 16, b'{"E":', b"}", pieces))
    assert len(parts) == 3 and n == pieces.count == 40 and pieces.done
    assert b"".join(parts) == b'{"E":' + whole + b"}"
    assert [e["id"] for e in orjson.loads(whole)] == list(range(3, 43))
    assert list(r.read_range_json_parts(50, 5, 16, b"<", b">")) == [b"<null>"]


def test_json_parts_skip_events_overwritten_while_the_answer_is_sent(make_ring):
    """The ring laps between two pieces: the answer stays one valid array, in id order, without
    the lost events (as a single render skips them)."""
    w, r = make_ring(32)
    _publish(w, range(32))
    parts = r.read_range_json_parts(0, 32, 8)
    first = next(parts)
    _publish(w, range(32, 44))
    lowest, _ = r.bounds()
    got = [e["id"] for e in orjson.loads(first + b"".join(parts))]
    assert lowest > 8 and got == list(range(8)) + list(range(lowest, 32))
