"""Authentication, as kube-apiserver's authenticators do it: who is calling.

In kube-apiserver's order, the first that recognises the request wins:

1. a client certificate verified against `--client-ca-file` (the TLS layer verifies the chain):
   user = CN, groups = O;
2. a bearer token from `--token-auth-file` (CSV `token,user,uid,"group1,group2"`);
3. a bearer token that is a ServiceAccount JWT (`tokens`): user `system:serviceaccount:NS:NAME`,
   groups `system:serviceaccounts`, `system:serviceaccounts:NS`, extra `authentication.kubernetes.io/
   credential-id` and the bound pod's name/uid;

then every authenticated user is also in `system:authenticated`. A bearer token none of them
accepts is a 401, even if a certificate was also sent and failed; no credentials at all are a 401
unless `--anonymous-auth` (then `system:anonymous`, group `system:unauthenticated`).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from typing import Any

from . import tokens
from .errors import Unauthorized
from .resources import PODS, SECRETS, SERVICEACCOUNTS
from .store import Store

AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"
SA_GROUP = "system:serviceaccounts"
MASTERS = "system:masters"


@dataclass(frozen=True)
class User:
    """user.Info: name, uid, groups and extra (values are lists, as in the API)."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, tuple[str, ...]] = field(default_factory=dict, hash=False, compare=False)

    def info(self) -> dict[str, Any]:
        """The `UserInfo` of reviews (SelfSubjectReview, SubjectAccessReview)."""
        out: dict[str, Any] = {"username": self.name}
        if self.uid:
            out["uid"] = self.uid
        if self.groups:
            out["groups"] = list(self.groups)
        if self.extra:
            out["extra"] = {k: list(v) for k, v in self.extra.items()}
        return out

    def authenticated(self) -> User:
        """The same user with `system:authenticated` added (not to system:anonymous)."""
        if self.name == ANONYMOUS or AUTHENTICATED in self.groups:
            return self
        return User(self.name, self.uid, (*self.groups, AUTHENTICATED), self.extra)


def service_account_user(namespace: str, name: str, uid: str = "", extra: dict | None = None) -> User:
    return User(f"{tokens.SA_PREFIX}{namespace}:{name}", uid, (SA_GROUP, f"{SA_GROUP}:{namespace}"), extra or {})


class TokenFileError(Exception):
    """A malformed `--token-auth-file`; the message names the file and line."""


def load_token_file(path: str) -> dict[str, User]:
    """kube-apiserver's static token CSV: `token,user,uid[,"group1,group2"]` per line."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            rows = list(enumerate(csv.reader(f, skipinitialspace=True), start=1))
    except OSError as exc:
        raise TokenFileError(f"token file '{path}': {exc.strerror}") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise TokenFileError(f"token file '{path}': not CSV: {exc}") from None
    users: dict[str, User] = {}
    for line, row in rows:
        if not row:
            continue
        if len(row) < 3:
            raise TokenFileError(f"token file '{path}' must have at least 3 columns (token, user name, user uid), "
                                 f"found {len(row)} (line {line})")
        if not row[0]:
            continue  # kube-apiserver warns and skips an empty token
        groups = tuple(g for g in row[3].split(",")) if len(row) >= 4 else ()
        users[row[0]] = User(row[1], row[2], groups)
    return users


@dataclass
class SaTokens:
    """What validates ServiceAccount JWTs: the public keys, the issuer and the API audiences."""

    keys: list[Any]
    issuer: str = tokens.DEFAULT_ISSUER
    audiences: tuple[str, ...] = ()

    def user(self, store: Store, token: str) -> User:
        claims = tokens.verify(token, self.keys, self.issuer, self.audiences or (self.issuer,))
        private = claims.get("kubernetes.io") or {}
        ns = str(private.get("namespace") or "")
        sa = private.get("serviceaccount") or {}
        stored = store.get(SERVICEACCOUNTS.bucket, ns, str(sa.get("name") or ""))
        if stored is None or stored["metadata"]["uid"] != sa.get("uid") or stored["metadata"].get("deletionTimestamp"):
            raise tokens.TokenError("service account deleted")
        extra: dict[str, tuple[str, ...]] = {"authentication.kubernetes.io/credential-id": (f"JTI={claims['jti']}",)}
        for res, key in ((PODS, "pod"), (SECRETS, "secret")):
            ref = private.get(key)
            if ref:
                obj = store.get(res.bucket, ns, str(ref.get("name") or ""))
                if obj is None or obj["metadata"]["uid"] != ref.get("uid"):
                    raise tokens.TokenError(f"bound {key} deleted")
                if key == "pod":
                    extra["authentication.kubernetes.io/pod-name"] = (ref["name"],)
                    extra["authentication.kubernetes.io/pod-uid"] = (ref["uid"],)
        return service_account_user(ns, stored["metadata"]["name"], stored["metadata"]["uid"], extra)


@dataclass
class Authenticator:
    """The chain of authenticators `--token-auth-file`, `--client-ca-file` and the SA keys configure."""

    static_tokens: dict[str, User] = field(default_factory=dict)
    client_certs: bool = False
    sa: SaTokens | None = None
    anonymous: bool = False

    def authenticate(self, store: Store, headers: dict[str, str], peer_cert: dict | None) -> User:
        """The caller, with `system:authenticated`; Unauthorized when nothing accepts the request."""
        user = self._cert_user(peer_cert) if self.client_certs else None
        auth = headers.get("authorization", "")
        scheme, _, token = auth.partition(" ")
        token = token.strip()
        if user is None and scheme.lower() == "bearer" and token:
            user = self._token_user(store, token)
        if user is not None:
            return user.authenticated()
        if auth or not self.anonymous:
            raise Unauthorized()
        return User(ANONYMOUS, "", (UNAUTHENTICATED,))

    @staticmethod
    def _cert_user(peer_cert: dict | None) -> User | None:
        if not peer_cert:
            return None
        cn, orgs = "", []
        for rdn in peer_cert.get("subject", ()):
            for key, value in rdn:
                if key == "commonName":
                    cn = value
                elif key == "organizationName":
                    orgs.append(value)
        return User(cn, "", tuple(orgs)) if cn else None

    def _token_user(self, store: Store, token: str) -> User:
        if token in self.static_tokens:
            return self.static_tokens[token]
        if self.sa is not None:
            try:
                return self.sa.user(store, token)
            except tokens.TokenError:
                pass
        raise Unauthorized()
