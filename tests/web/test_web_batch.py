"""GET /ws/v1/events/batch against a real `ykshm web` and a real ring (RESTResponseSize 50)."""

from __future__ import annotations

import time

import httpx
import orjson
import pytest

JSON = "application/json; charset=UTF-8"


def get(web, query: str = "") -> httpx.Response:
    return httpx.get(f"{web.url}/ws/v1/events/batch{query}", timeout=10)


def ok(web, query: str = "") -> dict:
    r = get(web, query)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == JSON
    return orjson.loads(r.content)


def ids(doc: dict) -> list[int]:
    return [e["id"] for e in doc["EventRecords"]]


def assert_error(r: httpx.Response, status: int, message: str | None = None) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == JSON
    body = orjson.loads(r.content)
    assert set(body) == {"status_code", "message", "description"}
    assert body["status_code"] == status
    assert body["message"] == body["description"]
    if message is not None:
        assert body["message"] == message
    return body


def test_empty_ring(web):
    doc = ok(web)
    assert list(doc) == ["InstanceUUID", "LowestID", "HighestID", "EventRecords"]
    assert doc["InstanceUUID"] == web.ring.writer.instance_uuid
    assert (doc["LowestID"], doc["HighestID"], doc["EventRecords"]) == (0, 0, None)
    assert ok(web, "?start=0&count=5")["EventRecords"] is None


def test_events_in_order_with_design_keys(web):
    web.ring.publish(10, message="hello")
    doc = ok(web)
    assert (doc["LowestID"], doc["HighestID"]) == (0, 9)
    assert ids(doc) == list(range(10))
    first = doc["EventRecords"][0]
    assert list(first) == ["id", "type", "objectID", "message", "timestampNano", "eventChangeType",
                           "eventChangeDetail", "referenceID", "resource"]
    assert first["objectID"] == "app-0" and first["referenceID"] == "ask-0"
    assert first["resource"] == {"resources": {"memory": {"value": 1024}, "vcore": {"value": 100}}}
    assert ids(ok(web, "?start=3&count=4")) == [3, 4, 5, 6]
    assert ids(ok(web, "?start=9")) == [9]


def test_wrapped_ring_bounds_and_start_outside(web):
    web.ring.publish(250)  # capacity 100: ids 150..249 retained
    doc = ok(web)
    assert (doc["LowestID"], doc["HighestID"]) == (150, 249)
    assert ids(doc) == list(range(150, 200))  # default start = lowest, clamped at 50
    for start in (0, 149, 250, 10**6):
        d = ok(web, f"?start={start}")
        assert d["EventRecords"] is None and (d["LowestID"], d["HighestID"]) == (150, 249)
    assert ids(ok(web, "?start=249&count=10")) == [249]
    assert ids(ok(web, "?start=150&count=3")) == [150, 151, 152]
    assert ids(ok(web, "?start=230&count=50")) == list(range(230, 250))


def test_count_is_clamped_at_rest_response_size(web):
    web.ring.publish(100)
    assert len(ids(ok(web, "?count=1000"))) == 50
    assert len(ids(ok(web, f"?count={2**64 - 1}"))) == 50
    assert len(ids(ok(web, "?count=7"))) == 7
    assert len(ids(ok(web, "?count="))) == 50  # empty = not given, as in YuniKorn


@pytest.mark.parametrize(
    "query, message",
    [
        ("?count=0", '0 is not a valid value for "count"'),
        ("?count=-1", 'strconv.ParseUint: parsing "-1": invalid syntax'),
        ("?count=abc", 'strconv.ParseUint: parsing "abc": invalid syntax'),
        ("?count=1.5", 'strconv.ParseUint: parsing "1.5": invalid syntax'),
        ("?count=%2B5", 'strconv.ParseUint: parsing "+5": invalid syntax'),
        (f"?count={2**64}", f'strconv.ParseUint: parsing "{2**64}": value out of range'),
        ("?start=-5", 'strconv.ParseUint: parsing "-5": invalid syntax'),
        ("?start=x&count=3", 'strconv.ParseUint: parsing "x": invalid syntax'),
        ("?start=1e3", 'strconv.ParseUint: parsing "1e3": invalid syntax'),
    ],
)
def test_bad_count_or_start_is_400_with_yunikorn_message(web, query, message):
    assert_error(get(web, query), 400, message)


def test_instance_change_is_followed(web):
    web.ring.publish(5)
    old = ok(web)["InstanceUUID"]
    web.ring.renew(100)
    web.ring.publish(2)
    doc = ok(web)
    assert doc["InstanceUUID"] != old and doc["InstanceUUID"] == web.ring.writer.instance_uuid
    assert ids(doc) == [0, 1]


def test_tracking_disabled_is_500(tmp_path, name_factory):
    from webharness import WebServer

    cfg = tmp_path / "c.yaml"
    cfg.write_text("service:\n  event:\n    trackingEventsEnabled: false\n")
    server = WebServer(name_factory(), workers=1, config=str(cfg))
    try:
        for path in ("/ws/v1/events/batch", "/ws/v1/events/stream"):
            assert_error(httpx.get(server.url + path, timeout=5), 500, "Event tracking is disabled")
    finally:
        server.stop()


def test_removed_ring_is_503_until_a_new_one(web):
    web.ring.publish(3)
    assert ok(web)["HighestID"] == 2
    web.ring.writer.unlink()
    r = get(web)
    assert_error(r, 503)
    assert "not found" in r.json()["message"]
    web.ring.renew(100)
    time.sleep(0.3)  # a worker looks for a missing ring again at most every 0.2 s
    assert ok(web)["InstanceUUID"] == web.ring.writer.instance_uuid


def test_big_batch_is_sent_in_pieces_plain_and_gzip(tmp_path, name_factory):
    """More than BATCH_PART events go out chunked as they render; gzipped, they are one gzip
    member that inflates to the same JSON; a batch of at most BATCH_PART keeps its length."""
    import zlib

    from webharness import Ring, WebServer

    from web.events import BATCH_PART

    n = 2 * BATCH_PART + 100
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"service:\n  event:\n    RESTResponseSize: {n}\n")
    name = name_factory()
    ring = Ring(name, n)
    ring.publish(n)
    server = WebServer(name, workers=1, config=str(cfg))
    try:
        url = f"{server.url}/ws/v1/events/batch?count={n}"
        plain = httpx.get(url, headers={"accept-encoding": "identity"}, timeout=10)
        assert plain.status_code == 200 and plain.headers["content-type"] == JSON
        assert "content-length" not in plain.headers and plain.headers["transfer-encoding"] == "chunked"
        doc = orjson.loads(plain.content)
        assert (doc["LowestID"], doc["HighestID"]) == (0, n - 1)
        assert ids(doc) == list(range(n))
        with httpx.stream("GET", url, headers={"accept-encoding": "gzip"}, timeout=10) as packed:
            assert packed.headers["content-encoding"] == "gzip"
            assert packed.headers["vary"] == "Accept-Encoding"
            raw = b"".join(packed.iter_raw())
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        assert inflate.decompress(raw) == plain.content
        assert inflate.eof and inflate.unused_data == b""
        whole = httpx.get(f"{url[:-len(str(n))]}{BATCH_PART}&start=7",
                          headers={"accept-encoding": "identity"}, timeout=10)
        assert int(whole.headers["content-length"]) == len(whole.content)
        assert ids(orjson.loads(whole.content)) == list(range(7, 7 + BATCH_PART))
    finally:
        server.stop()
        ring.close()
