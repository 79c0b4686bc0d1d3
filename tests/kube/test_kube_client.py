"""The list/watch client against a scripted API server (httpx.MockTransport), and kubeconfig."""

from __future__ import annotations

import base64
import functools
import math

import httpx
import orjson
import pytest
import trio

from kube import client as kubeclient
from kube.client import GoneError, Informer
from kube.config import KubeConfig
from kube.errors import ApiStatusError, KubeConfigError
from kube.kubeconfig import load_kubeconfig


def pod(name, rv):
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)}}


class FakeApi:
    """Serves a list (paged by 2) and a queue of scripted watch answers."""

    def __init__(self, items, rv):
        self.items, self.rv = items, rv
        self.watches: list = []        # each: (status, [event dicts]) or an Exception
        self.requests: list[httpx.Request] = []
        self.expire_continue_once = False

    async def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        params = request.url.params
        if params.get("watch"):
            if not self.watches:
                await trio.sleep_forever()  # a quiet watch
            answer = self.watches.pop(0)
            if isinstance(answer, Exception):
                raise answer
            status, events = answer
            if status != 200:
                return httpx.Response(status, json={"kind": "Status", "code": status,
                                                    "reason": "Expired", "message": "too old"})
            body = b"".join(orjson.dumps(e) + b"\n" for e in events)
            return httpx.Response(200, content=body)
        start = int(params.get("continue") or 0)
        if start and self.expire_continue_once:
            self.expire_continue_once = False
            return httpx.Response(410, json={"kind": "Status", "code": 410, "reason": "Expired"})
        limit = int(params.get("limit"))
        page = self.items[start:start + limit]
        meta = {"resourceVersion": str(self.rv)}
        if start + limit < len(self.items):
            meta["continue"] = str(start + limit)
        return httpx.Response(200, json={"kind": "PodList", "metadata": meta, "items": page})


async def collect(api: FakeApi, until, *, page=2):
    sleeps: list[float] = []

    async def fake_sleep(d):
        sleeps.append(d)
        await trio.sleep(0)

    client = httpx.AsyncClient(transport=httpx.MockTransport(api.handler),
                               base_url="http://api")
    inf = Informer(client, "/api/v1/pods", "pods", page=page, timeout_seconds=5,
                   sleep=fake_sleep)
    send, recv = trio.open_memory_channel(math.inf)
    got: list = []
    async with client:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(inf.run, send)
            with trio.fail_after(5):
                async for item in recv:
                    got.append(item)
                    if until(got, inf):
                        break
            nursery.cancel_scope.cancel()
    return got, inf, sleeps


def flat(got):
    return [(t, o["metadata"]["name"]) for kind, events in got if events for t, o in events]


async def test_paged_list_then_watch_resumes_from_bookmark():
    api = FakeApi([pod(f"p{i}", i) for i in range(5)], 5)
    api.watches = [
        (200, [{"type": "ADDED", "object": pod("p5", 6)},
               {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}]),
        (200, [{"type": "DELETED", "object": pod("p0", 10)}]),
    ]
    got, inf, _ = await collect(api, lambda g, i: len(flat(g)) >= 7)
    assert got[1] == ("pods", None)                      # synced after the first list
    assert flat(got) == [("ADDED", f"p{i}") for i in range(5)] + [("ADDED", "p5"),
                                                                 ("DELETED", "p0")]
    lists = [r for r in api.requests if not r.url.params.get("watch")]
    assert [r.url.params.get("continue", "") for r in lists] == ["", "2", "4"]
    watches = [r.url.params for r in api.requests if r.url.params.get("watch")]
    assert watches[0]["resourceVersion"] == "5" and watches[0]["allowWatchBookmarks"] == "true"
    assert watches[0]["timeoutSeconds"] == "5"
    assert watches[1]["resourceVersion"] == "9"          # the bookmark moved the resume point
    assert inf.relists == 1


@pytest.mark.parametrize("expiry", ["event", "http"])
async def test_410_relists_and_diffs_cache(expiry):
    api = FakeApi([pod("a", 1), pod("b", 2), pod("c", 3)], 3)
    gone = (200, [{"type": "ERROR", "object": {"kind": "Status", "code": 410,
                                               "reason": "Expired", "message": "too old"}}]) \
        if expiry == "event" else (410, [])

    api.watches = [gone]
    original_handler = api.handler

    async def handler(request):
        # after the expiry the server's state has moved on: b changed, c gone, d new
        if api.requests and not api.watches and not request.url.params.get("watch"):
            api.items, api.rv = [pod("a", 1), pod("b", 7), pod("d", 8)], 8
        return await original_handler(request)

    api.handler = handler  # type: ignore[method-assign]
    got, inf, sleeps = await collect(api, lambda g, i: i.relists >= 2 and len(flat(g)) >= 6)
    assert flat(got)[3:] == [("MODIFIED", "b"), ("ADDED", "d"), ("DELETED", "c")]
    assert inf.expired == 1 and sleeps == []             # a relist needs no backoff
    assert sorted(inf.store.items) == ["ns/a", "ns/b", "ns/d"]


async def test_a_label_selector_in_the_path_reaches_list_and_watch():
    """httpx drops a URL's own query when given params: the informer of one job's objects would
    list and watch every job's (the cr-operator took another job's region as its own)."""
    api = FakeApi([pod("a", 1)], 5)
    client = httpx.AsyncClient(transport=httpx.MockTransport(api.handler), base_url="http://api")
    inf = Informer(client, "/api/v1/pods?labelSelector=streams.ibm.com%2Fjob%3Dcrf", "pods")
    send, _recv = trio.open_memory_channel(math.inf)
    async with client:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(inf.run, send)
            with trio.fail_after(5):
                while len(api.requests) < 2:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    listed, watched = api.requests[:2]
    assert listed.url.params["labelSelector"] == "streams.ibm.com/job=crf" and listed.url.params["limit"]
    assert watched.url.params["labelSelector"] == "streams.ibm.com/job=crf" and watched.url.params["watch"] == "1"
    assert listed.url.path == watched.url.path == "/api/v1/pods"


async def test_errors_back_off_doubling():
    api = FakeApi([pod("a", 1)], 1)
    api.watches = [httpx.ConnectError("refused")] * 4 + [
        (200, [{"type": "ADDED", "object": pod("z", 2)}])]
    got, inf, sleeps = await collect(api, lambda g, i: ("ADDED", "z") in flat(g))
    assert len(sleeps) == 4
    for got_delay, want in zip(sleeps, [0.8, 1.6, 3.2, 6.4]):
        assert want * 0.9 <= got_delay <= want * 1.1
    assert kubeclient.backoff_delays() == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0]


async def test_expired_continue_token_restarts_list():
    api = FakeApi([pod(f"p{i}", i) for i in range(5)], 5)
    api.expire_continue_once = True
    got, inf, _ = await collect(api, lambda g, i: len(flat(g)) >= 5)
    assert sorted(n for _, n in flat(got)) == [f"p{i}" for i in range(5)]


async def test_bind_maps_statuses(nursery):
    def answer(code: int, reason: str) -> bytes:
        body = orjson.dumps({"kind": "Status", "code": code, "reason": reason})
        return b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s" % (code, len(body), body)

    answers = [answer(201, "X"), answer(409, "Conflict"), answer(404, "NotFound")]
    seen: list = []
    listeners = await nursery.start(functools.partial(
        trio.serve_tcp, lambda s: _serve_http(answers, seen, s), 0, host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]
    conn = kubeclient.RawConnection(KubeConfig(server=f"http://127.0.0.1:{port}"))
    try:
        await kubeclient.bind_raw(conn, "ns", "ok", "u", "n1")
        with pytest.raises(ApiStatusError) as info:
            await kubeclient.bind_raw(conn, "ns", "taken", "u", "n1")
        assert info.value.code == 409 and not isinstance(info.value, GoneError)
        with pytest.raises(ApiStatusError) as info:
            await kubeclient.bind_raw(conn, "ns", "gone", "u", "n1")
        assert info.value.code == 404
    finally:
        await conn.aclose()
    assert [head.split(b" ")[1] for head, _ in seen] == [
        f"/api/v1/namespaces/ns/pods/{name}/binding".encode() for name in ("ok", "taken", "gone")]
    for _, body in seen:
        assert orjson.loads(body)["target"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}


def test_event_object_shape():
    ev = kubeclient.event_object("Pod", "ns", "p1", "uid-1", "InvalidPod", "bad", "Warning")
    assert ev["involvedObject"] == {"kind": "Pod", "name": "p1", "apiVersion": "v1",
                                    "namespace": "ns", "uid": "uid-1"}
    assert ev["metadata"]["namespace"] == "ns" and ev["metadata"]["name"].startswith("p1.")
    assert (ev["reason"], ev["message"], ev["type"]) == ("InvalidPod", "bad", "Warning")


def test_kubeconfig(tmp_path):
    token_file = tmp_path / "tok"
    token_file.write_text("from-file\n")
    cfg = tmp_path / "config"
    cfg.write_text(f"""
apiVersion: v1
kind: Config
current-context: b
contexts:
- name: a
  context: {{cluster: c1, user: u1}}
- name: b
  context: {{cluster: c2, user: u2}}
clusters:
- name: c1
  cluster: {{server: "http://127.0.0.1:1"}}
- name: c2
  cluster: {{server: "https://10.0.0.1:6443", insecure-skip-tls-verify: true}}
users:
- name: u1
  user: {{token: abc}}
- name: u2
  user: {{tokenFile: {token_file}}}
""")
    kc = load_kubeconfig(str(cfg))
    assert kc.server == "https://10.0.0.1:6443" and kc.token == "from-file" and kc.verify is False
    kc = load_kubeconfig(str(cfg), "a")
    assert kc.server == "http://127.0.0.1:1" and kc.token == "abc"
    with pytest.raises(KubeConfigError, match="no context named 'zz'"):
        load_kubeconfig(str(cfg), "zz")
    with pytest.raises(KubeConfigError, match="No such file"):
        load_kubeconfig(str(tmp_path / "missing"))
    bad = tmp_path / "bad"
    bad.write_text("clusters:\n- name: c\n  cluster: {server: 'https://10.0.0.1:6443', "
                   "certificate-authority-data: '!!'}\n")
    with pytest.raises(KubeConfigError, match="certificate-authority-data is not base64"):
        load_kubeconfig(str(bad))


async def _serve_http(answers, seen, stream):
    """A tiny HTTP server: for each request, reply with the next raw answer (None = close)."""
    buf = b""
    async with stream:
        while answers:
            while b"\r\n\r\n" not in buf:
                data = await stream.receive_some(65536)
                if not data:
                    return
                buf += data
            head, _, buf = buf.partition(b"\r\n\r\n")
            length = int([ln.split(b":")[1] for ln in head.split(b"\r\n")
                          if ln.lower().startswith(b"content-length")][0])
            while len(buf) < length:
                buf += await stream.receive_some(65536)
            seen.append((head, buf[:length]))
            buf = buf[length:]
            answer = answers.pop(0)
            if answer is None:
                return
            await stream.send_all(answer)


async def test_raw_connection_bodies_statuses_and_reconnect(nursery):
    answers = [
        b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 409 Conflict\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"10\r\n{\"code\":409,\"rea\r\n10\r\nson\":\"Conflict\"}\r\n0\r\n\r\n",
        None,                                   # the server drops the connection
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 13\r\n\r\n{\"code\": 404}",
    ]
    seen: list = []
    listeners = await nursery.start(functools.partial(
        trio.serve_tcp, lambda s: _serve_http(answers, seen, s), 0, host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]
    conn = kubeclient.RawConnection(KubeConfig(server=f"http://127.0.0.1:{port}",
                                                          token="tok"))
    try:
        await kubeclient.bind_raw(conn, "ns", "p1", "u1", "n1")
        head, body = seen[0]
        assert head.startswith(b"POST /api/v1/namespaces/ns/pods/p1/binding HTTP/1.1")
        assert b"Authorization: Bearer tok" in head
        assert orjson.loads(body)["target"]["name"] == "n1"
        with pytest.raises(ApiStatusError) as info:
            await kubeclient.bind_raw(conn, "ns", "p2", "u2", "n1")
        assert info.value.code == 409 and info.value.reason == "Conflict"
        with pytest.raises(httpx.TransportError):
            await kubeclient.bind_raw(conn, "ns", "p3", "u3", "n1")   # closed mid-request
        with pytest.raises(ApiStatusError) as info:          # reconnects
            await kubeclient.bind_raw(conn, "ns", "p4", "u4", "n1")
        assert info.value.code == 404
        assert len(seen) == 4
    finally:
        await conn.aclose()


def _self_signed(tmp_path, name):
    import subprocess

    key, cert = tmp_path / f"{name}.key", tmp_path / f"{name}.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return key, cert


async def test_kubeconfig_tls_ca_and_client_certificate(tmp_path, nursery):
    import ssl

    server_key, server_cert = _self_signed(tmp_path, "server")
    client_key, client_cert = _self_signed(tmp_path, "client")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(server_cert, server_key)
    server_ctx.verify_mode = ssl.CERT_REQUIRED          # the client must present its cert
    server_ctx.load_verify_locations(client_cert)
    answers = [b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}"]
    seen: list = []
    listeners = await nursery.start(functools.partial(
        trio.serve_ssl_over_tcp, lambda s: _serve_http(answers, seen, s), 0, server_ctx,
        host="127.0.0.1"))
    port = listeners[0].transport_listener.socket.getsockname()[1]
    b64 = lambda p: base64.b64encode(p.read_bytes()).decode()  # noqa: E731
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(f"""
current-context: tls
contexts: [{{name: tls, context: {{cluster: c, user: u}}}}]
clusters: [{{name: c, cluster: {{server: "https://127.0.0.1:{port}",
            certificate-authority-data: "{b64(server_cert)}"}}}}]
users: [{{name: u, user: {{client-certificate: "{client_cert}",
          client-key-data: "{b64(client_key)}"}}}}]
""")
    kc = load_kubeconfig(str(cfg))
    assert isinstance(kc.verify, ssl.SSLContext)
    conn = kubeclient.RawConnection(kc)
    try:
        await kubeclient.bind_raw(conn, "ns", "p1", "u1", "n1")
    finally:
        await conn.aclose()
    assert seen and seen[0][0].startswith(b"POST /api/v1/namespaces/ns/pods/p1/binding")
