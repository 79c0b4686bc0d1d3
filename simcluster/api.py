"""The kube-apiserver REST surface: the entry, routing to the verbs, discovery and OpenAPI.

`Api.handle(request)` never raises: an `ApiError` becomes its Status response, anything else a
500 Status that is logged with its traceback; with `--fault-rate` a write may first draw a fault
(`faults`). The handlers talk to the `Store` synchronously, so
each request sees and makes a consistent set of changes (trio runs one task at a time).

Paths: `/api/v1/{res}`, `/api/v1/{res}/{name}[/{sub}]` (cluster-scoped), `/api/v1/namespaces/{ns}/
{res}[/{name}[/{sub}]]`, the same under `/apis/{group}/{version}`, legacy `/api/v1/watch/...`, plus
`/version`, `/healthz`, discovery and OpenAPI (see discovery.py). What is served is the `Registry`:
the built-ins plus the resources of every established CRD (`crdsync`), added on the CRD's creation
and removed when its deletion is finished; deletion and garbage collection are `gc.Collector`'s.
This module owns the path -> handler mapping only: the reads are `reads`', the writes (with
admission) `writes`', scale/binding/eviction `subresources`', pods/log `podlogs`', and the
virtual create-only resources (reviews, TokenRequest) the handlers `authconfig` installs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import orjson

from . import admission, apply, discovery, gc, podlogs
from .apiwire import JSON, Obj, decode_body, json_response, must_get, not_allowed, truthy
from .crdsync import CrdSync
from .errors import ApiError, BadRequest, InternalError, NotFound, status_object
from .faults import Faults
from .httpserver import Request, Response, StreamResponse
from .reads import Reads
from .resources import BINDINGS, PODS, Registry, Resource
from .store import Store
from .subresources import SubResources
from .writes import AdmitWrite, Writes

log = logging.getLogger("ykshm.sim-cluster.api")


def _error(exc: ApiError) -> Response:
    return json_response(exc.code, exc.status())


class Api:
    """The request handler; `kubelet` and `workload` use `create_object` for their writes."""

    def __init__(self, store: Store, *, server: str = "127.0.0.1", bookmark_interval: float = 5.0,
                 node_cpu: str = "16", node_memory: str = "64Gi", faults: Faults | None = None) -> None:
        self.store = store
        self.faults = faults or Faults()
        self.server = server
        self.registry = Registry()
        for r in self.registry.served:
            store.add_bucket(r.bucket)
        crds = CrdSync(store, self.registry)
        self.gc = gc.Collector(store, self.registry)
        self.gc.on_crd_removed = crds.resync
        self.admission = admission.Admission(store)
        self.reads = Reads(store, bookmark_interval)
        self.writes = Writes(store, crds, self.gc, self.admission, node_cpu=node_cpu, node_memory=node_memory)
        self.subresources = SubResources(store, self.writes)
        self._openapi_generation = -1
        self._v2_pb = discovery.openapi_v2_protobuf()
        self.requests = 0
        # authentication/authorization hooks (simcluster.access, reviews, rbac), set by main
        self.access: Any = None  # .admit(req): 401/403 before routing
        self.virtual: dict[tuple[str, str], Callable[[Request, str, str, Obj], Obj]] = {}  # reviews, tokens
        self.logs: podlogs.LogSource | None = None  # process pods' output (procpods); else logs are empty

    # -- the writes sim-cluster makes itself, and the hooks on them ---------------------------
    def create_object(self, res: Resource, namespace: str, body: Any, dry_run: bool = False,
                      manager: apply.Manager | None = None) -> Obj:
        """Validate, default and store a new object, without the webhooks (see `Writes.create_object`)."""
        return self.writes.create_object(res, namespace, body, dry_run, manager)

    def delete_object(self, res: Resource, ns: str, name: str, policy: str | None = None) -> tuple[Obj, bool]:
        """DELETE one object: (its last state, whether it is gone) — it stays while finalizers remain."""
        return self.writes.delete_object(res, ns, name, policy)

    @property
    def admit_write(self) -> AdmitWrite | None:
        """The RBAC escalation check on every write's object (`authconfig`), None when off."""
        return self.writes.admit_write

    @admit_write.setter
    def admit_write(self, hook: AdmitWrite | None) -> None:
        self.writes.admit_write = hook

    @property
    def root_ca_pem(self) -> str:
        """The CA published in each new namespace's kube-root-ca.crt ConfigMap."""
        return self.writes.root_ca_pem

    @root_ca_pem.setter
    def root_ca_pem(self, pem: str) -> None:
        self.writes.root_ca_pem = pem

    # -- entry -------------------------------------------------------------------------------
    async def handle(self, req: Request) -> Response | StreamResponse:
        self.requests += 1
        fault = self.faults.draw(req.method)
        if fault is not None:
            code, body = await self.faults.apply(fault, lambda: self.handle_unfaulted(req))
            return json_response(code, body)
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
            return json_response(200, {"paths": ["/api", "/api/v1", "/apis", *groups, "/healthz", "/livez",
                                                 "/openapi/v2", "/openapi/v3", "/readyz", "/version"]})
        head = segs[0]
        if head in ("healthz", "livez", "readyz"):
            return Response(200, b"ok", "text/plain; charset=utf-8")
        if head == "version":
            return json_response(200, discovery.K8S_VERSION)
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
            raise not_allowed()
        return json_response(200, doc)

    def _refresh_openapi(self) -> None:
        """Rebuild the OpenAPI documents when the served resources changed (a CRD came or went)."""
        if self._openapi_generation == self.registry.generation:
            return
        self._v3_index, self._v3_docs = discovery.openapi_v3_index(self.registry)
        self._v2_json = orjson.dumps(discovery.openapi_v2_doc(self.registry))
        self._openapi_generation = self.registry.generation

    def _openapi(self, req: Request, segs: list[str]) -> Response:
        if req.method not in ("GET", "HEAD"):
            raise not_allowed()
        self._refresh_openapi()
        if segs == ["v2"]:
            if "protobuf" in req.header("accept"):
                return Response(200, self._v2_pb, "application/com.github.proto-openapi.spec.v2.v1.0+protobuf")
            return Response(200, self._v2_json, JSON)
        if segs == ["v3"]:
            return json_response(200, self._v3_index)
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
                raise not_allowed()
            body = decode_body(req, res)
            if not isinstance(body, dict):
                raise BadRequest(f"the object provided is unrecognized (must be of type {res.kind})")
            return json_response(201, virtual(req, namespace or "", name or "", body))
        if res is BINDINGS:
            if method != "POST" or name is not None or namespace is None:
                raise not_allowed()
            body = decode_body(req, BINDINGS)
            pod = str(((body.get("metadata") or {}) if isinstance(body, dict) else {}).get("name") or "")
            return self.subresources.binding(req, namespace, pod, body)
        if watch or (name is None and method == "GET" and truthy(req.param("watch"))):
            if method != "GET":
                raise not_allowed()
            if name is not None:  # legacy /watch/.../{name}
                req.query["fieldSelector"] = [f"metadata.name={name}"]
            return await self.reads.watch(req, res, namespace)
        if name is None:
            return await self._collection(req, res, namespace)
        return await self._object(req, res, namespace or "", name, sub)

    async def _collection(self, req: Request, res: Resource, namespace: str | None) -> Response:
        """GET (list), POST (create) or DELETE (deletecollection) on `.../{res}`."""
        method = req.method
        if method in ("GET", "HEAD"):
            return await self.reads.list(req, res, namespace)
        if method == "POST":
            if res.namespaced and namespace is None:
                raise not_allowed()
            return await self.writes.create(req, res, namespace or "")
        if method == "DELETE":
            return self.writes.delete_collection(req, res, namespace)
        raise not_allowed()

    async def _object(self, req: Request, res: Resource, ns: str, name: str, sub: str) -> Response | StreamResponse:
        """A verb on `.../{res}/{name}[/{sub}]`."""
        method = req.method
        if method in ("GET", "HEAD") and sub == "log":
            return podlogs.respond(self.logs, must_get(self.store, res, ns, name), req)
        if sub == "scale":
            return self.subresources.scale(req, res, ns, name)
        if method in ("GET", "HEAD") and sub in ("", "status"):
            return self.reads.get(req, res, ns, name)
        if method == "PUT" and sub in ("", "status"):
            return await self.writes.update(req, res, ns, name, sub)
        if method == "PATCH" and sub in ("", "status"):
            return await self.writes.patch(req, res, ns, name, sub)
        if method == "DELETE" and sub == "":
            return await self.writes.delete(req, res, ns, name)
        if method == "POST" and sub == "binding":
            return self.subresources.binding(req, ns, name, decode_body(req, BINDINGS))
        if method == "POST" and sub == "eviction":
            return self.subresources.evict(req, ns, name)
        raise not_allowed()


__all__ = ["Api", "status_object"]
