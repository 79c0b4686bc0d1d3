"""Authorization by RBAC (`--authorization-mode RBAC`), as kube-apiserver's RBAC authorizer decides.

- **Rules come from bindings**: every ClusterRoleBinding whose subjects include the user, and every
  RoleBinding in the request's namespace; a binding's roleRef names a Role (same namespace) or a
  ClusterRole. Subjects: `User` (name), `Group` (one of the user's groups), `ServiceAccount`
  (`system:serviceaccount:NS:NAME`, NS defaulting to the RoleBinding's). A roleRef to a missing
  role adds `RBAC: clusterrole.rbac.authorization.k8s.io "x" not found` to a denial's message.
- **A rule matches** when its verbs (`*`), apiGroups (`*`), resources (`*`, `res`, `res/sub`,
  `*/sub`) and resourceNames (empty = all; otherwise the request must name one) match, or for a
  non-resource request its nonResourceURLs (`/healthz`, or a prefix ending in `*`) and verb.
- **`system:masters`** is allowed everything before RBAC is asked (kube-apiserver's privileged group).
- **Denials** are 403 Forbidden worded as kube-apiserver words them (`forbidden`).
- **Escalation prevention** (`check_escalation`): creating or updating a Role/ClusterRole needs
  `escalate` on it or every permission it grants; a RoleBinding/ClusterRoleBinding needs `bind`
  on the referenced role or every permission the role grants; an `aggregationRule` needs `*` on
  `*.*`. The 403 lists what is missing, kube's way (`{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}`).
- **Aggregation**: a ClusterRole with an `aggregationRule` gets the rules of the ClusterRoles its
  selectors match (`Aggregator`, the clusterrole-aggregation controller), so `admin`/`edit`/`view`
  are built as upstream builds them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import trio

from .authn import MASTERS, User
from .disruption import selector_matches
from .errors import Forbidden
from .requestinfo import Attributes
from .resources import CLUSTERROLEBINDINGS, CLUSTERROLES, ROLEBINDINGS, ROLES
from .store import Store

Obj = dict[str, Any]
GROUP = "rbac.authorization.k8s.io"


@dataclass(frozen=True)
class Rule:
    """A PolicyRule, as tuples."""

    verbs: tuple[str, ...] = ()
    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    @classmethod
    def of(cls, raw: Any) -> Rule:
        raw = raw if isinstance(raw, dict) else {}

        def t(key: str) -> tuple[str, ...]:
            v = raw.get(key) or ()
            return tuple(str(x) for x in v) if isinstance(v, list) else ()

        return cls(t("verbs"), t("apiGroups"), t("resources"), t("resourceNames"), t("nonResourceURLs"))

    def to_api(self) -> Obj:
        out: Obj = {"verbs": list(self.verbs)}
        for key, value in (("apiGroups", self.api_groups), ("resources", self.resources),
                           ("resourceNames", self.resource_names), ("nonResourceURLs", self.non_resource_urls)):
            if value:
                out[key] = list(value)
        return out

    def matches(self, a: Attributes) -> bool:
        if "*" not in self.verbs and a.verb not in self.verbs:
            return False
        if not a.resource_request:
            return any(u == "*" or u == a.path or (u.endswith("*") and a.path.startswith(u[:-1]))
                       for u in self.non_resource_urls)
        if "*" not in self.api_groups and a.api_group not in self.api_groups:
            return False
        combined = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
        if not any(r == "*" or r == combined or (a.subresource and r == f"*/{a.subresource}")
                   for r in self.resources):
            return False
        return not self.resource_names or (bool(a.name) and a.name in self.resource_names)

    def compact(self) -> str:
        """kube's CompactString: `{APIGroups:[""], Resources:["pods"], Verbs:["get"]}`."""
        parts = [f"{label}:{go_quote(value)}" for label, value in (
            ("APIGroups", self.api_groups), ("Resources", self.resources), ("NonResourceURLs", self.non_resource_urls),
            ("ResourceNames", self.resource_names), ("Verbs", self.verbs)) if value]
        return "{" + ", ".join(parts) + "}"


def go_quote(values: tuple[str, ...] | list[str]) -> str:
    """Go's `%q` of a []string: `["a" "b"]`."""
    return "[" + " ".join(json.dumps(v) for v in values) + "]"


def rules_of(obj: Obj | None) -> list[Rule]:
    return [Rule.of(r) for r in (obj or {}).get("rules") or []]


# -- which rules apply to a user ------------------------------------------------------------------

def _subject_matches(subject: Any, user: User, binding_ns: str) -> bool:
    if not isinstance(subject, dict):
        return False
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return name == user.name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or binding_ns
        return user.name == f"system:serviceaccount:{ns}:{name}"
    return False


def _describe_subject(subject: Obj, binding_ns: str) -> str:
    if subject.get("kind") == "ServiceAccount":
        return f'ServiceAccount "{subject.get("name")}/{subject.get("namespace") or binding_ns}"'
    return f'{subject.get("kind")} "{subject.get("name")}"'


@dataclass
class Source:
    """Where rules came from: a binding, its role, the subject that matched (the allowed reason)."""

    binding: Obj
    role: Obj | None
    subject: Obj
    error: str = ""

    def describe(self) -> str:
        meta, ref = self.binding["metadata"], self.binding.get("roleRef") or {}
        ns = meta.get("namespace", "")
        if ns:
            return (f'RoleBinding "{meta["name"]}/{ns}" of {ref.get("kind")} "{ref.get("name")}" to '
                    f'{_describe_subject(self.subject, ns)}')
        return (f'ClusterRoleBinding "{meta["name"]}" of {ref.get("kind")} "{ref.get("name")}" to '
                f'{_describe_subject(self.subject, "")}')


def _role_for(store: Store, binding: Obj) -> tuple[Obj | None, str]:
    ref = binding.get("roleRef") or {}
    ns = binding["metadata"].get("namespace", "")
    if ref.get("kind") == "Role":
        role = store.get(ROLES.bucket, ns, str(ref.get("name") or ""))
        return role, "" if role else f'role.{GROUP} "{ref.get("name")}" not found'
    role = store.get(CLUSTERROLES.bucket, "", str(ref.get("name") or ""))
    return role, "" if role else f'clusterrole.{GROUP} "{ref.get("name")}" not found'


def sources(store: Store, user: User, namespace: str) -> Iterator[Source]:
    """Bindings that apply to `user` in `namespace` (cluster-wide ones first), with their roles."""
    bindings = list(store.list(CLUSTERROLEBINDINGS.bucket)[0])
    if namespace:
        bindings += store.list(ROLEBINDINGS.bucket, namespace)[0]
    for binding in bindings:
        ns = binding["metadata"].get("namespace", "")
        for subject in binding.get("subjects") or []:
            if _subject_matches(subject, user, ns):
                role, error = _role_for(store, binding)
                yield Source(binding, role, subject, error)
                break


@dataclass
class Decision:
    allowed: bool
    reason: str = ""


def authorize(store: Store, user: User, a: Attributes) -> Decision:
    """RBAC's answer for one request (system:masters first, as kube-apiserver's privileged group)."""
    if MASTERS in user.groups:
        return Decision(True)
    errors: list[str] = []
    for src in sources(store, user, a.namespace if a.resource_request else ""):
        if src.error:
            errors.append(src.error)
            continue
        if any(rule.matches(a) for rule in rules_of(src.role)):
            return Decision(True, f"RBAC: allowed by {src.describe()}")
    if not errors:
        return Decision(False)
    return Decision(False, "RBAC: " + (errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"))


def forbidden_message(user: User, a: Attributes) -> str:
    """kube-apiserver's `forbiddenMessage`."""
    if not a.resource_request:
        return f'User "{user.name}" cannot {a.verb} path "{a.path}"'
    resource = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
    where = f'in the namespace "{a.namespace}"' if a.namespace else "at the cluster scope"
    return f'User "{user.name}" cannot {a.verb} resource "{resource}" in API group "{a.api_group}" {where}'


def forbidden(resource: str, group: str, name: str, why: str) -> Forbidden:
    """apierrors.NewForbidden: `pods "x" is forbidden: why` (or `forbidden: why` without a resource)."""
    qualified = f"{resource}.{group}" if group else resource
    details: Obj = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    if resource:
        details["kind"] = resource
    if not qualified:
        return Forbidden(f"forbidden: {why}", details or None)
    return Forbidden(f'{qualified} "{name}" is forbidden: {why}' if name else f"{qualified} is forbidden: {why}",
                     details or None)


def denied(user: User, a: Attributes, reason: str) -> Forbidden:
    msg = forbidden_message(user, a)
    return forbidden(a.resource if a.resource_request else "", a.api_group, a.name,
                     f"{msg}: {reason}" if reason else msg)


# -- what a user may do in a namespace (SelfSubjectRulesReview, escalation checks) ----------------

def rules_for(store: Store, user: User, namespace: str) -> tuple[list[Rule], list[str]]:
    """Every rule `user` holds in `namespace` ("" = cluster-wide only), and the resolution errors."""
    if MASTERS in user.groups:
        return [Rule(("*",), ("*",), ("*",)), Rule(("*",), non_resource_urls=("*",))], []
    rules: list[Rule] = []
    errors: list[str] = []
    for src in sources(store, user, namespace):
        if src.error:
            errors.append(src.error)
        rules.extend(rules_of(src.role))
    return rules, errors


def _atoms(rule: Rule) -> Iterator[Rule]:
    """kube's BreakdownRule: one verb on one resource (and name) or one URL per rule."""
    for group in rule.api_groups:
        for resource in rule.resources:
            for verb in rule.verbs:
                if rule.resource_names:
                    for name in rule.resource_names:
                        yield Rule((verb,), (group,), (resource,), (name,))
                else:
                    yield Rule((verb,), (group,), (resource,))
    for url in rule.non_resource_urls:
        for verb in rule.verbs:
            yield Rule((verb,), non_resource_urls=(url,))


def _covers(owner: Rule, sub: Rule) -> bool:
    if "*" not in owner.verbs and not set(sub.verbs) <= set(owner.verbs):
        return False
    if "*" not in owner.api_groups and not set(sub.api_groups) <= set(owner.api_groups):
        return False
    for r in sub.resources:
        if "*" not in owner.resources and r not in owner.resources and \
                not ("/" in r and f"*/{r.split('/', 1)[1]}" in owner.resources):
            return False
    for u in sub.non_resource_urls:
        if not any(o == "*" or o == u or (o.endswith("*") and u.startswith(o[:-1])) for o in owner.non_resource_urls):
            return False
    if sub.resource_names:
        return not owner.resource_names or set(sub.resource_names) <= set(owner.resource_names)
    return not owner.resource_names


def missing(owner: list[Rule], wanted: list[Rule]) -> list[str]:
    """The compacted descriptions of what `owner` lacks of `wanted` (sorted, as kube lists them)."""
    lacking = [atom for rule in wanted for atom in _atoms(rule) if not any(_covers(o, atom) for o in owner)]
    simple: dict[tuple, list[str]] = {}
    out: set[str] = set()
    for atom in lacking:
        if atom.resources and len(atom.resource_names) <= 1:
            simple.setdefault((atom.api_groups, atom.resources, atom.resource_names), []).extend(atom.verbs)
        else:
            out.add(atom.compact())
    for (groups, resources, names), verbs in simple.items():
        out.add(Rule(tuple(verbs), groups, resources, names).compact())
    return sorted(out)


@dataclass
class Checker:
    """What escalation checks need: the store and how to ask the authorizer."""

    store: Store
    resolve_errors: list[str] = field(default_factory=list)

    def allowed(self, user: User, verb: str, resource: str, ns: str, name: str) -> bool:
        return authorize(self.store, user, Attributes(verb, True, ns, GROUP, "v1", resource, "", name)).allowed

    def no_escalation(self, user: User, resource: str, ns: str, name: str, wanted: list[Rule]) -> None:
        owner, errors = rules_for(self.store, user, ns)
        lacking = missing(owner, wanted)
        if lacking:
            msg = (f'user "{user.name}" (groups={go_quote(list(user.groups))}) is attempting to grant RBAC '
                   "permissions not currently held:\n" + "\n".join(lacking))
            if errors:
                msg += f"; resolution errors: [{', '.join(errors)}]"
            raise forbidden(resource, GROUP, name, msg)


FULL_AUTHORITY = [Rule(("*",), ("*",), ("*",)), Rule(("*",), non_resource_urls=("*",))]


def check_escalation(store: Store, user: User, resource: str, namespace: str, obj: Obj) -> None:
    """Refuse a Role/ClusterRole or binding write that grants more than `user` holds (403)."""
    if MASTERS in user.groups:
        return
    check = Checker(store)
    name = str((obj.get("metadata") or {}).get("name") or "")
    if resource in (ROLES.name, CLUSTERROLES.name):
        if check.allowed(user, "escalate", resource, namespace, name):
            return
        if resource == CLUSTERROLES.name and obj.get("aggregationRule"):
            try:
                check.no_escalation(user, resource, "", name, FULL_AUTHORITY)
            except Forbidden:
                raise forbidden(resource, GROUP, name, "must have cluster-admin privileges to use the "
                                                       "aggregationRule") from None
            return
        check.no_escalation(user, resource, namespace, name, rules_of(obj))
        return
    ref = obj.get("roleRef") or {}
    ref_resource = ROLES.name if ref.get("kind") == "Role" else CLUSTERROLES.name
    if check.allowed(user, "bind", ref_resource, namespace if ref_resource == ROLES.name else namespace,
                     str(ref.get("name") or "")):
        return
    role, error = _role_for(store, {"roleRef": ref, "metadata": {"namespace": namespace}})
    if role is None:
        raise forbidden(resource, GROUP, name, error)
    check.no_escalation(user, resource, namespace, name, rules_of(role))


# -- the clusterrole-aggregation controller ----------------------------------------------------------

def aggregate(store: Store) -> int:
    """Give each ClusterRole with an aggregationRule the rules of the roles it selects; the count
    of roles changed. Repeated until nothing changes, so chains (view -> edit -> admin) settle."""
    changed = 0
    for _round in range(8):
        roles = store.list(CLUSTERROLES.bucket)[0]
        dirty = False
        for role in roles:
            agg = role.get("aggregationRule")
            if not isinstance(agg, dict):
                continue
            rules: list[Obj] = []
            for other in roles:
                if other is role:
                    continue
                labels = other["metadata"].get("labels") or {}
                if any(isinstance(sel, dict) and selector_matches(sel, labels)
                       for sel in agg.get("clusterRoleSelectors") or []):
                    for r in other.get("rules") or []:
                        if r not in rules:
                            rules.append(r)
            if (role.get("rules") or []) != rules:
                store.replace(CLUSTERROLES.bucket, {**role, "rules": rules})
                changed += 1
                dirty = True
        if not dirty:
            break
    return changed


class Aggregator:
    """Runs `aggregate` after every ClusterRole change (a trio task in the server's nursery)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        aggregate(self.store)
        _, watcher = self.store.watch(CLUSTERROLES.bucket, None, None, None, self.store.rv)
        task_status.started()
        try:
            async for _change in watcher.receive:
                aggregate(self.store)
        finally:
            self.store.unwatch(watcher)
