"""sim-cluster's plain-request path answers with h11's bytes (simcluster.h1wire), and hands
anything that is not a plain request to h11, as before."""


import h11
import pytest

from common.http1 import wire
from simcluster import h1wire

from tests.simcluster.test_simcluster import raw_exchange, start_cluster, stop_cluster


@pytest.fixture(scope="module")
def sim_cluster():
    proc, url = start_cluster()
    try:
        yield url
    finally:
        stop_cluster(proc)

HEADERS = [("content-type", "application/json"), ("server", "ykshm-sim-cluster"),
           ("cache-control", "no-cache, private"), ("content-length", "17"),
           ("warning", '299 - "unknown field \\"spec.x\\""'), ("audit-id", "a b\tc")]


def _h11(status, headers, close, chunked=False, request_headers=()):
    conn = h11.Connection(h11.SERVER)
    head = [("host", "x"), *request_headers]
    if close:
        head.append(("connection", "close"))
    conn.receive_data(b"GET / HTTP/1.1\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in head)
                      + b"\r\n")
    assert isinstance(conn.next_event(), h11.Request)
    conn.next_event()
    out = conn.send(h11.Response(status_code=status, reason=h1wire.reason(status), headers=headers))
    if chunked:
        out += conn.send(h11.Data(data=b'{"type":"ADDED"}\n')) + conn.send(h11.EndOfMessage())
    return out


@pytest.mark.parametrize("status", [200, 201, 404, 409, 422, 429, 500, 299])
@pytest.mark.parametrize("close", [False, True])
def test_heads_are_h11s(status, close):
    assert h1wire.head(status, HEADERS, close) == _h11(status, HEADERS, close)


@pytest.mark.parametrize("close", [False, True])
def test_a_chunked_stream_is_framed_as_h11_frames_it(close):
    headers = [("content-type", "application/json"), ("transfer-encoding", "chunked"),
               ("x-other", "1")]
    ours = (h1wire.head(200, headers, close, chunked=True) + wire.frame(b'{"type":"ADDED"}\n')
            + wire.LAST_CHUNK)
    assert ours == _h11(200, headers, close, chunked=True)


@pytest.mark.parametrize("name,value", [("x-evil", "a\r\nset-cookie: x"), ("x-evil", "a\nb"),
                                        ("x-evil", "nul\x00"), ("x-evil", " padded"),
                                        ("x-evil", "caf\u00e9"), ("bad name", "v")])
def test_a_header_h11_refuses_is_refused_here_too(name, value):
    """Response splitting through a header value (a warning naming a user's field) is not possible
    on the fast path either: h11 raises, and so does h1wire."""
    with pytest.raises(Exception):
        _h11(200, [(name, value)], False)
    with pytest.raises(ValueError):
        h1wire.head(200, [(name, value)], False)


def test_plain_pipelined_and_foreign_requests_on_one_connection(sim_cluster):
    """Two plain requests pipelined, then an HTTP/1.0 one (h11's from there on): three answers,
    in order, the last closing the connection as HTTP/1.0 does."""
    url = sim_cluster
    get = b"GET /api/v1/namespaces/default HTTP/1.1\r\nHost: x\r\n\r\n"
    missing = b"GET /api/v1/namespaces/nope HTTP/1.1\r\nHost: x\r\n\r\n"
    old = b"GET /version HTTP/1.0\r\n\r\n"
    out = raw_exchange(url, get + missing + old)
    assert out.count(b"HTTP/1.1 200 OK\r\n") == 2 and out.count(b"HTTP/1.1 404 Not Found\r\n") == 1
    assert out.index(b"200 OK") < out.index(b"404 Not Found") < out.rindex(b"200 OK")
    assert b'"gitVersion"' in out


def test_a_created_object_then_a_bad_head_gets_h11s_400(sim_cluster):
    body = b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-h1"},"data":{"a":"b"}}'
    post = (b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
    bad = b"GET /x HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n"
    out = raw_exchange(sim_cluster, post + bad)
    assert out.startswith(b"HTTP/1.1 201 Created\r\n") and b'"name":"cm-h1"' in out
    assert b"HTTP/1.1 400 " in out
