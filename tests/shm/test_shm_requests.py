"""The request-event store: oldest first, cleared on delivery, overflow counted."""

from __future__ import annotations

from shm import RingWriter


def test_take_clears_delivered(make_ring):
    w, r = make_ring(10, request_capacity=8)
    for i in range(3):
        w.publish_request(f"pod-{i}", "app-1", f"waiting {i}", {"memory": i}, timestamp_nano=10 + i)
    got = w.take_requests(2)
    assert [(e.id, e.object_id, e.reference_id, e.message, e.type, e.change_type, e.change_detail,
             e.timestamp_nano) for e in got] == [
        (0, "pod-0", "app-1", "waiting 0", 1, 0, 0, 10), (1, "pod-1", "app-1", "waiting 1", 1, 0, 0, 11)]
    assert got[1].resource == {"memory": 1} and got[0].resource == {"memory": 0}
    assert [e.object_id for e in w.take_requests()] == ["pod-2"]
    assert w.take_requests() == []
    w.publish_request("pod-3", "app-1", "")
    assert [e.id for e in w.take_requests()] == [3]
    st = r.stats()
    assert st.requests_written == 4 and st.requests_delivered == 4 and st.requests_overwritten == 0
    assert r.bounds() is None       # request events never enter the event ring


def test_overflow_overwrites_oldest_undelivered(make_ring):
    w, r = make_ring(10, request_capacity=4)
    for i in range(7):
        w.publish_request(f"pod-{i}", "app", "m")
    assert [e.object_id for e in w.take_requests()] == ["pod-3", "pod-4", "pod-5", "pod-6"]
    assert r.stats().requests_overwritten == 3
    # wrap over delivered (empty) slots: no overwrite counted, iteration skips them
    for i in range(7, 9):
        w.publish_request(f"pod-{i}", "app", "m")
    assert [e.object_id for e in w.take_requests(1)] == ["pod-7"]
    for i in range(9, 12):
        w.publish_request(f"pod-{i}", "app", "m")
    assert r.stats().requests_overwritten == 3
    assert [e.object_id for e in w.take_requests()] == ["pod-8", "pod-9", "pod-10", "pod-11"]


def test_long_fields_and_zero_capacity(ring_name):
    w = RingWriter.create(ring_name, 4, 0)
    try:
        w.publish_request("p", "a", "m")
        assert w.take_requests() == []
    finally:
        w.close()
        w.unlink()
    w = RingWriter.create(ring_name, 4, 2)
    try:
        w.publish_request("p" * 3000, "a" * 1024, "é" * 2000, {f"r{i}": i for i in range(40)})
        (e,) = w.take_requests()
        assert e.object_id == "p" * 1021 + "..." and e.reference_id == "a" * 1024
        assert e.message == "é" * 510 + "..." and len(e.resource) == 40
    finally:
        w.close()
        w.unlink()
