"""Validation of the RBAC kinds (rbac.authorization.k8s.io/v1), as kube-apiserver's: 422 causes.

- Role/ClusterRole rules: `verbs` required; a resource rule needs `apiGroups` and `resources`; a
  `nonResourceURLs` rule has nothing else and is not allowed in a (namespaced) Role.
- RoleBinding/ClusterRoleBinding: `roleRef` (apiGroup `rbac.authorization.k8s.io`, kind `Role` or
  `ClusterRole`, only `ClusterRole` for a ClusterRoleBinding, name) is required and immutable
  (`cannot change roleRef`); each subject has a kind `ServiceAccount`/`User`/`Group` and a name, and
  a ServiceAccount in a ClusterRoleBinding a namespace.
"""

from __future__ import annotations

from typing import Any

from .errors import Invalid
from .objects import Cause, required
from .resources import CLUSTERROLEBINDINGS, CLUSTERROLES, ROLEBINDINGS, ROLES, Resource

Obj = dict[str, Any]
GROUP = "rbac.authorization.k8s.io"


def _go_list(values: Any) -> str:
    return "[]string{" + ", ".join(f'"{v}"' for v in values or []) + "}"


def _rule_causes(rule: Any, path: str, namespaced: bool) -> list[Cause]:
    if not isinstance(rule, dict):
        return [("FieldValueInvalid", path, "Invalid value: must be an object")]
    causes: list[Cause] = []
    if not rule.get("verbs"):
        causes.append(required(f"{path}.verbs", "Required value: verbs must contain at least one value"))
    urls = rule.get("nonResourceURLs")
    if urls:
        if namespaced:
            causes.append(("FieldValueInvalid", f"{path}.nonResourceURLs", f"Invalid value: {_go_list(urls)}: "
                           "namespaced rules cannot apply to non-resource URLs"))
        if rule.get("apiGroups") or rule.get("resources") or rule.get("resourceNames"):
            causes.append(("FieldValueInvalid", f"{path}.nonResourceURLs", f"Invalid value: {_go_list(urls)}: "
                           "rules cannot apply to both regular resources and non-resource URLs"))
        return causes
    if not rule.get("apiGroups"):
        causes.append(required(f"{path}.apiGroups", "Required value: resource rules must supply at least one api group"))
    if not rule.get("resources"):
        causes.append(required(f"{path}.resources", "Required value: resource rules must supply at least one resource"))
    return causes


def _binding_causes(obj: Obj, cluster: bool) -> list[Cause]:
    causes: list[Cause] = []
    ref = obj.get("roleRef")
    if not isinstance(ref, dict):
        ref = {}
    if ref.get("apiGroup") != GROUP:
        causes.append(("FieldValueNotSupported", "roleRef.apiGroup",
                       f'Unsupported value: "{ref.get("apiGroup") or ""}": supported values: "{GROUP}"'))
    kinds = ("ClusterRole",) if cluster else ("Role", "ClusterRole")
    if ref.get("kind") not in kinds:
        causes.append(("FieldValueNotSupported", "roleRef.kind", f'Unsupported value: "{ref.get("kind") or ""}": '
                       "supported values: " + ", ".join(f'"{k}"' for k in kinds)))
    if not ref.get("name"):
        causes.append(required("roleRef.name"))
    for i, subject in enumerate(obj.get("subjects") or []):
        path = f"subjects[{i}]"
        subject = subject if isinstance(subject, dict) else {}
        if subject.get("kind") not in ("ServiceAccount", "User", "Group"):
            causes.append(("FieldValueNotSupported", f"{path}.kind", f'Unsupported value: "{subject.get("kind") or ""}"'
                           ': supported values: "ServiceAccount", "User", "Group"'))
        if not subject.get("name"):
            causes.append(required(f"{path}.name"))
        if subject.get("kind") == "ServiceAccount" and cluster and not subject.get("namespace"):
            causes.append(required(f"{path}.namespace"))
    return causes


def validate(res: Resource, obj: Obj, old: Obj | None = None) -> None:
    """Raise Invalid (422) for a malformed RBAC object, or a changed roleRef."""
    if res in (ROLES, CLUSTERROLES):
        rules = obj.get("rules") or []
        causes = [c for i, r in enumerate(rules if isinstance(rules, list) else [])
                  for c in _rule_causes(r, f"rules[{i}]", res is ROLES)]
    elif res in (ROLEBINDINGS, CLUSTERROLEBINDINGS):
        causes = _binding_causes(obj, res is CLUSTERROLEBINDINGS)
        if old is not None and obj.get("roleRef") != old.get("roleRef"):
            causes.append(("FieldValueInvalid", "roleRef", "Invalid value: cannot change roleRef"))
    else:
        return
    if causes:
        raise Invalid.fields(f"{res.kind}.{GROUP}", obj["metadata"].get("name", ""), causes, GROUP)
