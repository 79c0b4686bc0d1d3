"""The read verbs: get, list (paged by `limit`/`continue`) and watch (chunked, with bookmarks).

What a client's informer relies on, as the apiserver's cacher answers it: a list's
resourceVersion and its `continue` token (410 once the history no longer holds it); a
resourceVersion from the future waits up to `fresh_wait` s, then 504; `resourceVersion=0` is
served whole; a watch sends its initial events, then changes in batches, a BOOKMARK every
`bookmark_interval` s when asked (and `k8s.io/initial-events-end` after `sendInitialEvents`),
an ERROR 410 line when its resourceVersion is too old, and ends after `timeoutSeconds` (else
30-60 min) or when it falls behind (the client re-watches). `Accept: ...;as=Table` gets Tables.
"""

from __future__ import annotations

import base64
import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson
import trio

from . import eventconv, tables
from .apiwire import JSON, Obj, int_param, json_response, must_get, out, selectors, truthy
from .errors import BadRequest, Expired, Invalid, TooLargeVersion
from .httpserver import Request, Response, StreamResponse
from .resources import NEW_EVENTS, Resource
from .store import Change, Store

CONTINUE_EXPIRED = ("The provided continue parameter is too old to display a consistent list result. You can start a "
                    "new list without the continue parameter, or use the continue value from the response to get a "
                    "consistent (but incomplete) list.")


def _encode_continue(rv: int, key: tuple[str, str]) -> str:
    raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": [key[0], key[1]]})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = orjson.loads(raw)
        rv = int(data["rv"])
        ns, name = data["start"]
        return rv, (str(ns), str(name))
    except Exception:
        raise BadRequest("continue key is not valid: incorrect encoded start resourceVersion") from None


def _table_include(req: Request) -> str:
    return req.param("includeObject") or "Metadata"


def _event_line(res: Resource, change: Change, table_include: str | None) -> bytes:
    """One watch event as sent: as a Table row when asked, events.k8s.io for the new Events."""
    if table_include is not None:
        obj = tables.table(res, [change.obj], table_include, {"resourceVersion": str(change.rv)})
        return orjson.dumps({"type": change.type, "object": obj}) + b"\n"
    if res is NEW_EVENTS:
        return orjson.dumps({"type": change.type, "object": eventconv.to_new(change.obj)}) + b"\n"
    return change.line()


def _bookmark_line(res: Resource, rv: int, initial_end: bool = False) -> bytes:
    """A BOOKMARK at `rv`; `initial_end` marks the end of `sendInitialEvents`' initial list."""
    meta: Obj = {"resourceVersion": str(rv)}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    return orjson.dumps({"type": "BOOKMARK",
                         "object": {"kind": res.kind, "apiVersion": res.api_version, "metadata": meta}}) + b"\n"


_TYPE_META = ("kind", "apiVersion")


@dataclass
class Reads:
    """The read handlers over one `Store`."""

    store: Store
    bookmark_interval: float = 5.0
    fresh_wait: float = 3.0

    def get(self, req: Request, res: Resource, ns: str, name: str) -> Response:
        obj = must_get(self.store, res, ns, name)
        if tables.wants_table(req.header("accept")):
            return json_response(200, tables.table(res, [obj], _table_include(req),
                                                   {"resourceVersion": obj["metadata"]["resourceVersion"]}))
        return json_response(200, out(res, obj))

    async def wait_fresh(self, rv: int) -> None:
        """A resourceVersion from the future: wait up to `fresh_wait` s for it, then 504 (as the cacher)."""
        if rv <= self.store.rv:
            return
        with trio.move_on_after(self.fresh_wait):
            while rv > self.store.rv:
                await trio.sleep(0.05)
        if rv > self.store.rv:
            raise TooLargeVersion.versions(rv, self.store.rv)

    async def list(self, req: Request, res: Resource, namespace: str | None) -> Response:
        label, fields = selectors(req, res)
        limit = int_param(req, "limit") or 0
        rv_param = req.param("resourceVersion")
        token = req.param("continue")
        if token and rv_param:
            raise BadRequest("specifying resource version is not allowed when using continue")
        if rv_param:
            try:
                asked = int(rv_param)
            except ValueError:
                raise BadRequest(f"invalid resource version: {rv_param!r}") from None
            await self.wait_fresh(asked)
        after = None
        list_rv = self.store.rv
        if token:
            list_rv, after = _decode_continue(token)
            try:
                self.store.check_rv(list_rv)
            except Expired:
                raise Expired(CONTINUE_EXPIRED) from None
        elif rv_param == "0":
            limit = 0  # served whole, "from the cache", as a real apiserver does
        items, last, remaining = self.store.list(res.bucket, namespace, label, fields, after, limit)
        meta: Obj = {"resourceVersion": str(list_rv)}
        if last is not None:
            meta["continue"] = _encode_continue(list_rv, last)
            meta["remainingItemCount"] = remaining
        if tables.wants_table(req.header("accept")):
            return json_response(200, tables.table(res, items, _table_include(req), meta))
        if res is NEW_EVENTS:
            items = [eventconv.to_new(o) for o in items]
        if res.custom is None:   # a built-in kind's items come without kind/apiVersion, a CR's with
            items = [{k: v for k, v in o.items() if k not in _TYPE_META} for o in items]
        return json_response(200, {"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": meta,
                                   "items": items})

    async def watch(self, req: Request, res: Resource, namespace: str | None) -> StreamResponse:
        label, fields = selectors(req, res)
        rv_param = req.param("resourceVersion")
        send_initial = truthy(req.param("sendInitialEvents"))
        bookmarks = truthy(req.param("allowWatchBookmarks"))
        if send_initial and req.param("resourceVersionMatch") != "NotOlderThan":
            raise Invalid.fields("ListOptions.meta.k8s.io", "", [(
                "FieldValueForbidden", "resourceVersionMatch",
                "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")])
        timeout_s = int_param(req, "timeoutSeconds")
        timeout = float(timeout_s) if timeout_s else random.uniform(1800, 3600)
        since: int | None = None
        if rv_param not in ("", "0") and not send_initial:
            try:
                since = int(rv_param)
            except ValueError:
                raise BadRequest(f"invalid resource version: {rv_param!r}") from None
            await self.wait_fresh(since)
        include = _table_include(req) if tables.wants_table(req.header("accept")) else None
        try:
            initial, watcher = self.store.watch(res.bucket, namespace, label, fields, since)
        except Expired as exc:
            line = orjson.dumps({"type": "ERROR", "object": exc.status()}) + b"\n"

            async def expired(send: Callable[[bytes], Awaitable[None]]) -> None:
                await send(line)

            return StreamResponse(200, expired, JSON)
        start_rv = self.store.rv
        interval = self.bookmark_interval
        store = self.store

        def encode(change: Change) -> bytes:
            return _event_line(res, change, include)

        async def writer(send: Callable[[bytes], Awaitable[None]]) -> None:
            try:
                with trio.move_on_after(timeout):
                    for i in range(0, len(initial), 500):
                        await send(b"".join(encode(c) for c in initial[i:i + 500]))
                    if send_initial and bookmarks:
                        await send(_bookmark_line(res, start_rv, initial_end=True))
                    next_bookmark = trio.current_time() + interval if bookmarks else math.inf
                    while True:
                        change = None
                        with trio.move_on_at(next_bookmark):
                            try:
                                change = await watcher.receive.receive()
                            except trio.EndOfChannel:
                                return  # overflowed: the client re-watches from its last resourceVersion
                        if change is None:
                            await send(_bookmark_line(res, store.rv))
                            next_bookmark = trio.current_time() + interval
                            continue
                        batch = [encode(change)]
                        while len(batch) < 1000:
                            try:
                                batch.append(encode(watcher.receive.receive_nowait()))
                            except (trio.WouldBlock, trio.EndOfChannel):
                                break
                        await send(b"".join(batch))
            finally:
                store.unwatch(watcher)

        return StreamResponse(200, writer, JSON)
