"""The gate every request passes before routing: authenticate, impersonate, authorize.

kube-apiserver's filter order: authentication (`authn`: 401 `Unauthorized` when nothing accepts
the request), impersonation (`Impersonate-User`, `Impersonate-Group` (repeated), `Impersonate-Uid`,
`Impersonate-Extra-KEY`: each needs `impersonate` on `users`/`serviceaccounts`/`groups`/`uids`/
`userextras/KEY`, else a 403 worded as for any verb), then authorization (`rbac` in mode RBAC,
everything in AlwaysAllow). The caller's `User` is put on the request for the reviews and the
RBAC escalation checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

from . import rbac
from .authn import ANONYMOUS, SA_GROUP, UNAUTHENTICATED, Authenticator, User
from .errors import InternalError
from .httpserver import Request
from .requestinfo import Attributes, attributes
from .store import Store
from .tokens import SA_PREFIX

MODES = ("AlwaysAllow", "RBAC")
_AUTHN_GROUP = "authentication.k8s.io"


@dataclass
class Access:
    """Authentication (None: off, everyone anonymous) and the authorization mode of one server."""

    store: Store
    authenticator: Authenticator | None = None
    mode: str = "AlwaysAllow"

    def decide(self, user: User, a: Attributes) -> rbac.Decision:
        if self.mode == "RBAC":
            return rbac.authorize(self.store, user, a)
        return rbac.Decision(True)

    def _require(self, user: User, a: Attributes) -> None:
        decision = self.decide(user, a)
        if not decision.allowed:
            raise rbac.denied(user, a, decision.reason)

    def authenticate(self, req: Request) -> User:
        if self.authenticator is None:
            return User(ANONYMOUS, "", (UNAUTHENTICATED,))
        return self.authenticator.authenticate(self.store, req.headers, req.peer_cert)

    def admit(self, req: Request) -> User:
        """The user the request acts as; Unauthorized (401) or Forbidden (403) when it may not."""
        user = self.impersonate(req, self.authenticate(req))
        self._require(user, attributes(req.method, req.path, req.query))
        req.user = user
        return user

    def impersonate(self, req: Request, user: User) -> User:
        name, groups, uid = "", [], ""
        extra: dict[str, list[str]] = {}
        for key, value in req.header_items:
            if key == "impersonate-user":
                name = value
            elif key == "impersonate-group":
                groups.append(value)
            elif key == "impersonate-uid":
                uid = value
            elif key.startswith("impersonate-extra-"):
                extra.setdefault(unquote(key[len("impersonate-extra-"):]), []).append(value)
        if not name:
            if groups or uid or extra:
                raise InternalError("Internal error occurred: requested impersonation of groups, uid or extra "
                                    "without impersonating a user")
            return user
        if name.startswith(SA_PREFIX) and name.count(":") == 3:
            ns, sa = name[len(SA_PREFIX):].split(":", 1)
            self._require(user, Attributes("impersonate", True, ns, "", "", "serviceaccounts", "", sa))
        else:
            self._require(user, Attributes("impersonate", True, "", "", "", "users", "", name))
        for g in groups:
            self._require(user, Attributes("impersonate", True, "", "", "", "groups", "", g))
        if uid:
            self._require(user, Attributes("impersonate", True, "", _AUTHN_GROUP, "", "uids", "", uid))
        for key, values in extra.items():
            for v in values:
                self._require(user, Attributes("impersonate", True, "", _AUTHN_GROUP, "", "userextras", key, v))
        if name.startswith(SA_PREFIX) and not groups:
            ns = name[len(SA_PREFIX):].split(":", 1)[0]
            groups = [SA_GROUP, f"{SA_GROUP}:{ns}"]
        if name == ANONYMOUS:
            groups.append(UNAUTHENTICATED)
        return User(name, uid, tuple(groups), {k: tuple(v) for k, v in extra.items()}).authenticated()
