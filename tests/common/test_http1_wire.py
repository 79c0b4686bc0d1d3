"""The direct paths' HTTP/1.1 (common.http1) against h11 (what hypercorn uses): whatever `parse`
takes, h11 reads the same way; whatever h11 refuses, `parse` leaves to hypercorn; `response`,
`response_head` and `frame` write h11's bytes — for the cr-operator's answers and the web's
event streams alike."""

from __future__ import annotations

import h11
from hypothesis import event as note, given, settings
from hypothesis import strategies as st
from fuzzbudget import examples

from common.http1.head import FOREIGN, INCOMPLETE, MAX_HEAD, Head, parse
from common.http1.wire import (CLIENT_CLOSE, LAST_CHUNK, SERVER_CLOSE, DateHeader, frame,
                               response, response_head)
from streams.regions.rest import Answer
from web.direct import HEADERS as STREAM_HEADERS

DATE = b"Tue, 24 Nov 2026 22:29:49 GMT"

def mostly(good: list[bytes], odd: list[bytes]):
    """Mostly plain values (so that `parse` takes a fair share of requests), sometimes odd ones."""
    return st.integers(0, 9).flatmap(
        lambda i: st.sampled_from(good) if i < 8 else st.sampled_from(odd))


METHODS = mostly([b"GET", b"PUT"], [b"put", b"HEAD", b"POST", b"G T", b""])
TARGETS = mostly([b"/api/consistentregion/pe/1", b"/api/consistentregion/region/0/pe/2/checkpoint",
                  b"/a?b=c", b"/"],
                 [b"/a?b=c%20", b"/%41", b"*", b"http://x/y", b"/a b", b"/\x7f", b"/\xc3\xa9",
                  b"/#frag", b""])
VERSIONS = mostly([b"HTTP/1.1"], [b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.1 ", b"http/1.1"])
HEADERS = st.lists(st.one_of(
    st.tuples(st.sampled_from([b"Content-Length", b"content-length"]),
              mostly([b"0", b"3", b"05"], [b"-1", b"1 1", b"99999999999999999999", b"t", b""])),
    st.tuples(mostly([b"Connection", b"X-A", b"HOST", b"Expect"],
                     [b"Transfer-Encoding", b"Upgrade", b"Bad Name", b"", b" Host", b"Host "]),
              mostly([b"t", b"", b"close", b"Keep-Alive, CLOSE", b"keep-alive", b" x ", b"\tx\t",
                      b"a  b", b"100-continue"],
                     [b"chunked", b"a\x01", b"\xc3\xa9", b"a\rb"]))), max_size=3)
ENDS = mostly([b"\r\n"], [b"\n"])


def h11_read(data: bytes):
    """h11's reading of a request: (Request, body length, keep-alive), or None if it refuses or
    wants more."""
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(data)
    try:
        event = conn.next_event()
        if not isinstance(event, h11.Request):
            return None
        length = 0
        while True:
            more = conn.next_event()
            if isinstance(more, h11.Data):
                length += len(more.data)
            elif isinstance(more, h11.EndOfMessage):
                break
            else:
                return None
    except h11.RemoteProtocolError:
        return None
    out = conn.send(h11.Response(status_code=204, headers=[]))
    return event, length, b"Connection: close" not in out


@settings(max_examples=examples(500, 200))
@given(method=METHODS, target=TARGETS, version=VERSIONS, headers=HEADERS, end=ENDS,
       host_first=st.sampled_from([True, True, True, False]), body=st.binary(min_size=8, max_size=8))
def test_what_parse_takes_h11_reads_the_same_and_what_h11_refuses_parse_leaves(
        method, target, version, headers, end, host_first, body):
    lines = [b"%s %s %s" % (method, target, version)]
    if host_first:
        lines.append(b"Host: t")
    lines += [b"%s: %s" % header for header in headers]
    data = end.join(lines) + end + end + body
    ours = parse(data)
    theirs = h11_read(data)
    note("taken" if isinstance(ours, Head) else "h11 refuses" if theirs is None else "left")
    if isinstance(ours, Head):
        assert theirs is not None, data
        event, length, keep_alive = theirs
        assert ours.method.encode() == event.method
        assert ours.path.encode() == event.target.partition(b"?")[0]
        assert ours.query == event.target.partition(b"?")[2]
        assert [(n, v) for n, v in ours.headers] == [(n, v) for n, v in event.headers]
        assert event.http_version == b"1.1"
        assert ours.length == length and ours.close == (not keep_alive)
        assert data[ours.body_start:ours.body_start + ours.length] == body[:length]
        assert all(parse(data[:i]) == INCOMPLETE for i in range(ours.body_start - 1))
    else:
        assert ours == FOREIGN, data  # a whole head is never INCOMPLETE


def test_a_plain_checkpoint_is_taken_and_a_head_without_end_waits_up_to_max_head():
    data = b"PUT /p HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nConnection: close\r\n\r\n1GET"
    assert parse(data) == Head("PUT", "/p", b"", ((b"host", b"t"), (b"content-length", b"1"),
                                                 (b"connection", b"close")), 1, True, len(data) - 4)
    assert parse(b"GET /p HTTP/1.1\r\nX: " + b"a" * (MAX_HEAD - 20)) == INCOMPLETE
    assert parse(b"GET /p HTTP/1.1\r\nX: " + b"a" * MAX_HEAD) == FOREIGN


ANSWERS = st.builds(Answer, st.sampled_from([200, 204, 400, 404, 405, 409, 413, 500]),
                    st.binary(max_size=30), st.sampled_from([b"application/json", b"text/plain"]),
                    st.sampled_from([(), ((b"allow", b"PUT"),)]))


@given(answer=ANSWERS, client_close=st.booleans(), max_reached=st.booleans())
def test_response_is_what_h11_writes_for_hypercorn(answer, client_close, max_reached):
    date = b"Tue, 24 Nov 2026 22:51:09 GMT"
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(b"GET / HTTP/1.1\r\nHost: t\r\n%s\r\n"
                      % (b"Connection: close\r\n" if client_close else b""))
    conn.next_event()
    conn.next_event()
    headers = [*answer.response_headers(), (b"date", date)]  # hypercorn: the app's, then its own
    if max_reached:
        headers.append((b"connection", b"close"))
    body = b"" if answer.status == 204 else answer.body
    expected = conn.send(h11.Response(status_code=answer.status, headers=headers))
    expected += conn.send(h11.Data(data=body)) if body else b""
    expected += conn.send(h11.EndOfMessage())
    close = CLIENT_CLOSE if client_close else SERVER_CLOSE if max_reached else b""
    assert response(answer.status, answer.response_headers(), body, date, close) == expected


# -- the web's event streams: a chunked 200 -------------------------------------------------------

def _h11_stream_head(close: bool) -> tuple[h11.Connection, bytes]:
    conn = h11.Connection(h11.SERVER)
    extra = b"Connection: close\r\n" if close else b""
    conn.receive_data(b"GET /ws/v1/events/stream HTTP/1.1\r\nHost: x\r\n" + extra + b"\r\n")
    assert isinstance(conn.next_event(), h11.Request)
    head = conn.send(h11.Response(status_code=200, headers=[*STREAM_HEADERS, (b"date", DATE)],
                                  reason=b""))
    return conn, head


def test_a_stream_response_head_is_what_h11_writes():
    for close in (False, True):
        _conn, head = _h11_stream_head(close)
        ours = response_head(200, STREAM_HEADERS, DATE, CLIENT_CLOSE if close else b"", chunked=True)
        assert ours == head


@settings(max_examples=200, deadline=None)
@given(data=st.lists(st.binary(min_size=1, max_size=5000), max_size=5))
def test_chunks_and_last_chunk_are_what_h11_writes(data):
    conn, _head = _h11_stream_head(False)
    for piece in data:
        assert frame(piece) == conn.send(h11.Data(data=piece))
    assert LAST_CHUNK == conn.send(h11.EndOfMessage())


def test_a_chunked_body_reads_back_through_h11_as_the_same_bytes():
    pieces = [b'{"id":1}\n', b'{"id":2}\n{"id":3}\n', b'{"status_code":410}\n']
    wire = (response_head(200, STREAM_HEADERS, DATE, chunked=True)
            + b"".join(frame(p) for p in pieces) + LAST_CHUNK)
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


def test_a_plain_stream_get_is_parsed_with_its_query_and_headers():
    data = (b"GET /ws/v1/events/stream?count=5&start=3 HTTP/1.1\r\nHost: a\r\n"
            b"Accept: */*\r\nConnection: keep-alive, Close\r\n\r\n")
    head = parse(data)
    assert isinstance(head, Head)
    assert (head.method, head.path, head.query, head.close, head.length) == (
        "GET", "/ws/v1/events/stream", b"count=5&start=3", True, 0)
    assert (b"accept", b"*/*") in head.headers and head.body_start == len(data)


def test_what_is_not_plain_is_left_to_hypercorn():
    refused = [
        b"GET /x HTTP/1.0\r\nHost: a",  # no chunked coding in HTTP/1.0
        b"GET /x HTTP/1.1",  # no Host: h11's 400
        b"GET /x HTTP/1.1\r\nHost: a\r\nHost: b",
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
        assert parse(head + b"\r\n\r\n") == FOREIGN, head


def test_a_bare_lf_head_is_left_to_hypercorn_at_once():
    """h11 ends a head at a bare LF too: it is not waited for as incomplete (the web once waited
    its whole keep-alive timeout for one)."""
    assert parse(b"GET /ws/v1/events/stream HTTP/1.1\nHost: t\n\n") == FOREIGN


def test_date_header_is_an_http_date():
    value = DateHeader().value()
    assert value.endswith(b" GMT") and len(value) == 29
