"""web.httpwire: what the direct stream path writes is byte for byte what h11 writes (hypercorn's
HTTP/1.1 engine), and the request heads it takes are ones h11 reads the same way."""

from __future__ import annotations

import h11
from hypothesis import given, settings
from hypothesis import strategies as st

from web.direct import HEADERS
from common.replay import DateHeader
from web.httpwire import LAST_CHUNK, frame, parse_head, response_head

DATE = b"Tue, 24 Nov 2026 22:29:49 GMT"


def _h11_server(request: bytes) -> h11.Connection:
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(request)
    assert isinstance(conn.next_event(), h11.Request)
    return conn


def _h11_head(close: bool) -> tuple[h11.Connection, bytes]:
    extra = b"Connection: close\r\n" if close else b""
    conn = _h11_server(b"GET /ws/v1/events/stream HTTP/1.1\r\nHost: x\r\n" + extra + b"\r\n")
    head = conn.send(h11.Response(status_code=200, headers=[*HEADERS, (b"date", DATE)], reason=b""))
    return conn, head


def test_response_head_is_what_h11_writes():
    for close in (False, True):
        _conn, head = _h11_head(close)
        assert response_head(HEADERS, DATE, close=close) == head


@settings(max_examples=200, deadline=None)
@given(data=st.lists(st.binary(min_size=1, max_size=5000), max_size=5))
def test_chunks_and_last_chunk_are_what_h11_writes(data):
    conn, _head = _h11_head(False)
    for piece in data:
        assert frame(piece) == conn.send(h11.Data(data=piece))
    assert LAST_CHUNK == conn.send(h11.EndOfMessage())


def test_a_chunked_body_reads_back_through_h11_as_the_same_bytes():
    pieces = [b'{"id":1}\n', b'{"id":2}\n{"id":3}\n', b'{"status_code":410}\n']
    wire = response_head(HEADERS, DATE, close=False) + b"".join(frame(p) for p in pieces) + LAST_CHUNK
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method="GET", target="/ws/v1/events/stream", headers=[("Host", "x")]))
    client.send(h11.EndOfMessage())
    client.receive_data(wire)
    body = b""
    while True:
        event = client.next_event()
        if isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            break
        elif event is h11.NEED_DATA:
            raise AssertionError("response not complete")
    assert body == b"".join(pieces)


def test_a_plain_get_is_parsed():
    head = parse_head(b"GET /ws/v1/events/stream?count=5&start=3 HTTP/1.1\r\nHost: a\r\n"
                      b"Accept: */*\r\nConnection: keep-alive, Close")
    assert head is not None
    assert (head.method, head.path, head.query, head.close) == (
        b"GET", b"/ws/v1/events/stream", b"count=5&start=3", True)
    assert (b"accept", b"*/*") in head.headers
    assert parse_head(b"GET /x HTTP/1.1\r\nHost: a\r\nContent-Length: 0").close is False


def test_what_is_not_plain_is_left_to_hypercorn():
    refused = [
        b"GET /x HTTP/1.0\r\nHost: a",  # no chunked coding in HTTP/1.0
        b"GET /x HTTP/1.1",  # no Host: h11's 400
        b"GET /x HTTP/1.1\r\nHost: a\r\nHost: b",
        b"GET /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5",  # a body
        b"GET /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked",
        b"GET /x HTTP/1.1\r\nHost: a\r\nUpgrade: websocket",
        b"GET /x HTTP/1.1\r\nHost: a\r\nExpect: 100-continue",
        b"GET /x HTTP/1.1\r\nHost: a\r\n folded",  # obsolete line folding
        b"GET /x HTTP/1.1\r\nHost: a\r\nBad Name: v",
        b"GET x HTTP/1.1\r\nHost: a",
        b"GET  /x HTTP/1.1\r\nHost: a",
        b"G(T /x HTTP/1.1\r\nHost: a",
    ]
    for head in refused:
        assert parse_head(head) is None, head


LINE = st.one_of(
    st.sampled_from([b"Host: a", b"host:b", b"Connection: close", b"Content-Length: 0", b"X-A: 1",
                     b"Content-Length: 3", b" folded", b"A B: c", b"Host:", b"x:\x01"]),
    st.binary(max_size=20),
)


@settings(max_examples=500, deadline=None)
@given(method=st.sampled_from([b"GET", b"POST", b"G(T", b""]),
       target=st.sampled_from([b"/ws/v1/events/stream", b"/a?b=c d", b"/a?count=1", b"*", b"/\x7f"]),
       version=st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2"]),
       lines=st.lists(LINE, max_size=5))
def test_every_head_we_take_h11_reads_the_same_way(method, target, version, lines):
    raw = b"\r\n".join([method + b" " + target + b" " + version, *lines])
    head = parse_head(raw)
    if head is None:
        return
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(raw + b"\r\n\r\n")
    event = conn.next_event()
    assert isinstance(event, h11.Request)
    assert (event.method, event.target) == (head.method, head.path + (b"?" + head.query if head.query else b""))
    assert conn.next_event() == h11.EndOfMessage()  # no body
    conn.send(h11.Response(status_code=200, headers=[(b"content-length", b"0")]))
    conn.send(h11.EndOfMessage())
    assert (conn.our_state is h11.MUST_CLOSE) == head.close  # the same keep-alive decision


def test_date_header_is_an_http_date():
    value = DateHeader().value()
    assert value.endswith(b" GMT") and len(value) == 29
