"""The kube-apiserver REST surface: routing, verbs, list/watch, binding, status, discovery.

`Api.handle(request)` never raises: an `ApiError` becomes its Status response, anything else a
500 Status that is logged with its traceback. The handler talks to the `Store` synchronously, so
each request sees and makes a consistent set of changes (trio runs one task at a time).

Paths: `/api/v1/{res}`, `/api/v1/{res}/{name}[/{sub}]` (cluster-scoped), `/api/v1/namespaces/{ns}/
{res}[/{name}[/{sub}]]`, the same under `/apis/{group}/{version}`, legacy `/api/v1/watch/...`, plus
`/version`, `/healthz`, discovery and OpenAPI (see discovery.py). What is served is the `Registry`:
the built-ins plus the resources of every established CRD (`crd.py`), added on the CRD's creation
and removed when its deletion is finished; deletion and garbage collection are `gc.Collector`'s.
"""

from __future__ import annotations

import base64
import calendar
import copy
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import trio
import yaml

from . import (admission, apply, crd, discovery, disruption, eventconv, eviction, fieldsets, gc, kinds, objects,
               podlogs, protobuf, scale, schema, structural, tables, timestamps)
from .errors import (AlreadyExists, ApiError, BadRequest, Conflict, Expired, Forbidden, InternalError, Invalid,
                     MethodNotAllowed, NotFound, TooLargeVersion, UnsupportedMedia, status_object, success_status)
from .faults import Faults
from .httpserver import Request, Response, StreamResponse
from .patch import MERGE, STRATEGIC, apply_patch
from .resources import BINDINGS, CRDS, EVENTS, EVICTIONS, NAMESPACES, NEW_EVENTS, PDBS, PODS, Registry, Resource
from .selectors import Matcher, parse_field_selector, parse_label_selector
from .store import Change, Store

log = logging.getLogger("ykshm.sim-cluster.api")

Obj = dict[str, Any]
JSON = "application/json"
PROTECTED_NAMESPACES = ("default", "kube-system", "kube-public")
CONTINUE_EXPIRED = ("The provided continue parameter is too old to display a consistent list result. You can start a "
                    "new list without the continue parameter, or use the continue value from the response to get a "
                    "consistent (but incomplete) list.")


def _json(code: int, body: Any) -> Response:
    return Response(code, orjson.dumps(body), JSON)


def _error(exc: ApiError) -> Response:
    return _json(exc.code, exc.status())


def _truthy(value: str) -> bool:
    return value.lower() in ("1", "true", "yes")


def _int_param(req: Request, name: str, minimum: int = 0) -> int | None:
    raw = req.param(name)
    if raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"invalid value for {name}: {raw!r} is not an integer") from None
    if value < minimum:
        raise BadRequest(f"invalid value for {name}: {raw!r} must be >= {minimum}")
    return value


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


class Api:
    """The request handler; `kubelet` and `workload` use `create_object` for their writes."""

    def __init__(self, store: Store, *, server: str = "127.0.0.1", bookmark_interval: float = 5.0,
                 node_cpu: str = "16", node_memory: str = "64Gi", faults: Faults | None = None) -> None:
        self.store = store
        self.faults = faults or Faults()
        self.server = server
        self.bookmark_interval = bookmark_interval
        self.node_cpu = node_cpu
        self.node_memory = node_memory
        self.registry = Registry()
        for r in self.registry.served:
            store.add_bucket(r.bucket)
        self.gc = gc.Collector(store, self.registry)
        self.gc.on_crd_removed = self._resync_crds
        self.admission = admission.Admission(store)
        self._openapi_generation = -1
        self._v2_pb = discovery.openapi_v2_protobuf()
        self.requests = 0
        self.fresh_wait = 3.0
        # authentication/authorization hooks (simcluster.access, reviews, rbac), set by main
        self.access: Any = None  # .admit(req): 401/403 before routing
        self.virtual: dict[tuple[str, str], Callable[[Request, str, str, Obj], Obj]] = {}  # reviews, tokens
        self.admit_write: Callable[[Request, Resource, str, Obj], None] | None = None  # RBAC escalation
        self.root_ca_pem = kinds.ROOT_CA_PEM  # each namespace's kube-root-ca.crt
        self.logs: podlogs.LogSource | None = None  # process pods' output (procpods); else logs are empty

    # -- entry -------------------------------------------------------------------------------
    async def handle(self, req: Request) -> Response | StreamResponse:
        self.requests += 1
        fault = self.faults.draw(req.method)
        if fault is not None:
            code, body = await self.faults.apply(fault, lambda: self.handle_unfaulted(req))
            return _json(code, body)
        return await self.handle_unfaulted(req)

    async def handle_unfaulted(self, req: Request) -> Response | StreamResponse:
        try:
            if self.access is not None:
                self.access.admit(req)
            return await self._route(req)
        except ApiError as exc:
            return _error(exc)
        except Exception as exc:  # the catch-all: a bug here must not take the server down
            log.exception("internal error on %s %s", req.method, req.path)
            return _error(InternalError(f"Internal error occurred: {type(exc).__name__}: {exc}"))

    async def _route(self, req: Request) -> Response | StreamResponse:
        segs = [s for s in req.path.split("/") if s]
        if not segs:
            groups = sorted({f"/apis/{g}" for g, _ in self.registry.by_group_version if g}
                            | {f"/apis/{g}/{v}" for g, v in self.registry.by_group_version if g})
            return _json(200, {"paths": ["/api", "/api/v1", "/apis", *groups, "/healthz", "/livez", "/openapi/v2",
                                         "/openapi/v3", "/readyz", "/version"]})
        head = segs[0]
        if head in ("healthz", "livez", "readyz"):
            return Response(200, b"ok", "text/plain; charset=utf-8")
        if head == "version":
            return _json(200, discovery.K8S_VERSION)
        if head == "openapi":
            return self._openapi(req, segs[1:])
        if head == "api":
            if len(segs) == 1:
                return self._discovery(req, discovery.api_versions(self.server))
            if segs[1] != "v1":
                raise NotFound.path()
            if len(segs) == 2:
                return self._discovery(req, discovery.resource_list(self.registry, "", "v1"))
            return await self._resource(req, "", "v1", segs[2:])
        if head == "apis":
            if len(segs) == 1:
                return self._discovery(req, discovery.api_group_list(self.registry))
            if len(segs) == 2:
                return self._discovery(req, discovery.api_group(self.registry, segs[1]))
            if len(segs) == 3:
                return self._discovery(req, discovery.resource_list(self.registry, segs[1], segs[2]))
            return await self._resource(req, segs[1], segs[2], segs[3:])
        raise NotFound.path()

    def _discovery(self, req: Request, doc: Obj | None) -> Response:
        if doc is None:
            raise NotFound.path()
        if req.method not in ("GET", "HEAD"):
            raise MethodNotAllowed("the server does not allow this method on the requested resource")
        return _json(200, doc)

    def _refresh_openapi(self) -> None:
        """Rebuild the OpenAPI documents when the served resources changed (a CRD came or went)."""
        if self._openapi_generation == self.registry.generation:
            return
        self._v3_index, self._v3_docs = discovery.openapi_v3_index(self.registry)
        self._v2_json = orjson.dumps(discovery.openapi_v2_doc(self.registry))
        self._openapi_generation = self.registry.generation

    def _openapi(self, req: Request, segs: list[str]) -> Response:
        if req.method not in ("GET", "HEAD"):
            raise MethodNotAllowed("the server does not allow this method on the requested resource")
        self._refresh_openapi()
        if segs == ["v2"]:
            if "protobuf" in req.header("accept"):
                return Response(200, self._v2_pb, "application/com.github.proto-openapi.spec.v2.v1.0+protobuf")
            return Response(200, self._v2_json, JSON)
        if segs == ["v3"]:
            return _json(200, self._v3_index)
        if segs and segs[0] == "v3":
            doc = self._v3_docs.get("/".join(segs[1:]))
            if doc is not None:
                return Response(200, doc, JSON)
        raise NotFound.path()

    # -- resource routing -------------------------------------------------------------------
    async def _resource(self, req: Request, group: str, version: str, segs: list[str]) -> Response | StreamResponse:
        table = self.registry.lookup(group, version)
        if table is None:
            raise NotFound.path()
        watch = False
        if segs and segs[0] == "watch":
            watch, segs = True, segs[1:]
        if not segs:
            raise NotFound.path()
        namespace: str | None = None
        if segs[0] == "namespaces" and len(segs) >= 3 and segs[2] in table and table[segs[2]].namespaced:
            namespace, res, rest = segs[1], table[segs[2]], segs[3:]
        else:
            res = table.get(segs[0])  # type: ignore[assignment]
            if res is None:
                raise NotFound.path()
            rest = segs[1:]
            if res.namespaced and rest:
                raise NotFound.path()
        if len(rest) > 2:
            raise NotFound.path()
        name = rest[0] if rest else None
        sub = rest[1] if len(rest) == 2 else ""
        if sub and sub not in res.subresources and not (res is PODS and sub == "log"):
            raise NotFound.path()
        method = req.method
        virtual = self.virtual.get((res.group, f"{res.name}/{sub}" if sub else res.name))
        if virtual is not None or res.verbs == ("create",) and res is not BINDINGS:
            if method != "POST" or virtual is None:
                raise MethodNotAllowed("the server does not allow this method on the requested resource")
            body = self._decode(req, res)
            if not isinstance(body, dict):
                raise BadRequest(f"the object provided is unrecognized (must be of type {res.kind})")
            return _json(201, virtual(req, namespace or "", name or "", body))
        if res is BINDINGS:
            if method != "POST" or name is not None or namespace is None:
                raise MethodNotAllowed("the server does not allow this method on the requested resource")
            body = self._decode(req, BINDINGS)
            pod = str(((body.get("metadata") or {}) if isinstance(body, dict) else {}).get("name") or "")
            return self._bind(req, namespace, pod, body)
        if watch or (name is None and method == "GET" and _truthy(req.param("watch"))):
            if method != "GET":
                raise MethodNotAllowed("the server does not allow this method on the requested resource")
            if name is not None:  # legacy /watch/.../{name}
                req.query["fieldSelector"] = [f"metadata.name={name}"]
            return await self._watch(req, res, namespace)
        if name is None:
            if method in ("GET", "HEAD"):
                return await self._list(req, res, namespace)
            if method == "POST":
                if res.namespaced and namespace is None:
                    raise MethodNotAllowed("the server does not allow this method on the requested resource")
                return await self._create(req, res, namespace or "")
            if method == "DELETE":
                return self._delete_collection(req, res, namespace)
            raise MethodNotAllowed("the server does not allow this method on the requested resource")
        ns = namespace or ""
        if method in ("GET", "HEAD") and sub == "log":
            return podlogs.respond(self.logs, self._must_get(res, ns, name), req)
        if sub == "scale":
            return self._scale(req, res, ns, name)
        if method in ("GET", "HEAD") and sub in ("", "status"):
            return self._get(req, res, ns, name)
        if method == "PUT" and sub in ("", "status"):
            return await self._update(req, res, ns, name, sub)
        if method == "PATCH" and sub in ("", "status"):
            return await self._patch(req, res, ns, name, sub)
        if method == "DELETE" and sub == "":
            return await self._delete(req, res, ns, name)
        if method == "POST" and sub == "binding":
            return self._bind(req, ns, name, self._decode(req, BINDINGS))
        if method == "POST" and sub == "eviction":
            return self._evict(req, ns, name)
        raise MethodNotAllowed("the server does not allow this method on the requested resource")

    # -- helpers -----------------------------------------------------------------------------
    def _decode(self, req: Request, res: Resource) -> Any:
        if not req.body.strip():
            raise BadRequest(f"the object provided is unrecognized (must be of type {res.kind}): "
                             "couldn't get version/kind; json parse error: unexpected end of JSON input")
        ctype = req.header("content-type").split(";", 1)[0].strip().lower()
        if ctype == protobuf.MEDIA:
            return protobuf.decode(req.body)
        try:
            if ctype in ("application/yaml", "application/x-yaml", "text/yaml"):
                return yaml.safe_load(req.body)
            return orjson.loads(req.body)
        except (orjson.JSONDecodeError, yaml.YAMLError, UnicodeDecodeError) as exc:
            raise BadRequest(f"the object provided is unrecognized (must be of type {res.kind}): "
                             f"couldn't get version/kind; json parse error: {exc}") from None

    def _out(self, res: Resource, obj: Obj) -> Obj:
        return eventconv.to_new(obj) if res is NEW_EVENTS else obj

    def _selectors(self, req: Request, res: Resource) -> tuple[Matcher | None, Matcher | None]:
        label = parse_label_selector(req.param("labelSelector"))
        fields = parse_field_selector(req.param("fieldSelector"), res.field_labels, res.kind)
        if fields is not None and res is NEW_EVENTS:
            inner = fields
            fields = lambda obj: inner(eventconv.to_new(obj))  # noqa: E731
        return label, fields

    def _must_get(self, res: Resource, ns: str, name: str) -> Obj:
        obj = self.store.get(res.bucket, ns, name)
        if obj is None:
            raise NotFound.object(res.name, name, res.group)
        return obj

    async def _wait_fresh(self, rv: int) -> None:
        """A resourceVersion from the future: wait up to `fresh_wait` s for it, then 504 (as the cacher)."""
        if rv <= self.store.rv:
            return
        with trio.move_on_after(self.fresh_wait):
            while rv > self.store.rv:
                await trio.sleep(0.05)
        if rv > self.store.rv:
            raise TooLargeVersion.versions(rv, self.store.rv)

    def _table_include(self, req: Request) -> str:
        return req.param("includeObject") or "Metadata"

    def _ensure_namespace(self, ns: str) -> None:
        if self.store.get("namespaces", "", ns) is None:
            raise NotFound.object("namespaces", ns)

    # -- verbs -------------------------------------------------------------------------------
    def _get(self, req: Request, res: Resource, ns: str, name: str) -> Response:
        obj = self._must_get(res, ns, name)
        if tables.wants_table(req.header("accept")):
            return _json(200, tables.table(res, [obj], self._table_include(req),
                                           {"resourceVersion": obj["metadata"]["resourceVersion"]}))
        return _json(200, self._out(res, obj))

    async def _list(self, req: Request, res: Resource, namespace: str | None) -> Response:
        label, fields = self._selectors(req, res)
        limit = _int_param(req, "limit") or 0
        rv_param = req.param("resourceVersion")
        token = req.param("continue")
        if token and rv_param:
            raise BadRequest("specifying resource version is not allowed when using continue")
        if rv_param:
            try:
                asked = int(rv_param)
            except ValueError:
                raise BadRequest(f"invalid resource version: {rv_param!r}") from None
            await self._wait_fresh(asked)
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
            return _json(200, tables.table(res, items, self._table_include(req), meta))
        if res is NEW_EVENTS:
            items = [eventconv.to_new(o) for o in items]
        return _json(200, {"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": meta, "items": items})

    def _store_resource(self, res: Resource, body: Any) -> tuple[Resource, Any]:
        """The resource whose rules and bucket apply: events.k8s.io writes are core/v1 Events."""
        if res is NEW_EVENTS:
            objects.check_body(NEW_EVENTS, body)
            return EVENTS, eventconv.to_core(body)
        return res, body

    def create_object(self, res: Resource, namespace: str, body: Any, dry_run: bool = False,
                      manager: apply.Manager | None = None) -> Obj:
        """Validate, default and store a new object (also the kubelet's and workload's entry);
        `manager` (an API write's) comes to own its fields in managedFields."""
        res, body = self._store_resource(res, body)
        if res.namespaced:
            self._ensure_namespace(namespace)
        if res.custom is not None:
            owner = self.store.get(CRDS.bucket, "", res.custom.crd)
            if owner is not None and owner["metadata"].get("deletionTimestamp"):
                raise MethodNotAllowed("create not allowed while custom resource definition is terminating")
        generated = isinstance(body, dict) and not (body.get("metadata") or {}).get("name")
        for _attempt in range(8):
            obj = objects.prepare_create(res, copy.deepcopy(body) if generated else body, namespace,
                                         self.node_cpu, self.node_memory)
            meta = obj["metadata"]
            if self.store.get(res.bucket, meta.get("namespace", ""), meta["name"]) is None:
                break
            if not generated:
                raise AlreadyExists.object(res.name, meta["name"], res.group)
        else:
            raise AlreadyExists.object(res.name, obj["metadata"]["name"], res.group)
        kinds.on_create(self.store, res, obj)
        apply.track_create(res, obj, manager)
        if res.custom is None:
            timestamps.normalise(obj)
        if dry_run:
            return obj
        stored = self.store.create(res.bucket, obj)
        if res is NAMESPACES:  # its default ServiceAccount and kube-root-ca.crt
            for kind, body in kinds.namespace_objects(stored["metadata"]["name"], self.root_ca_pem):
                self.create_object(kind, stored["metadata"]["name"], body)
        return self._sync_crd(stored) if res is CRDS else stored

    def _resync_crds(self) -> None:
        """A CRD went: those refused for its names may now be accepted."""
        for obj in self.store.list(CRDS.bucket)[0]:
            if not self.registry.custom(obj["metadata"]["name"]):
                self._sync_crd(obj)

    def _sync_crd(self, obj: Obj) -> Obj:
        """Serve what a CRD defines (or why not, in its status): at once, as if established."""
        if obj["metadata"].get("deletionTimestamp"):
            return obj
        name = obj["metadata"]["name"]
        conflict = crd.name_conflict(obj, self.registry.served)
        resources = crd.resources_for(obj) if conflict is None else ()
        if conflict is None:
            self.store.add_bucket(crd.bucket_of(obj))
            self.registry.set_custom(name, resources)
        new = dict(obj)
        new["status"] = crd.status_for(obj, conflict)
        if new["status"] == obj.get("status"):
            return obj
        return self.store.replace(CRDS.bucket, new)

    def _field_validation(self, req: Request, res: Resource, body: Any) -> list[tuple[str, str]]:
        """fieldValidation=Strict: unknown fields are a 400; Warn (the default): Warning headers."""
        mode = req.param("fieldValidation") or "Warn"
        if mode not in ("Strict", "Warn", "Ignore"):
            raise BadRequest(f"fieldValidation: Unsupported value: {mode!r}: supported values: "
                             '"Ignore", "Strict", "Warn"')
        if mode == "Ignore":
            return []
        if res.custom is not None:
            unknown: list[str] = []
            structural.prune(res.custom.schema, body, unknown)
            if isinstance(body, dict) and isinstance(body.get("metadata"), dict):
                unknown += [f"metadata.{k}" for k in body["metadata"] if k not in schema.OBJECT_META]
        else:
            unknown = schema.unknown_fields("events.k8s.io" if res is NEW_EVENTS else res.bucket, body)
        if not unknown:
            return []
        if mode == "Strict":
            listed = ", ".join(f'unknown field "{f}"' for f in unknown)
            raise BadRequest(f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: '
                             f"strict decoding error: {listed}")
        return [("warning", '299 - "unknown field \\"%s\\""' % f) for f in unknown]

    async def _admit(self, req: Request, op: str, res: Resource, ns: str, name: str, sub: str, body: Any,
                     old: Obj | None) -> Any:
        """The admission webhooks around a write (admission.py): the body to store."""
        if body is not None and not isinstance(body, dict):
            return body  # undecodable: the object's own validation answers
        a = admission.attributes(req, op, res, sub, ns, name)
        if op == "CREATE":
            check = lambda b: self.create_object(res, ns, b, dry_run=True)  # noqa: E731
            if self.admission.active() and res is not NEW_EVENTS:
                body = admission.defaulted(check, body)
        else:
            check = lambda b: objects.prepare_update(self._store_resource(res, b)[0],  # noqa: E731
                                                     self._store_resource(res, copy.deepcopy(b))[1], old, sub)
        return await self.admission.admit(a, body, old, check)

    async def _create(self, req: Request, res: Resource, namespace: str) -> Response:
        body = self._decode(req, res)
        warnings = self._field_validation(req, res, body)
        name = str(((body.get("metadata") or {}) if isinstance(body, dict) else {}).get("name") or "")
        body = await self._admit(req, "CREATE", res, namespace, name, "", body, None)
        self._admit_write(req, res, namespace, body)
        manager = apply.update_manager(res, req.param("fieldManager"), req.header("user-agent"))
        obj = self.create_object(res, namespace, body, dry_run=req.param("dryRun") == "All", manager=manager)
        response = _json(201, self._out(res, obj))
        response.headers.extend(warnings)
        return response

    def _admit_write(self, req: Request, res: Resource, namespace: str, body: Any) -> None:
        if self.admit_write is not None and isinstance(body, dict):
            self.admit_write(req, res, namespace, body)

    def _check_rv(self, res: Resource, name: str, given: Any, old: Obj) -> None:
        if given not in (None, "") and str(given) != old["metadata"]["resourceVersion"]:
            raise Conflict.object(res.name, name, "the object has been modified; please apply your changes to the "
                                                  "latest version and try again", res.group)

    def _store_update(self, req: Request, res: Resource, name: str, body: Any, old: Obj, sub: str,
                      warnings: list[tuple[str, str]], tracked: bool = True) -> Response:
        """Store `body` as the new version of `old` (PUT, or the result of a PATCH); `tracked`: the
        writer is an Update manager (an apply has written managedFields itself)."""
        sres, body = self._store_resource(res, body)
        if isinstance(body, dict):
            self._check_rv(res, name, (body.get("metadata") or {}).get("resourceVersion"), old)
        new = objects.prepare_update(sres, body, old, sub)
        kinds.on_update(self.store, sres, new, old)
        self._admit_write(req, sres, new["metadata"].get("namespace", ""), new)
        if tracked:
            apply.track_update(sres, old, new, apply.update_manager(
                sres, req.param("fieldManager"), req.header("user-agent"), sub))
        if sres.custom is None:
            timestamps.normalise(new)
        if req.param("dryRun") == "All":
            stored = new
        elif objects.same_content(new, old):
            stored = old  # a no-op update does not bump the resourceVersion
        elif self.gc.finish_if_done(sres, new):
            stored = new  # its last finalizer went: removed
        else:
            stored = self.store.replace(sres.bucket, new)
            if sres is CRDS and sub == "":
                stored = self._sync_crd(stored)
        response = _json(200, self._out(res, stored))
        response.headers.extend(warnings)
        return response

    async def _update(self, req: Request, res: Resource, ns: str, name: str, sub: str) -> Response:
        old = self._must_get(res, ns, name)
        body = self._decode(req, res)
        warnings = self._field_validation(req, res, body)
        body = await self._admit(req, "UPDATE", res, ns, name, sub, body, old)
        old = self._must_get(res, ns, name)  # a change meanwhile: the resourceVersion check sees it
        return self._store_update(req, res, name, body, old, sub, warnings)

    def _patch_type(self, req: Request, res: Resource, default: str) -> str:
        """The PATCH media type; a custom resource has no strategic merge (415, as the apiserver)."""
        ctype = req.header("content-type", default)
        if res.custom is not None and ctype.split(";", 1)[0].strip().lower() == STRATEGIC:
            raise UnsupportedMedia("the body of the request was in an unknown format - accepted media types include: "
                                   "application/json-patch+json, application/merge-patch+json, "
                                   "application/apply-patch+yaml")
        return ctype

    async def _patch(self, req: Request, res: Resource, ns: str, name: str, sub: str) -> Response:
        ctype = self._patch_type(req, res, STRATEGIC)
        if apply.is_apply(ctype):
            return self._apply(req, res, ns, name, sub)
        old = self._must_get(res, ns, name)
        patch = self._decode(req, res)
        base = copy.deepcopy(self._out(res, old))
        merged = apply_patch(ctype, base, patch, None if res.custom else fieldsets.for_resource(res))
        if not isinstance(merged, dict):
            raise BadRequest("the patch does not produce an object")
        # field names are checked on the object the patch produces, as the apiserver does: patch
        # directives such as kubectl's `$setElementOrder/containers` are not fields
        warnings = self._field_validation(req, res, merged)
        merged = await self._admit(req, "UPDATE", res, ns, name, sub, merged, old)
        old = self._must_get(res, ns, name)  # a change meanwhile: the resourceVersion check sees it
        return self._store_update(req, res, name, merged, old, sub, warnings)

    def _apply(self, req: Request, res: Resource, ns: str, name: str, sub: str) -> Response:
        """Server-side apply (see apply.py): create when missing, else merge and own; 409 on conflicts."""
        if res is NEW_EVENTS:
            raise BadRequest("server-side apply of events.k8s.io/v1 Events is not supported by sim-cluster")
        mgr = apply.apply_manager(res, req.param("fieldManager"), sub)
        cfg = apply.decode_config(req.body, res, name)
        if res.namespaced and (cfg["metadata"].get("namespace") or ns) != ns:
            raise BadRequest("the namespace of the provided object does not match the namespace sent on the request")
        warnings = self._field_validation(req, res, cfg)
        old = self.store.get(res.bucket, ns, name)
        if old is None:
            if sub:
                raise NotFound.object(res.name, name, res.group)
            self._admit_write(req, res, ns, cfg)
            obj = self.create_object(res, ns, apply.created(res, cfg, mgr), dry_run=req.param("dryRun") == "All")
            response = _json(201, self._out(res, obj))
        else:
            merged = apply.apply(res, old, cfg, mgr, _truthy(req.param("force")))
            response = self._store_update(req, res, name, merged, old, sub, warnings, tracked=False)
        response.headers.extend(warnings if old is None else [])
        return response

    def _delete_options(self, req: Request) -> Obj:
        """DeleteOptions from the body or the query (the body wins), with `propagationPolicy`
        resolved (the deprecated `orphanDependents: true` is Orphan); the grace period is ignored."""
        _int_param(req, "gracePeriodSeconds")
        opts: Obj = {}
        if req.body.strip():
            if req.header("content-type").startswith(protobuf.MEDIA):
                opts = protobuf.decode_delete_options(req.body)
            else:
                try:
                    opts = orjson.loads(req.body)
                except orjson.JSONDecodeError as exc:
                    raise BadRequest("the object provided is unrecognized (must be of type DeleteOptions): "
                                     f"{exc}") from None
                if not isinstance(opts, dict):
                    raise BadRequest("the object provided is unrecognized (must be of type DeleteOptions)")
        policy = opts.get("propagationPolicy") or req.param("propagationPolicy") or None
        orphan = opts.get("orphanDependents")
        if orphan is None and req.param("orphanDependents"):
            orphan = _truthy(req.param("orphanDependents"))
        if policy is None and orphan is not None:
            policy = "Orphan" if orphan else "Background"
        if policy is not None and policy not in gc.POLICIES:
            raise BadRequest(f'propagationPolicy: Unsupported value: "{policy}": supported values: '
                             '"Orphan", "Background", "Foreground"')
        opts["propagationPolicy"] = policy
        return opts

    def delete_object(self, res: Resource, ns: str, name: str, policy: str | None = None) -> tuple[Obj, bool]:
        """DELETE one object: (its last state, whether it is gone) — it stays while finalizers remain."""
        if res is NAMESPACES and name in PROTECTED_NAMESPACES:
            raise Forbidden(f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                            {"name": name, "kind": "namespaces"})
        return self.gc.delete(res, self._must_get(res, ns, name), policy)

    async def _delete(self, req: Request, res: Resource, ns: str, name: str) -> Response:
        old = self._must_get(res, ns, name)
        opts = self._delete_options(req)
        await self._admit(req, "DELETE", res, ns, name, "", None, old)
        old = self._must_get(res, ns, name)
        pre = opts.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
            raise Conflict.object(res.name, name, f"Precondition failed: UID in precondition: {pre['uid']}, "
                                                  f"UID in object meta: {old['metadata']['uid']}", res.group)
        if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
            raise Conflict.object(res.name, name, "Precondition failed: ResourceVersion in precondition: "
                                                  f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                                                  f"{old['metadata']['resourceVersion']}", res.group)
        if req.param("dryRun") == "All" or opts.get("dryRun") == ["All"]:
            return _json(200, self._deleted(res, old, True))
        return _json(200, self._deleted(res, *self.delete_object(res, ns, name, opts["propagationPolicy"])))

    def _deleted(self, res: Resource, obj: Obj, gone: bool) -> Obj:
        """DELETE's answer: the object for pods, namespaces and services (their registries set
        ReturnDeletedObject; the official client decodes a V1Service) and for an object that stays
        (finalizers), a Status for every other kind (the generic registry's)."""
        if res.kind in ("Pod", "Namespace", "Service") or not gone:
            return self._out(res, obj)
        details = {"name": obj["metadata"]["name"], "kind": res.name, "uid": obj["metadata"].get("uid", "")}
        if res.group:
            details["group"] = res.group
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

    def _delete_collection(self, req: Request, res: Resource, namespace: str | None) -> Response:
        if "deletecollection" not in res.verbs:
            raise MethodNotAllowed("the server does not allow this method on the requested resource")
        policy = self._delete_options(req)["propagationPolicy"]
        label, fields = self._selectors(req, res)
        items, _, _ = self.store.list(res.bucket, namespace, label, fields)
        deleted = [self.delete_object(res, o["metadata"].get("namespace", ""), o["metadata"]["name"], policy)[0]
                   for o in items]
        return _json(200, {"kind": f"{res.kind}List", "apiVersion": res.api_version,
                           "metadata": {"resourceVersion": str(self.store.rv)},
                           "items": [self._out(res, o) for o in deleted]})

    def _scale(self, req: Request, res: Resource, ns: str, name: str) -> Response:
        """GET/PUT/PATCH .../{name}/scale: an autoscaling/v1 Scale (see scale.py)."""
        obj = self._must_get(res, ns, name)
        current = scale.to_scale(res, obj)
        if req.method in ("GET", "HEAD"):
            return _json(200, current)
        if req.method == "PUT":
            body = self._decode(req, res)
        elif req.method == "PATCH":
            body = apply_patch(self._patch_type(req, res, MERGE), copy.deepcopy(current), self._decode(req, res))
        else:
            raise MethodNotAllowed("the server does not allow this method on the requested resource")
        new = scale.scaled(res, obj, body)
        new["metadata"].pop("resourceVersion", None)  # checked against the Scale's, above
        response = self._store_update(req, res, name, new, obj, "", [])
        stored = orjson.loads(response.body)
        return _json(200, scale.to_scale(res, stored))

    def bind(self, ns: str, pod_name: str, body: Any) -> Obj:
        """POST pods/{name}/binding: set spec.nodeName once; 409 when the pod is already bound."""
        if not isinstance(body, dict):
            raise BadRequest("the object provided is unrecognized (must be of type Binding)")
        if body.get("kind") not in (None, "", "Binding"):
            raise BadRequest(f"the object provided is unrecognized (must be of type Binding): kind {body.get('kind')!r}")
        meta = body.get("metadata") or {}
        if meta.get("name") and meta["name"] != pod_name:
            raise BadRequest(f'the name of the object ({meta["name"]}) does not match the name on the URL ({pod_name})')
        if not pod_name:
            raise Invalid.fields("Binding", "", [objects.required("metadata.name")])
        target = body.get("target") or {}
        if not isinstance(target, dict) or not target.get("name"):
            raise Invalid.fields("Binding", pod_name, [objects.required("target.name")])
        if target.get("kind") not in (None, "", "Node"):
            raise Invalid.fields("Binding", pod_name, [objects.invalid("target.kind", target["kind"],
                                                                       "must be empty or 'Node'")])
        node = str(target["name"])
        pod = self.store.get("pods", ns, pod_name)
        if pod is None:
            raise NotFound.object("pods", pod_name)
        if meta.get("uid") and meta["uid"] != pod["metadata"]["uid"]:
            raise Conflict.object("pods/binding", pod_name, f"Precondition failed: UID in precondition: {meta['uid']}, "
                                                            f"UID in object meta: {pod['metadata']['uid']}")
        current = (pod.get("spec") or {}).get("nodeName")
        if current:
            raise Conflict.object("pods/binding", pod_name, f'pod {pod_name} is already assigned to node "{current}"')
        new = dict(pod)
        new["metadata"] = dict(pod["metadata"])
        new["spec"] = dict(pod.get("spec") or {})
        new["spec"]["nodeName"] = node
        status = dict(pod.get("status") or {})
        conds = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conds.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                      "lastTransitionTime": objects.now_rfc3339()})
        status["conditions"] = conds
        new["status"] = status
        if meta.get("annotations"):
            new["metadata"]["annotations"] = {**(pod["metadata"].get("annotations") or {}), **meta["annotations"]}
        return self.store.replace("pods", new)

    def _evict(self, req: Request, ns: str, name: str) -> Response:
        """POST pods/{name}/eviction: delete the pod unless a PodDisruptionBudget forbids it (429)."""
        body = eviction.check_body(name, self._decode(req, EVICTIONS))
        pdb = eviction.may_evict(self.store, self._must_get(PODS, ns, name))
        opts = body.get("deleteOptions") or {}
        if req.param("dryRun") != "All" and opts.get("dryRun") != ["All"]:
            pod = self._must_get(PODS, ns, name)
            self.store.replace("pods", eviction.with_disruption_target(pod, objects.now_rfc3339()))
            self.delete_object(PODS, ns, name, opts.get("propagationPolicy"))
            if pdb is not None:
                self.store.replace(PDBS.bucket, disruption.with_evicted(pdb, name))
        return _json(201, eviction.evicted_status())

    def _bind(self, req: Request, ns: str, pod_name: str, body: Any) -> Response:
        if req.param("dryRun") != "All":
            self.bind(ns, pod_name, body)
        ok = success_status()
        ok["code"] = 201
        return _json(201, ok)

    # -- housekeeping ------------------------------------------------------------------------
    def expire_events(self, ttl: float) -> int:
        """Delete Events created more than `ttl` seconds ago (the apiserver's --event-ttl)."""
        cutoff = time.time() - ttl
        expired = 0
        for ev in self.store.list(EVENTS.bucket)[0]:
            meta = ev["metadata"]
            try:
                created = calendar.timegm(time.strptime(meta.get("creationTimestamp", ""), "%Y-%m-%dT%H:%M:%SZ"))
            except ValueError:
                continue
            if created < cutoff:
                self.store.delete(EVENTS.bucket, meta.get("namespace", ""), meta["name"])
                expired += 1
        return expired

    async def run_event_expiry(self, ttl: float, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await trio.sleep(min(60.0, max(1.0, ttl / 10)))
            self.expire_events(ttl)

    # -- watch -------------------------------------------------------------------------------
    async def _watch(self, req: Request, res: Resource, namespace: str | None) -> StreamResponse:
        label, fields = self._selectors(req, res)
        rv_param = req.param("resourceVersion")
        send_initial = _truthy(req.param("sendInitialEvents"))
        bookmarks = _truthy(req.param("allowWatchBookmarks"))
        if send_initial and req.param("resourceVersionMatch") != "NotOlderThan":
            raise Invalid.fields("ListOptions.meta.k8s.io", "", [(
                "FieldValueForbidden", "resourceVersionMatch",
                "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")])
        timeout_s = _int_param(req, "timeoutSeconds")
        timeout = float(timeout_s) if timeout_s else random.uniform(1800, 3600)
        since: int | None = None
        if rv_param not in ("", "0") and not send_initial:
            try:
                since = int(rv_param)
            except ValueError:
                raise BadRequest(f"invalid resource version: {rv_param!r}") from None
            await self._wait_fresh(since)
        as_table = tables.wants_table(req.header("accept"))
        include = self._table_include(req)
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
            if as_table:
                obj = tables.table(res, [change.obj], include, {"resourceVersion": str(change.rv)})
                return orjson.dumps({"type": change.type, "object": obj}) + b"\n"
            if res is NEW_EVENTS:
                return orjson.dumps({"type": change.type, "object": eventconv.to_new(change.obj)}) + b"\n"
            return change.line()

        def bookmark(rv: int, initial_end: bool = False) -> bytes:
            meta: Obj = {"resourceVersion": str(rv)}
            if initial_end:
                meta["annotations"] = {"k8s.io/initial-events-end": "true"}
            return orjson.dumps({"type": "BOOKMARK",
                                 "object": {"kind": res.kind, "apiVersion": res.api_version, "metadata": meta}}) + b"\n"

        async def writer(send: Callable[[bytes], Awaitable[None]]) -> None:
            try:
                with trio.move_on_after(timeout):
                    for i in range(0, len(initial), 500):
                        await send(b"".join(encode(c) for c in initial[i:i + 500]))
                    if send_initial and bookmarks:
                        await send(bookmark(start_rv, initial_end=True))
                    next_bookmark = trio.current_time() + interval if bookmarks else math.inf
                    while True:
                        change = None
                        with trio.move_on_at(next_bookmark):
                            try:
                                change = await watcher.receive.receive()
                            except trio.EndOfChannel:
                                return  # overflowed: the client re-watches from its last resourceVersion
                        if change is None:
                            await send(bookmark(store.rv))
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


__all__ = ["Api", "status_object"]
