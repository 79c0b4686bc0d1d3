"""The create-only review APIs and the TokenRequest sub-resource, answered from `access` and `rbac`.

- authorization.k8s.io/v1 `SelfSubjectAccessReview` (`kubectl auth can-i VERB RES`),
  `SubjectAccessReview`, `LocalSubjectAccessReview` (namespaced; its spec's namespace must match):
  `status.allowed`, and the RBAC reason (`RBAC: allowed by ClusterRoleBinding ...`);
- `SelfSubjectRulesReview` (`kubectl auth can-i --list`): the rules the caller holds in
  `spec.namespace`, `incomplete: false`, resolution errors in `evaluationError`;
- authentication.k8s.io/v1 `SelfSubjectReview` (`kubectl auth whoami`) and `TokenReview`;
- `POST serviceaccounts/NAME/token` (`kubectl create token NAME [--duration D]
  [--bound-object-kind Pod --bound-object-name P]`): a signed JWT (`tokens`), 10 minutes at least,
  one hour by default, bound to a Pod or Secret when asked. Without a signing key (authentication
  off) the sub-resource is not served (404), as on a kube-apiserver without one.

Each answer is the request object with `status` filled in (HTTP 201), as kube-apiserver returns it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric import rsa

from . import rbac, tokens
from .access import Access
from .authn import SaTokens, User
from .errors import BadRequest, Conflict, Invalid, NotFound, Unauthorized
from .httpserver import Request
from .requestinfo import Attributes
from .resources import PODS, SECRETS, SERVICEACCOUNTS
from .store import Store

Obj = dict[str, Any]
Handler = Callable[[Request, str, str, Any], Obj]
_AUTHZ, _AUTHN = "authorization.k8s.io/v1", "authentication.k8s.io/v1"


@dataclass
class Issuer:
    """How TokenRequests are signed: the private key, `iss` and the default audiences."""

    key: rsa.RSAPrivateKey
    issuer: str = tokens.DEFAULT_ISSUER
    audiences: tuple[str, ...] = ()
    max_seconds: int = 0  # --service-account-max-token-expiration (0: none)


def _attributes(spec: Obj, kind: str) -> Attributes:
    res, non = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if (res is None) == (non is None):
        raise Invalid.fields(f"{kind}.authorization.k8s.io", "", [("FieldValueInvalid", "spec.resourceAttributes",
                                         "Invalid value: exactly one of nonResourceAttributes or resourceAttributes "
                                         "must be specified")], "authorization.k8s.io")
    if non is not None:
        return Attributes(str(non.get("verb") or ""), False, path=str(non.get("path") or ""))
    return Attributes(str(res.get("verb") or ""), True, str(res.get("namespace") or ""), str(res.get("group") or ""),
                      str(res.get("version") or ""), str(res.get("resource") or ""),
                      str(res.get("subresource") or ""), str(res.get("name") or ""))


def _bad_expiration(name: str, seconds: Any, why: str) -> Invalid:
    return Invalid.fields("TokenRequest.authentication.k8s.io", name, [
        ("FieldValueInvalid", "spec.expirationSeconds", f"Invalid value: {seconds}: {why}")], "authentication.k8s.io")


def _answer(body: Obj, status: Obj) -> Obj:
    meta = dict(body.get("metadata") or {})
    meta.setdefault("creationTimestamp", None)
    return {**body, "metadata": meta, "status": status}


@dataclass
class Reviews:
    """The handlers, by (group, resource[/sub]), for `Api.virtual`."""

    store: Store
    access: Access
    issuer: Issuer | None = None
    sa: SaTokens | None = None

    def handlers(self) -> dict[tuple[str, str], Handler]:
        return {("authorization.k8s.io", "selfsubjectaccessreviews"): self.self_access,
                ("authorization.k8s.io", "subjectaccessreviews"): self.subject_access,
                ("authorization.k8s.io", "localsubjectaccessreviews"): self.local_access,
                ("authorization.k8s.io", "selfsubjectrulesreviews"): self.self_rules,
                ("authentication.k8s.io", "selfsubjectreviews"): self.self_subject,
                ("authentication.k8s.io", "tokenreviews"): self.token_review,
                ("", "serviceaccounts/token"): self.token_request}

    def _user(self, req: Request) -> User:
        return req.user if req.user is not None else self.access.authenticate(req)

    def _decision(self, user: User, a: Attributes) -> Obj:
        d = self.access.decide(user, a)
        out: Obj = {"allowed": d.allowed}
        if d.reason:
            out["reason"] = d.reason
        return out

    def self_access(self, req: Request, ns: str, name: str, body: Obj) -> Obj:
        spec = body.get("spec") or {}
        return _answer(body, self._decision(self._user(req), _attributes(spec, "SelfSubjectAccessReview")))

    def subject_access(self, req: Request, ns: str, name: str, body: Obj, kind: str = "SubjectAccessReview") -> Obj:
        spec = body.get("spec") or {}
        if not spec.get("user") and not spec.get("groups"):
            raise Invalid.fields(f"{kind}.authorization.k8s.io", "", [("FieldValueInvalid", "spec.user",
                                             'Invalid value: "": at least one of user or group must be specified')],
                                 "authorization.k8s.io")
        extra = {k: tuple(v) for k, v in (spec.get("extra") or {}).items()}
        user = User(str(spec.get("user") or ""), str(spec.get("uid") or ""), tuple(spec.get("groups") or ()), extra)
        return _answer(body, self._decision(user, _attributes(spec, kind)))

    def local_access(self, req: Request, ns: str, name: str, body: Obj) -> Obj:
        attrs = (body.get("spec") or {}).get("resourceAttributes") or {}
        if attrs.get("namespace", ns) != ns:
            raise BadRequest(f"spec.resourceAttributes.namespace must match metadata.namespace: "
                             f"{attrs.get('namespace')!r} != {ns!r}")
        return self.subject_access(req, ns, name, body, "LocalSubjectAccessReview")

    def self_rules(self, req: Request, ns: str, name: str, body: Obj) -> Obj:
        spec = body.get("spec") or {}
        namespace = str(spec.get("namespace") or "")
        if self.access.mode != "RBAC":
            rules, errors = rbac.FULL_AUTHORITY, []
        else:
            rules, errors = rbac.rules_for(self.store, self._user(req), namespace)
        status: Obj = {"resourceRules": [r.to_api() for r in rules if not r.non_resource_urls],
                       "nonResourceRules": [{"verbs": list(r.verbs), "nonResourceURLs": list(r.non_resource_urls)}
                                            for r in rules if r.non_resource_urls],
                       "incomplete": False}
        for rr in status["resourceRules"]:
            rr.setdefault("apiGroups", [])
        if errors:
            status["evaluationError"] = "[" + ", ".join(errors) + "]"
        return _answer(body, status)

    def self_subject(self, req: Request, ns: str, name: str, body: Obj) -> Obj:
        return _answer(body, {"userInfo": self._user(req).info()})

    def token_review(self, req: Request, ns: str, name: str, body: Obj) -> Obj:
        token = str((body.get("spec") or {}).get("token") or "")
        auth = self.access.authenticator
        try:
            if auth is None or not token:
                raise Unauthorized()
            user = auth.authenticate(self.store, {"authorization": f"Bearer {token}"}, None)
        except Unauthorized:
            return _answer(body, {"user": {}, "error": "[invalid bearer token, token lookup failed]"})
        return _answer(body, {"authenticated": True, "user": user.info(),
                              "audiences": list((body.get("spec") or {}).get("audiences") or ())})

    # -- TokenRequest ------------------------------------------------------------------------
    def token_request(self, req: Request, ns: str, name: str, body: Obj) -> Obj:
        if self.issuer is None:
            raise NotFound.path()
        sa = self.store.get(SERVICEACCOUNTS.bucket, ns, name)
        if sa is None:
            raise NotFound.object("serviceaccounts", name)
        spec = dict(body.get("spec") or {})
        seconds = spec.get("expirationSeconds")
        seconds = tokens.DEFAULT_EXPIRATION if seconds is None else seconds
        if not isinstance(seconds, int) or seconds < tokens.MIN_EXPIRATION:
            raise _bad_expiration(name, seconds, "may not specify a duration less than 10 minutes")
        if seconds > 1 << 32:
            raise _bad_expiration(name, seconds, "may not specify a duration larger than 2^32 seconds")
        if self.issuer.max_seconds:
            seconds = min(seconds, self.issuer.max_seconds)
        audiences = list(spec.get("audiences") or self.issuer.audiences or (self.issuer.issuer,))
        bound = self._bound(ns, spec.get("boundObjectRef"))
        now = time.time()
        claims = tokens.claims_for(self.issuer.issuer, audiences, ns, sa, seconds, bound, now)
        spec.update(audiences=audiences, expirationSeconds=seconds)
        if bound is not None:
            spec["boundObjectRef"] = {**spec["boundObjectRef"], "uid": bound.uid}
        out = {"kind": "TokenRequest", "apiVersion": _AUTHN,
               "metadata": {"name": name, "namespace": ns, "creationTimestamp": None}, "spec": spec,
               "status": {"token": tokens.sign(claims, self.issuer.key),
                          "expirationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(claims["exp"]))}}
        return out

    def _bound(self, ns: str, ref: Any) -> tokens.Bound | None:
        if not ref:
            return None
        kind, name = str(ref.get("kind") or ""), str(ref.get("name") or "")
        res = {"Pod": PODS, "Secret": SECRETS}.get(kind)
        if res is None:
            raise BadRequest(f'cannot bind token for object of type "{kind}": only Pod and Secret are supported')
        obj = self.store.get(res.bucket, ns, name)
        if obj is None:
            raise NotFound.object(res.name, name)
        uid = obj["metadata"]["uid"]
        if ref.get("uid") and ref["uid"] != uid:
            raise Conflict(f"the UID in the bound object reference ({ref['uid']}) does not match the UID in record. "
                           "The object might have been deleted and then recreated")
        return tokens.Bound(kind, name, uid)

