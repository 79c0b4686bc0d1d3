"""sim-cluster's plain-request HTTP path (no h11) as an attacker sees it: no response splitting
through a header that carries a user's input, and a lying Content-Length cannot smuggle a second
request into the first one's body."""


import orjson
import pytest

from tests.simcluster.test_simcluster import raw_exchange, start_cluster, stop_cluster


@pytest.fixture(scope="module")
def sim():
    proc, url = start_cluster()
    try:
        yield url
    finally:
        stop_cluster(proc)


def _post(path: str, body: bytes, length: int | None = None) -> bytes:
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % (path.encode(), len(body) if length is None else length)
            + body)


def test_a_field_name_with_crlf_cannot_add_a_response_header(sim):
    """fieldValidation=Warn names unknown fields in a Warning header: a field name carrying CRLF
    would write a header of the attacker's; the connection is closed instead (as h11 refuses)."""
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm-split"},
          "data": {"a": "b"}, "x\r\nX-Injected: yes\r\n\r\nHTTP/1.1 200 OK": 1}
    out = raw_exchange(sim, _post("/api/v1/namespaces/default/configmaps?fieldValidation=Warn",
                               orjson.dumps(cm)))
    assert b"\r\nX-Injected" not in out and b"\nX-Injected" not in out


def test_a_body_shorter_than_its_content_length_swallows_what_follows(sim):
    """The bytes after a request's head belong to its body up to Content-Length: a request hidden
    there is never served as a request of its own."""
    hidden = b"DELETE /api/v1/namespaces/default HTTP/1.1\r\nHost: x\r\n\r\n"
    body = b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-smuggle"}}'
    out = raw_exchange(sim, _post("/api/v1/namespaces/default/configmaps", body,
                               length=len(body) + len(hidden)) + hidden)
    assert out.count(b"HTTP/1.1 ") == 1 and out.startswith(b"HTTP/1.1 400 ")
    alive = raw_exchange(sim, b"GET /api/v1/namespaces/default HTTP/1.1\r\nHost: x\r\n"
                           b"Connection: close\r\n\r\n")
    assert alive.startswith(b"HTTP/1.1 200 OK") and b'"phase":"Active"' in alive
