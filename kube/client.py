"""A small Kubernetes API client on httpx.AsyncClient (under trio): list/watch, bind, events.

Why not a client from PyPI: they mishandle watch expiry (410 Gone). This one is the client-go
reflector, reduced to what the shim needs:

- `typed_items(list)`: a list's items with their kind and apiVersion (kube-apiserver leaves a
  built-in kind's out);
- `list_all(path)`: a paged list (`limit` / `continue`); an expired continue token (410) restarts
  the list from the beginning.
- `Informer.run(out)`: list, then watch from the list's resourceVersion with
  `allowWatchBookmarks=true` and `timeoutSeconds`; every event (BOOKMARKs included) moves the
  resume point; a watch that ends normally resumes from it without a relist. A 410 — as an HTTP
  status or as a watch `ERROR` event carrying a `Status` with code 410 — relists and diffs the
  local cache (`kube.store.Store.replace`), so objects that vanished meanwhile come out as
  DELETED and changed ones as MODIFIED. Any other error: back off 0.8 s, doubling to 30 s, reset
  after a watch that delivered something.
- `bind_raw` and `post_raw` (bindings and events over a `RawConnection`), `delete_pod`,
  `create_pod`.

Connection settings (server, TLS, credentials) are a `kube.config.KubeConfig`; where they come
from is `kube.source`. A 401 is answered by the credentials (kube.credentials): re-read once, then
`CredentialsError`, which no retry loop here catches, so the role ends with the reason. Errors are
kube.errors'.
"""

from __future__ import annotations

import datetime as dt
import logging
import urllib.parse
import uuid
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import httpx
import orjson
import trio

from common.backoff import Backoff

from .config import USER_AGENT, KubeConfig
from .credentials import refused
from .errors import ApiStatusError, GoneError, status_error
from .store import Obj, Store, whole

log = logging.getLogger("ykshm.shim.kube")

BACKOFF_START = 0.8
BACKOFF_MAX = 30.0
PAGE_SIZE = 500


# ---------------------------------------------------------------------------------- API calls
def _decode(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def _raise_for(code: int, data: bytes, allowed: tuple[int, ...] = ()) -> None:
    """Raise the ApiStatusError of an error answer (a code in `allowed` is not an error)."""
    if code >= 400 and code not in allowed:
        raise status_error(code, _decode(data))


def check(resp: httpx.Response) -> Any:
    """The decoded body of a successful answer; raises ApiStatusError otherwise."""
    _raise_for(resp.status_code, resp.content)
    return _decode(resp.content)


def split_query(path: str) -> tuple[str, dict[str, str]]:
    """(path, its query as params): httpx replaces a URL's query with `params=`, so a path's own
    (`?labelSelector=...`) must travel in them or the selector is silently dropped."""
    base, _, query = path.partition("?")
    return base, dict(urllib.parse.parse_qsl(query, keep_blank_values=True))


def typed_items(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A list's items, each with its `kind` and `apiVersion`: kube-apiserver sends a built-in
    kind's items without them (a custom resource's with), and the type is the list's, as
    client-go's typed decoding knows it (`PodList` -> `Pod`)."""
    items = list(body.get("items") or [])
    kind = str(body.get("kind") or "").removesuffix("List")
    api_version = body.get("apiVersion")
    for item in items:
        if kind and "kind" not in item:
            item["kind"] = kind
        if api_version and "apiVersion" not in item:
            item["apiVersion"] = api_version
    return items


async def list_all(client: httpx.AsyncClient, path: str, page: int = PAGE_SIZE
                   ) -> tuple[list[dict[str, Any]], str]:
    """Every object at `path`, paged; returns (items, resourceVersion of the list)."""
    path, query = split_query(path)
    for _attempt in range(5):
        items: list[dict[str, Any]] = []
        cont = ""
        try:
            while True:
                params: dict[str, Any] = {**query, "limit": page}
                if cont:
                    params["continue"] = cont
                body = check(await client.get(path, params=params))
                items.extend(typed_items(body))
                meta = body.get("metadata") or {}
                cont = meta.get("continue") or ""
                if not cont:
                    return items, str(meta.get("resourceVersion") or "")
        except GoneError:
            log.info("list %s: continue token expired, listing again", path)
            continue
    raise ApiStatusError(410, "Expired", f"list {path} kept expiring")


def event_object(kind: str, namespace: str, name: str, uid: str, reason: str, message: str,
                 type_: str = "Normal", component: str = "yunikorn",
                 api_version: str = "v1") -> dict[str, Any]:
    now = dt.datetime.now(dt.timezone.utc)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    ns = namespace or "default"
    involved = {"kind": kind, "name": name, "apiVersion": api_version}
    if namespace:
        involved["namespace"] = namespace
    if uid:
        involved["uid"] = uid
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": ns},
        "involvedObject": involved, "reason": reason, "message": message[:1024], "type": type_,
        "source": {"component": component}, "firstTimestamp": stamp, "lastTimestamp": stamp,
        "count": 1, "reportingComponent": component, "reportingInstance": component,
    }


async def delete_pod(client: httpx.AsyncClient, namespace: str, name: str) -> None:
    """DELETE a pod; one already gone (404) is fine."""
    resp = await client.delete(f"/api/v1/namespaces/{namespace}/pods/{name}")
    _raise_for(resp.status_code, resp.content, allowed=(404,))


async def create_pod(client: httpx.AsyncClient, pod: Mapping[str, Any]) -> None:
    """POST a pod; one that exists already (409) is fine."""
    ns = pod["metadata"].get("namespace") or "default"
    resp = await client.post(f"/api/v1/namespaces/{ns}/pods", content=orjson.dumps(pod),
                             headers={"Content-Type": "application/json"})
    _raise_for(resp.status_code, resp.content, allowed=(409,))


async def patch_pod_status(client: httpx.AsyncClient, namespace: str, name: str,
                           status: Mapping[str, Any]) -> None:
    """Strategic-merge PATCH of a pod's status; a pod already gone (404) is fine."""
    resp = await client.patch(f"/api/v1/namespaces/{namespace}/pods/{name}/status",
                              content=orjson.dumps({"status": status}),
                              headers={"Content-Type": "application/strategic-merge-patch+json"})
    _raise_for(resp.status_code, resp.content, allowed=(404,))


# ---------------------------------------------------------------------------------- fast POSTs
class RawConnection:
    """One keep-alive HTTP/1.1 connection for small JSON POSTs (bindings, events).

    httpx costs about a millisecond of CPU per request in its pool and model layers; a binding is
    one small POST whose answer we only need the status of, and the shim makes thousands of them.
    This writes the request in one send and reads a Content-Length or chunked answer. It reconnects
    on the next request after any error; errors surface as httpx.TransportError so callers treat
    them like the httpx client's.
    """

    def __init__(self, cfg: "KubeConfig") -> None:
        url = httpx.URL(cfg.server)
        self.host = url.host
        self.tls = url.scheme == "https"
        self.port = url.port or (443 if self.tls else 80)
        self.host_header = f"{self.host}:{self.port}".encode()
        self.prefix = url.path.rstrip("/")
        self.cfg = cfg
        self._extra = b"".join(f"{k}: {v}\r\n".encode() for k, v in cfg.headers) + (
            f"User-Agent: {USER_AGENT}\r\nAccept: application/json\r\n".encode())
        self._stream: Any = None
        self._buf = b""

    async def _connect(self) -> None:
        stream: Any = await trio.open_tcp_stream(self.host, self.port)
        if self.tls:
            stream = trio.SSLStream(stream, self.cfg.tls, server_hostname=self.host)
            await stream.do_handshake()
        self._stream, self._buf = stream, b""

    async def aclose(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def _read_until(self, sep: bytes) -> bytes:
        while sep not in self._buf:
            data = await self._stream.receive_some(65536)
            if not data:
                raise httpx.RemoteProtocolError("server closed the connection")
            self._buf += data
        head, _, self._buf = self._buf.partition(sep)
        return head

    async def _read_exactly(self, n: int) -> bytes:
        while len(self._buf) < n:
            data = await self._stream.receive_some(max(65536, n - len(self._buf)))
            if not data:
                raise httpx.RemoteProtocolError("server closed the connection")
            self._buf += data
        body, self._buf = self._buf[:n], self._buf[n:]
        return body

    async def post(self, path: str, body: bytes, timeout: float = 30.0,
                   before_send: Callable[[], None] | None = None) -> tuple[int, bytes]:
        """POST JSON; returns (status, body). Raises httpx.TransportError subclasses; a 401 that
        fresh credentials do not cure raises CredentialsError. `before_send` is called right
        before the request's bytes are written (after connecting): a leader's fence, whose
        exception propagates and leaves nothing sent."""
        applier = self.cfg.applier
        status, data = await self._post_once(path, body, await applier.authorization(), timeout,
                                             before_send)
        if status == 401 and await applier.creds.refresh():
            status, data = await self._post_once(path, body, await applier.authorization(), timeout,
                                                 before_send)
        if status == 401:
            raise refused(applier.creds.describe, status, data)
        return status, data

    async def _post_once(self, path: str, body: bytes, auth: str, timeout: float,
                         before_send: Callable[[], None] | None = None) -> tuple[int, bytes]:
        request = (b"POST " + (self.prefix + path).encode() + b" HTTP/1.1\r\nHost: "
                   + self.host_header + b"\r\n" + self._extra
                   + (b"Authorization: " + auth.encode() + b"\r\n" if auth else b"")
                   + b"Content-Type: application/json\r\nContent-Length: "
                   + str(len(body)).encode() + b"\r\n\r\n" + body)
        try:
            with trio.fail_after(timeout):
                if self._stream is None:
                    await self._connect()
                if before_send is not None:
                    before_send()
                await self._stream.send_all(request)
                head = await self._read_until(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                status = int(lines[0].split(b" ", 2)[1])
                headers = {}
                for line in lines[1:]:
                    k, _, v = line.partition(b":")
                    headers[k.strip().lower()] = v.strip()
                if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
                    chunks = []
                    while True:
                        size = int((await self._read_until(b"\r\n")).split(b";")[0], 16)
                        chunks.append(await self._read_exactly(size + 2))
                        if size == 0:
                            break
                    data = b"".join(c[:-2] for c in chunks)
                else:
                    data = await self._read_exactly(int(headers.get(b"content-length", b"0")))
                if headers.get(b"connection", b"").lower() == b"close":
                    await self.aclose()
                return status, data
        except trio.TooSlowError:
            await self.aclose()
            raise httpx.ReadTimeout(f"POST {path} timed out") from None
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, ValueError,
                IndexError) as exc:
            await self.aclose()
            raise httpx.ConnectError(f"POST {path}: {type(exc).__name__}: {exc}") from None
        except httpx.TransportError:
            await self.aclose()
            raise


async def post_raw(conn: RawConnection, path: str, obj: Mapping[str, Any],
                   before_send: Callable[[], None] | None = None) -> None:
    """POST an object over a RawConnection. Raises ApiStatusError on an error answer."""
    status, data = await conn.post(path, orjson.dumps(obj), before_send=before_send)
    _raise_for(status, data)


async def bind_raw(conn: RawConnection, namespace: str, name: str, uid: str, node: str,
                   before_send: Callable[[], None] | None = None) -> None:
    """POST pods/{name}/binding. Raises ApiStatusError (409 = already bound, 404 = gone);
    `before_send` (a leader's fence) is called right before the request is written."""
    await post_raw(conn, f"/api/v1/namespaces/{namespace}/pods/{name}/binding", {
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}}, before_send)


# ---------------------------------------------------------------------------------- informer
Events = list[tuple[str, dict[str, Any]]]


class WatchBatch(NamedTuple):
    """What an informer sends: `events` = [(ADDED|MODIFIED|DELETED, obj), ...] of one resource
    kind ("pods", "nodes"), or None once, after the first list ("synced")."""

    kind: str
    events: Events | None


class Informer:
    """List + watch of one resource path, feeding `WatchBatch`es to a channel."""

    def __init__(self, client: httpx.AsyncClient, path: str, kind: str, *,
                 timeout_seconds: int = 300, page: int = PAGE_SIZE,
                 sleep: Callable[[float], Any] = trio.sleep,
                 remember: Callable[[Obj], Obj] = whole) -> None:
        """`remember`: what the store keeps of each object (`kube.store.whole`, or `stub` for an
        owner that keeps its own record of each object); the events carry the whole object."""
        self.client, self.path, self.kind = client, path, kind
        self.timeout_seconds = timeout_seconds
        self.page = page
        self.store = Store(remember)
        self.relists = 0
        self.expired = 0
        self.errors = 0
        self._sleep = sleep

    async def run(self, out: trio.MemorySendChannel, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        need_list = True
        backoff = Backoff(BACKOFF_START, BACKOFF_MAX, jitter=0.1)
        started = False
        while True:
            try:
                if need_list:
                    items, rv = await list_all(self.client, self.path, self.page)
                    events = self.store.replace(items, rv)
                    if self.relists:
                        log.info("%s: relisted %d objects at rv %s, %d changes", self.kind,
                                 len(items), rv, len(events))
                    self.relists += 1
                    need_list = False
                    if events:
                        await out.send(WatchBatch(self.kind, events))
                    if not started:
                        started = True
                        await out.send(WatchBatch(self.kind, None))
                        task_status.started()
                began = trio.current_time()
                got = await self._watch(out)
                if got:
                    backoff.reset()
                elif trio.current_time() - began < 1.0:
                    # an empty watch that ended at once: do not spin against the server
                    await self._sleep(backoff.next())
            except GoneError as exc:
                self.expired += 1
                log.info("%s: watch expired (%s), relisting", self.kind, exc.message or exc.reason)
                need_list = True
            except (httpx.HTTPError, ApiStatusError, orjson.JSONDecodeError, OSError) as exc:
                self.errors += 1
                delay = backoff.next()
                log.warning("%s: %s: %s; retrying in %.1fs", self.kind, type(exc).__name__, exc,
                            delay)
                await self._sleep(delay)

    async def _watch(self, out: trio.MemorySendChannel) -> int:
        """One watch request; returns how many events it delivered. Raises GoneError on 410."""
        path, query = split_query(self.path)
        params = {**query, "watch": "1", "allowWatchBookmarks": "true",
                  "resourceVersion": self.store.resource_version,
                  "timeoutSeconds": str(self.timeout_seconds)}
        timeout = httpx.Timeout(30.0, read=self.timeout_seconds + 30.0)
        delivered = 0
        async with self.client.stream("GET", path, params=params, timeout=timeout) as resp:
            if resp.status_code >= 400:
                _raise_for(resp.status_code, await resp.aread())
            buf = b""
            async for chunk in resp.aiter_bytes():
                buf += chunk
                if b"\n" not in buf:
                    continue
                *lines, buf = buf.split(b"\n")
                batch: Events = []
                for line in lines:
                    if not line.strip():
                        continue
                    event = orjson.loads(line)
                    etype = event.get("type")
                    obj = event.get("object") or {}
                    if etype == "ERROR":
                        if batch:
                            await out.send(WatchBatch(self.kind, batch))
                        raise status_error(500, obj)
                    applied = self.store.apply(str(etype), obj)
                    delivered += 1
                    if applied is not None:
                        batch.append(applied)  # type: ignore[arg-type]
                if batch:
                    await out.send(WatchBatch(self.kind, batch))
        return delivered


def backoff_delays(start: float = BACKOFF_START, cap: float = BACKOFF_MAX) -> list[float]:
    """The retry schedule (without jitter): 0.8, 1.6, 3.2, ... capped at 30 s."""
    return Backoff(start, cap).schedule()


__all__ = ["ApiStatusError", "GoneError", "Informer", "RawConnection", "WatchBatch", "backoff_delays", "bind_raw", "check",
           "create_pod", "delete_pod", "event_object", "list_all", "post_raw"]
