"""Fuzz request targets against the live server: never a 5xx, every error is the error JSON.

Targets are valid HTTP request-targets (RFC 3986 characters and %-escapes); a request line that is
not valid HTTP is refused by hypercorn's parser before it reaches the application.
"""

from __future__ import annotations

import socket

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_web_yunikorn_routes import state  # noqa: F401  (the fixture: a published snapshot)

SEGMENTS = ["ws", "v1", "events", "batch", "stream", "partition", "partitions", "default", "usage",
            "users", "user", "groups", "group", "queues", "applications", "nodes", "scheduler",
            "healthcheck", "metrics", "openapi.yaml", "alice", "", ".", "..",
            "clusters", "queue", "application", "node", "node-utilizations", "history", "apps",
            "containers", "config", "validate-conf", "fullstatedump", "debug", "root",
            "root.default", "root.team.dev", "active", "completed", "rejected", "a-run", "n5"]
UNRESERVED = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:@"
pct = st.integers(0, 255).map(lambda b: f"%{b:02X}")
token = st.lists(st.one_of(st.sampled_from(list(UNRESERVED)), pct), max_size=12).map("".join)
segment = st.one_of(st.sampled_from(SEGMENTS), token)
path = st.lists(segment, min_size=0, max_size=8).map(lambda parts: "/" + "/".join(parts))
prefixed = st.lists(st.one_of(st.sampled_from(SEGMENTS[5:]), token), max_size=4).map(
    lambda parts: "/ws/v1/" + "/".join(parts))
value = st.one_of(st.integers(-10, 2**70).map(str), token, st.sampled_from(["", "0", "1", "-0", "+1", "1e3"]))
key = st.one_of(st.sampled_from(["count", "start", "x", "status", "subtree"]), token)
query = st.lists(st.tuples(key, value), max_size=4).map(lambda kv: "&".join(f"{k}={v}" for k, v in kv))
target = st.tuples(st.one_of(path, prefixed), query).map(lambda pq: pq[0] + ("?" + pq[1] if pq[1] else ""))
method = st.sampled_from(["GET", "GET", "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"])


def request(port: int, method: str, target: str) -> tuple[int, dict[str, str], bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"{method} {target} HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n\r\n".encode("latin-1"))
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            headers[k.strip().lower().decode()] = v.strip().decode()
        if headers.get("content-type", "").startswith("application/x-ndjson"):
            return status, headers, b""  # a live stream: do not wait for its end
        if method == "HEAD":
            return status, headers, b""
        n = int(headers.get("content-length", "-1"))
        while len(body) < n:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        return status, headers, body


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method=method, target=target)
def test_fuzz_targets_never_5xx_and_errors_are_json(main_web, method, target):
    status, headers, body = request(main_web.port, method, target)
    assert status < 500 or status == 503, (method, target, status, body)
    if status >= 400:
        assert headers["content-type"] == "application/json; charset=UTF-8", (target, headers)
        if method != "HEAD":
            doc = orjson.loads(body)
            assert set(doc) == {"status_code", "message", "description"}
            assert doc["status_code"] == status
    if status == 503:
        # only a missing source or the stream limit may answer 503
        assert method == "HEAD" or b"Too many streaming" in body or b"state" in body or b"ring" in body


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method=method, target=target)
def test_fuzz_with_a_snapshot_never_5xx(state, method, target):
    """The same targets with the engine's state present: the state views never fail either."""
    status, headers, body = request(state.port, method, target)
    assert status < 500 or (status == 503 and b"Too many streaming" in body), (method, target, status, body)
    if status >= 400 and method != "HEAD":
        doc = orjson.loads(body)
        assert doc["status_code"] == status
