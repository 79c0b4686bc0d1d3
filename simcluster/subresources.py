"""The sub-resources that are verbs of their own: scale, pods/binding, pods/eviction.

`status` is the write path's (`writes`, with `sub="status"`); `pods/log` is `podlogs`'; token
requests and access reviews are `reviews`' (the Api's `virtual` handlers). What is here:
GET/PUT/PATCH `.../{name}/scale` (an autoscaling/v1 Scale over the object's replicas, `scale`),
the scheduler's binding (spec.nodeName set once; 409 when bound, PodScheduled=True), and
`kubectl drain`'s eviction (the pod marked DisruptionTarget, then deleted, unless a
PodDisruptionBudget forbids it: 429).
"""

from __future__ import annotations

import copy
from typing import Any

import orjson

from . import disruption, eviction, objects, scale
from .apiwire import Obj, decode_body, json_response, must_get, not_allowed
from .errors import BadRequest, Conflict, Invalid, NotFound, success_status
from .httpserver import Request, Response
from .patch import MERGE, apply_patch
from .resources import EVICTIONS, PDBS, PODS, Resource
from .store import Store
from .writes import Writes, patch_type


class SubResources:
    """The scale, binding and eviction handlers; their writes go through `writes`."""

    def __init__(self, store: Store, writes: Writes) -> None:
        self.store = store
        self.writes = writes

    def scale(self, req: Request, res: Resource, ns: str, name: str) -> Response:
        """GET/PUT/PATCH .../{name}/scale: an autoscaling/v1 Scale (see scale.py)."""
        obj = must_get(self.store, res, ns, name)
        current = scale.to_scale(res, obj)
        if req.method in ("GET", "HEAD"):
            return json_response(200, current)
        if req.method == "PUT":
            body = decode_body(req, res)
        elif req.method == "PATCH":
            body = apply_patch(patch_type(req, res, MERGE), copy.deepcopy(current), decode_body(req, res))
        else:
            raise not_allowed()
        new = scale.scaled(res, obj, body)
        new["metadata"].pop("resourceVersion", None)  # checked against the Scale's, above
        response = self.writes.store_update(req, res, name, new, obj, "", [])
        stored = orjson.loads(response.body)
        return json_response(200, scale.to_scale(res, stored))

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

    def binding(self, req: Request, ns: str, pod_name: str, body: Any) -> Response:
        """The answer to a binding: 201 with a Success Status (nothing bound on `dryRun=All`)."""
        if req.param("dryRun") != "All":
            self.bind(ns, pod_name, body)
        ok = success_status()
        ok["code"] = 201
        return json_response(201, ok)

    def evict(self, req: Request, ns: str, name: str) -> Response:
        """POST pods/{name}/eviction: delete the pod unless a PodDisruptionBudget forbids it (429)."""
        body = eviction.check_body(name, decode_body(req, EVICTIONS))
        pod = must_get(self.store, PODS, ns, name)
        pdb = eviction.may_evict(self.store, pod)
        opts = body.get("deleteOptions") or {}
        if req.param("dryRun") != "All" and opts.get("dryRun") != ["All"]:
            self.store.replace("pods", eviction.with_disruption_target(pod, objects.now_rfc3339()))
            self.writes.delete_object(PODS, ns, name, opts.get("propagationPolicy"))
            if pdb is not None:
                self.store.replace(PDBS.bucket, disruption.with_evicted(pdb, name))
        return json_response(201, eviction.evicted_status())
