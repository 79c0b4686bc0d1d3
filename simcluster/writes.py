"""The write verbs: create, update (PUT), patch, server-side apply, delete, deletecollection.

Each write goes, as in kube-apiserver, through: decode -> `fieldValidation` (Strict 400, Warn
headers) -> the admission webhooks (`admission`; mutating, then validating) -> the RBAC
escalation hook (`admit_write`, installed by `authconfig`) -> defaults and validation (`objects`,
422 naming the field) -> managedFields (`apply`) -> the store. `create_object` is also the entry
of sim-cluster's own writers (kubelet, workload, controllers, leases), which skip the webhooks.
A no-op update keeps the resourceVersion; a write of a CRD serves its resources (`crdsync`);
deletion (finalizers, propagation) is `gc.Collector`'s.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import orjson

from . import admission, apply, eventconv, fieldsets, gc, kinds, objects, protobuf, schema, structural, timestamps
from .apiwire import Obj, decode_body, int_param, json_response, must_get, not_allowed, out, selectors, truthy
from .crdsync import CrdSync
from .errors import AlreadyExists, BadRequest, Conflict, Forbidden, MethodNotAllowed, NotFound, UnsupportedMedia
from .httpserver import Request, Response
from .patch import STRATEGIC, apply_patch
from .resources import CRDS, EVENTS, NAMESPACES, NEW_EVENTS, Resource
from .store import Store

PROTECTED_NAMESPACES = ("default", "kube-system", "kube-public")
AdmitWrite = Callable[[Request, Resource, str, Obj], None]


def _store_resource(res: Resource, body: Any) -> tuple[Resource, Any]:
    """The resource whose rules and bucket apply: events.k8s.io writes are core/v1 Events."""
    if res is NEW_EVENTS:
        objects.check_body(NEW_EVENTS, body)
        return EVENTS, eventconv.to_core(body)
    return res, body


def _field_validation(req: Request, res: Resource, body: Any) -> list[tuple[str, str]]:
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


def _check_rv(res: Resource, name: str, given: Any, old: Obj) -> None:
    if given not in (None, "") and str(given) != old["metadata"]["resourceVersion"]:
        raise Conflict.object(res.name, name, "the object has been modified; please apply your changes to the "
                                              "latest version and try again", res.group)


def patch_type(req: Request, res: Resource, default: str) -> str:
    """The PATCH media type; a custom resource has no strategic merge (415, as the apiserver)."""
    ctype = req.header("content-type", default)
    if res.custom is not None and ctype.split(";", 1)[0].strip().lower() == STRATEGIC:
        raise UnsupportedMedia("the body of the request was in an unknown format - accepted media types include: "
                               "application/json-patch+json, application/merge-patch+json, "
                               "application/apply-patch+yaml")
    return ctype


def _delete_options(req: Request) -> Obj:
    """DeleteOptions from the body or the query (the body wins), with `propagationPolicy`
    resolved (the deprecated `orphanDependents: true` is Orphan); the grace period is ignored."""
    int_param(req, "gracePeriodSeconds")
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
        orphan = truthy(req.param("orphanDependents"))
    if policy is None and orphan is not None:
        policy = "Orphan" if orphan else "Background"
    if policy is not None and policy not in gc.POLICIES:
        raise BadRequest(f'propagationPolicy: Unsupported value: "{policy}": supported values: '
                         '"Orphan", "Background", "Foreground"')
    opts["propagationPolicy"] = policy
    return opts


def _deleted(res: Resource, obj: Obj, gone: bool) -> Obj:
    """DELETE's answer: the object for pods, namespaces and services (their registries set
    ReturnDeletedObject; the official client decodes a V1Service) and for an object that stays
    (finalizers), a Status for every other kind (the generic registry's)."""
    if res.kind in ("Pod", "Namespace", "Service") or not gone:
        return out(res, obj)
    details = {"name": obj["metadata"]["name"], "kind": res.name, "uid": obj["metadata"].get("uid", "")}
    if res.group:
        details["group"] = res.group
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}


class Writes:
    """The write handlers of one server; `root_ca_pem` and `admit_write` are set by `authconfig`."""

    def __init__(self, store: Store, crds: CrdSync, collector: gc.Collector, chain: admission.Admission, *,
                 node_cpu: str = "16", node_memory: str = "64Gi") -> None:
        self.store = store
        self.crds = crds
        self.gc = collector
        self.admission = chain
        self.node_cpu = node_cpu
        self.node_memory = node_memory
        self.root_ca_pem = kinds.ROOT_CA_PEM  # each namespace's kube-root-ca.crt
        self.admit_write: AdmitWrite | None = None  # RBAC escalation

    # -- create ------------------------------------------------------------------------------
    def create_object(self, res: Resource, namespace: str, body: Any, dry_run: bool = False,
                      manager: apply.Manager | None = None) -> Obj:
        """Validate, default and store a new object (also the kubelet's and workload's entry);
        `manager` (an API write's) comes to own its fields in managedFields."""
        res, body = _store_resource(res, body)
        if res.namespaced:
            must_get(self.store, NAMESPACES, "", namespace)
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
        return self.crds.sync(stored) if res is CRDS else stored

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
            check = lambda b: objects.prepare_update(_store_resource(res, b)[0],  # noqa: E731
                                                     _store_resource(res, copy.deepcopy(b))[1], old, sub)
        return await self.admission.admit(a, body, old, check)

    def _admit_write(self, req: Request, res: Resource, namespace: str, body: Any) -> None:
        if self.admit_write is not None and isinstance(body, dict):
            self.admit_write(req, res, namespace, body)

    async def create(self, req: Request, res: Resource, namespace: str) -> Response:
        body = decode_body(req, res)
        warnings = _field_validation(req, res, body)
        name = str(((body.get("metadata") or {}) if isinstance(body, dict) else {}).get("name") or "")
        body = await self._admit(req, "CREATE", res, namespace, name, "", body, None)
        self._admit_write(req, res, namespace, body)
        manager = apply.update_manager(res, req.param("fieldManager"), req.header("user-agent"))
        obj = self.create_object(res, namespace, body, dry_run=req.param("dryRun") == "All", manager=manager)
        response = json_response(201, out(res, obj))
        response.headers.extend(warnings)
        return response

    # -- update, patch, apply ----------------------------------------------------------------
    def store_update(self, req: Request, res: Resource, name: str, body: Any, old: Obj, sub: str,
                     warnings: list[tuple[str, str]], tracked: bool = True) -> Response:
        """Store `body` as the new version of `old` (PUT, or the result of a PATCH); `tracked`: the
        writer is an Update manager (an apply has written managedFields itself)."""
        sres, body = _store_resource(res, body)
        if isinstance(body, dict):
            _check_rv(res, name, (body.get("metadata") or {}).get("resourceVersion"), old)
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
                stored = self.crds.sync(stored)
        response = json_response(200, out(res, stored))
        response.headers.extend(warnings)
        return response

    async def update(self, req: Request, res: Resource, ns: str, name: str, sub: str) -> Response:
        old = must_get(self.store, res, ns, name)
        body = decode_body(req, res)
        warnings = _field_validation(req, res, body)
        body = await self._admit(req, "UPDATE", res, ns, name, sub, body, old)
        old = must_get(self.store, res, ns, name)  # a change meanwhile: the resourceVersion check sees it
        return self.store_update(req, res, name, body, old, sub, warnings)

    async def patch(self, req: Request, res: Resource, ns: str, name: str, sub: str) -> Response:
        ctype = patch_type(req, res, STRATEGIC)
        if apply.is_apply(ctype):
            return self._apply(req, res, ns, name, sub)
        old = must_get(self.store, res, ns, name)
        patch = decode_body(req, res)
        base = copy.deepcopy(out(res, old))
        merged = apply_patch(ctype, base, patch, None if res.custom else fieldsets.for_resource(res))
        if not isinstance(merged, dict):
            raise BadRequest("the patch does not produce an object")
        # field names are checked on the object the patch produces, as the apiserver does: patch
        # directives such as kubectl's `$setElementOrder/containers` are not fields
        warnings = _field_validation(req, res, merged)
        merged = await self._admit(req, "UPDATE", res, ns, name, sub, merged, old)
        old = must_get(self.store, res, ns, name)  # a change meanwhile: the resourceVersion check sees it
        return self.store_update(req, res, name, merged, old, sub, warnings)

    def _apply(self, req: Request, res: Resource, ns: str, name: str, sub: str) -> Response:
        """Server-side apply (see apply.py): create when missing, else merge and own; 409 on conflicts."""
        if res is NEW_EVENTS:
            raise BadRequest("server-side apply of events.k8s.io/v1 Events is not supported by sim-cluster")
        mgr = apply.apply_manager(res, req.param("fieldManager"), sub)
        cfg = apply.decode_config(req.body, res, name)
        if res.namespaced and (cfg["metadata"].get("namespace") or ns) != ns:
            raise BadRequest("the namespace of the provided object does not match the namespace sent on the request")
        warnings = _field_validation(req, res, cfg)
        old = self.store.get(res.bucket, ns, name)
        if old is None:
            if sub:
                raise NotFound.object(res.name, name, res.group)
            self._admit_write(req, res, ns, cfg)
            obj = self.create_object(res, ns, apply.created(res, cfg, mgr), dry_run=req.param("dryRun") == "All")
            response = json_response(201, out(res, obj))
        else:
            merged = apply.apply(res, old, cfg, mgr, truthy(req.param("force")))
            response = self.store_update(req, res, name, merged, old, sub, warnings, tracked=False)
        response.headers.extend(warnings if old is None else [])
        return response

    # -- delete ------------------------------------------------------------------------------
    def delete_object(self, res: Resource, ns: str, name: str, policy: str | None = None) -> tuple[Obj, bool]:
        """DELETE one object: (its last state, whether it is gone) — it stays while finalizers remain."""
        if res is NAMESPACES and name in PROTECTED_NAMESPACES:
            raise Forbidden(f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                            {"name": name, "kind": "namespaces"})
        return self.gc.delete(res, must_get(self.store, res, ns, name), policy)

    async def delete(self, req: Request, res: Resource, ns: str, name: str) -> Response:
        old = must_get(self.store, res, ns, name)
        opts = _delete_options(req)
        await self._admit(req, "DELETE", res, ns, name, "", None, old)
        old = must_get(self.store, res, ns, name)
        pre = opts.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
            raise Conflict.object(res.name, name, f"Precondition failed: UID in precondition: {pre['uid']}, "
                                                  f"UID in object meta: {old['metadata']['uid']}", res.group)
        if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
            raise Conflict.object(res.name, name, "Precondition failed: ResourceVersion in precondition: "
                                                  f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                                                  f"{old['metadata']['resourceVersion']}", res.group)
        if req.param("dryRun") == "All" or opts.get("dryRun") == ["All"]:
            return json_response(200, _deleted(res, old, True))
        return json_response(200, _deleted(res, *self.delete_object(res, ns, name, opts["propagationPolicy"])))

    def delete_collection(self, req: Request, res: Resource, namespace: str | None) -> Response:
        if "deletecollection" not in res.verbs:
            raise not_allowed()
        policy = _delete_options(req)["propagationPolicy"]
        label, fields = selectors(req, res)
        items, _, _ = self.store.list(res.bucket, namespace, label, fields)
        deleted = [self.delete_object(res, o["metadata"].get("namespace", ""), o["metadata"]["name"], policy)[0]
                   for o in items]
        return json_response(200, {"kind": f"{res.kind}List", "apiVersion": res.api_version,
                                   "metadata": {"resourceVersion": str(self.store.rv)},
                                   "items": [out(res, o) for o in deleted]})
