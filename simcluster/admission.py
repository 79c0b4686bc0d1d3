"""The admission chain of dynamic webhooks, in kube-apiserver's order: the matching mutating
webhooks one after another (each sees the previous one's patch), then the object's own validation
(defaults, 422s), then the matching validating webhooks in parallel.

A webhook matches a request when a rule names its operation, group, version, resource (with
sub-resource: `pods/status`, `pods/*`, `*/status`, `*/*`; `*` is every main resource) and scope;
its `namespaceSelector` matches the namespace's labels (a Namespace's own labels; ignored for other
cluster-scoped kinds) and its `objectSelector` the object's or the old object's labels.
`matchPolicy: Equivalent` also matches a rule naming the same group and resource at another version
(the review's `kind`/`resource` then name the rule's version, `requestKind`/`requestResource` the
served one; the object is sent as served: sim-cluster serves one version of each kind).

Outcomes, worded as kube-apiserver words them: `allowed: false` → the webhook's `status` with
`admission webhook "NAME" denied the request: MESSAGE` (code from `status.code`, at least 400); a
call that fails, times out or answers garbage → `failurePolicy`: Ignore goes on, Fail is a 500
`Internal error occurred: failed calling webhook "NAME": ...`; a dry-run request reaching a webhook
whose `sideEffects` is not None/NoneOnDryRun → 400 `admission webhook "NAME" does not support dry
run`. Writes to the webhook configurations themselves are never sent to webhooks (as upstream).
`reinvocationPolicy: IfNeeded` is accepted and stored; a webhook is never called twice.
"""

from __future__ import annotations

import base64
import copy
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jsonpatch
import orjson
import trio

from . import webhookcall
from .disruption import selector_matches
from .errors import ApiError, BadRequest, InternalError
from .resources import MUTATING_WEBHOOKS, NAMESPACES, VALIDATING_WEBHOOKS, Resource
from .store import Store

Obj = dict[str, Any]
ANONYMOUS = {"username": "system:anonymous", "groups": ["system:unauthenticated"]}
_SYSTEM_META = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")


def user_info(req: Any) -> Obj:
    """The AdmissionReview's `userInfo`: the authenticated caller when authentication has put one
    on the request (`req.user.info()`), else the anonymous user sim-cluster serves everyone as."""
    user = getattr(req, "user", None)
    return user.info() if user is not None and hasattr(user, "info") else dict(ANONYMOUS)


@dataclass(frozen=True)
class Attributes:
    """What a webhook's rules are matched against and its AdmissionReview request is built from."""

    operation: str  # CREATE, UPDATE, DELETE, CONNECT
    res: Resource
    sub: str
    namespace: str
    name: str
    dry_run: bool
    user: Obj
    options: Obj | None = None


_OPTIONS_KIND = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}


def attributes(req: Any, op: str, res: Resource, sub: str, namespace: str, name: str) -> Attributes:
    """A served request's attributes (its `dryRun`, `fieldManager` and user)."""
    dry = req.param("dryRun") == "All"
    options: Obj = {"kind": _OPTIONS_KIND.get(op, ""), "apiVersion": "meta.k8s.io/v1"}
    if dry:
        options["dryRun"] = ["All"]
    if req.param("fieldManager") and op != "DELETE":
        options["fieldManager"] = req.param("fieldManager")
    return Attributes(op, res, sub, namespace if res.namespaced else "", name, dry, user_info(req), options)


class Denied(ApiError):
    """A webhook's `allowed: false`, with its Status (code and reason as the webhook gave them)."""

    def __init__(self, name: str, result: Any) -> None:
        result = dict(result) if isinstance(result, dict) else {}
        code = result.get("code") if isinstance(result.get("code"), int) else 0
        self.code = max(int(code), 400)
        self.reason = str(result.get("reason") or "")
        denied = f'admission webhook "{name}" denied the request'
        message = result.get("message") or result.get("reason")
        super().__init__(f"{denied}: {message}" if message else f"{denied} without explanation",
                         result.get("details") if isinstance(result.get("details"), dict) else None)


def _rule_matches(rule: Obj, a: Attributes, version: str) -> bool:
    if not ({"*", a.operation} & set(rule.get("operations") or [])):
        return False
    if not ({"*", a.res.group} & set(rule.get("apiGroups") or [])):
        return False
    if not ({"*", version} & set(rule.get("apiVersions") or [])):
        return False
    scope = rule.get("scope", "*")
    if scope != "*" and (scope == "Namespaced") != a.res.namespaced:
        return False
    wanted = f"{a.res.name}/{a.sub}" if a.sub else a.res.name
    for r in rule.get("resources") or []:
        head, _, tail = str(r).partition("/")
        if r == wanted or r == "*/*" or (r == "*" and not a.sub):
            return True
        if tail and (head in ("*", a.res.name)) and (tail == "*" or tail == a.sub):
            return True
    return False


def _matched_version(hook: Obj, a: Attributes) -> str | None:
    """The version the request reaches this webhook as, or None: the served one (Exact), else
    (Equivalent) a rule's other version of the same group and resource."""
    rules = hook.get("rules") or []
    if any(_rule_matches(r, a, a.res.version) for r in rules):
        return a.res.version
    if hook.get("matchPolicy") != "Equivalent":
        return None
    for rule in rules:
        for version in rule.get("apiVersions") or []:
            if version != "*" and _rule_matches(rule, a, version):
                return str(version)
    return None


def _labels(obj: Obj | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


class Admission:
    """The webhook chain of one server; `Api` calls `admit` around each write it serves."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _hooks(self, res: Resource) -> list[Obj]:
        if not self.store.count(res.bucket):
            return []
        return [dict(h, _config=c["metadata"]["name"]) for c in self.store.list(res.bucket)[0]
                for h in c.get("webhooks") or []]

    def _namespace_matches(self, hook: Obj, a: Attributes, obj: Obj | None) -> bool:
        selector = hook.get("namespaceSelector") or {}
        if a.res is NAMESPACES:
            return selector_matches(selector, _labels(obj))
        if not a.res.namespaced:
            return True
        ns = self.store.get(NAMESPACES.bucket, "", a.namespace)
        return selector_matches(selector, _labels(ns))

    def _matching(self, kind: Resource, a: Attributes, obj: Obj | None, old: Obj | None) -> list[tuple[Obj, str]]:
        if a.res in (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS):
            return []
        out = []
        for hook in self._hooks(kind):
            version = _matched_version(hook, a)
            if version is None or not self._namespace_matches(hook, a, obj or old):
                continue
            selector = hook.get("objectSelector") or {}
            if not any(selector_matches(selector, _labels(o)) for o in [o for o in (obj, old) if o] or [{}]):
                continue
            if a.dry_run and hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
                raise BadRequest(f'admission webhook "{hook["name"]}" does not support dry run')
            out.append((hook, version))
        return out

    def review(self, a: Attributes, version: str, obj: Obj | None, old: Obj | None) -> Obj:
        """The AdmissionReview v1 request sent to one webhook."""
        res = a.res
        served_gvk = {"group": res.group, "version": res.version, "kind": res.kind}
        served_gvr = {"group": res.group, "version": res.version, "resource": res.name}
        request: Obj = {
            "uid": str(uuid.uuid4()), "kind": {**served_gvk, "version": version},
            "resource": {**served_gvr, "version": version}, "requestKind": served_gvk,
            "requestResource": served_gvr, "name": a.name, "operation": a.operation, "userInfo": a.user,
            "object": obj, "oldObject": old, "dryRun": a.dry_run, "options": a.options,
        }
        if a.sub:
            request["subResource"] = a.sub
            request["requestSubResource"] = a.sub
        if res.namespaced:
            request["namespace"] = a.namespace
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}

    async def _call(self, hook: Obj, review: Obj) -> Obj | None:
        """The webhook's `response`, or None when it failed and its failurePolicy is Ignore."""
        name = hook["name"]
        try:
            answer = await webhookcall.post(self.store, hook.get("clientConfig") or {}, orjson.dumps(review),
                                            int(hook.get("timeoutSeconds") or 10))
            response = _verified(answer, review["request"]["uid"])
        except webhookcall.CallError as exc:
            if hook.get("failurePolicy") == "Ignore":
                return None
            message = f'failed calling webhook "{name}": {exc}'
            raise InternalError(f"Internal error occurred: {message}", {"causes": [{"message": message}]}) from None
        if not response.get("allowed"):
            raise Denied(name, response.get("status"))
        return response

    async def _mutate(self, a: Attributes, obj: Obj | None, old: Obj | None) -> Obj | None:
        for hook, version in self._matching(MUTATING_WEBHOOKS, a, obj, old):
            response = await self._call(hook, self.review(a, version, obj, old))
            if response is None or not response.get("patch") or obj is None:
                continue
            obj = _patched(hook["name"], obj, response)
        return obj

    async def _validate(self, a: Attributes, obj: Obj | None, old: Obj | None) -> None:
        errors: list[ApiError] = []

        async def one(hook: Obj, version: str) -> None:
            try:
                await self._call(hook, self.review(a, version, obj, old))
            except ApiError as exc:
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            for hook, version in self._matching(VALIDATING_WEBHOOKS, a, obj, old):
                nursery.start_soon(one, hook, version)
        if errors:
            raise errors[0]

    def active(self) -> bool:
        """Whether any webhook is configured (none: every write skips the chain)."""
        return bool(self.store.count(MUTATING_WEBHOOKS.bucket) or self.store.count(VALIDATING_WEBHOOKS.bucket))

    async def admit(self, a: Attributes, obj: Obj | None, old: Obj | None,
                    check: Callable[[Obj], Obj]) -> Obj | None:
        """Run the chain for a write of `obj` (None for DELETE) over `old` (None for CREATE);
        `check(obj)` is the object's own validation, returning the object as it would be stored.
        Returns the (possibly mutated) object to store."""
        if not self.active():
            return obj
        obj = await self._mutate(a, obj, old)
        final = check(obj) if obj is not None else None
        await self._validate(a, final, old)
        return obj


def defaulted(check: Callable[[Obj], Obj], body: Obj) -> Obj:
    """What a CREATE's mutating webhooks see: the body with the kind's defaults when it validates
    (kube-apiserver defaults while decoding), without the metadata storage adds later."""
    try:
        out = check(copy.deepcopy(body))
    except ApiError:
        return body
    meta = out["metadata"]
    for key in _SYSTEM_META:
        meta.pop(key, None)
    if (body.get("metadata") or {}).get("generateName") and not (body.get("metadata") or {}).get("name"):
        meta.pop("name", None)
    return out


def _verified(answer: Any, uid: str) -> Obj:
    """The `response` of a webhook's answer, checked as kube-apiserver's VerifyAdmissionResponse."""
    if not isinstance(answer, dict) or answer.get("kind") != "AdmissionReview" \
            or answer.get("apiVersion") != "admission.k8s.io/v1":
        got = f"{answer.get('apiVersion')}, Kind={answer.get('kind')}" if isinstance(answer, dict) else "garbage"
        raise webhookcall.CallError("received invalid webhook response: expected webhook response of "
                                    f"admission.k8s.io/v1, Kind=AdmissionReview, got {got}")
    response = answer.get("response")
    if not isinstance(response, dict):
        raise webhookcall.CallError("received invalid webhook response: webhook response was absent")
    if response.get("uid") != uid:
        got = "" if response.get("uid") is None else response.get("uid")  # Go's zero string
        raise webhookcall.CallError(f'received invalid webhook response: expected response.uid="{uid}", '
                                    f'got "{got}"')
    if response.get("patch") and response.get("patchType") != "JSONPatch":
        raise webhookcall.CallError("received invalid webhook response: webhook returned response.patch but not "
                                    "response.patchType")
    return response


def _patched(name: str, obj: Obj, response: Obj) -> Obj:
    try:
        ops = orjson.loads(base64.b64decode(response["patch"]))
        return jsonpatch.JsonPatch(ops).apply(obj)
    except Exception as exc:  # any garbage in the patch: the apiserver's internal error
        raise InternalError(f'Internal error occurred: admission webhook "{name}" returned an invalid patch: '
                            f"{exc}") from None
