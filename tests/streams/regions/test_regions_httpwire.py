"""The direct path's HTTP/1.1 against h11 (what hypercorn uses): whatever `parse` takes, h11 reads
the same way; whatever h11 refuses, `parse` leaves to hypercorn; `response` writes h11's bytes."""

from __future__ import annotations

import h11
from hypothesis import event as note, given, settings
from hypothesis import strategies as st

from streams.regions.httpwire import (CLIENT_CLOSE, FOREIGN, INCOMPLETE, MAX_HEAD,
                                               SERVER_CLOSE, Request, parse, response)
from streams.regions.rest import Answer

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


@settings(max_examples=500)
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
    note("taken" if isinstance(ours, Request) else "h11 refuses" if theirs is None else "left")
    if isinstance(ours, Request):
        assert theirs is not None, data
        event, length, keep_alive = theirs
        assert ours.method.encode() == event.method
        assert ours.path.encode() == event.target.partition(b"?")[0]
        assert event.http_version == b"1.1"
        assert ours.length == length and ours.close == (not keep_alive)
        assert data[ours.body_start:ours.body_start + ours.length] == body[:length]
        assert all(parse(data[:i]) == INCOMPLETE for i in range(ours.body_start - 1))
    else:
        assert ours == FOREIGN, data  # a whole head is never INCOMPLETE


def test_a_plain_checkpoint_is_taken_and_a_head_without_end_waits_up_to_max_head():
    data = b"PUT /p HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nConnection: close\r\n\r\n1GET"
    assert parse(data) == Request("PUT", "/p", 1, True, len(data) - 4)
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
