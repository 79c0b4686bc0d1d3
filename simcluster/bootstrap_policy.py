"""The bootstrap RBAC policy kube-apiserver creates at start (its `rbac-defaults`), as data.

Written from the upstream bootstrap policy (Kubernetes 1.32's `cluster-roles.yaml` and
`cluster-role-bindings.yaml`), limited to what sim-cluster's clients need: `cluster-admin`,
`admin`/`edit`/`view` (aggregated, as upstream, from `system:aggregate-to-*`), `system:basic-user`,
`system:discovery`, `system:public-info-viewer`, `system:kube-scheduler`, `system:volume-scheduler`,
`system:auth-delegator`, `system:monitoring`, `system:service-account-issuer-discovery`, and their
default ClusterRoleBindings. Rules for resources sim-cluster does not serve are kept, as upstream.
Every object carries the label `kubernetes.io/bootstrapping: rbac-defaults` and the annotation
`rbac.authorization.kubernetes.io/autoupdate: "true"`.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]
RW = ("create", "delete", "deletecollection", "patch", "update")
RO = ("get", "list", "watch")
ALL = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")

# (apiGroups, resources, verbs[, resourceNames]) or ("URL", nonResourceURLs, verbs)
_AGG_EDIT = [
    ([""], ["pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets", "services/proxy"], RO),
    ([""], ["serviceaccounts"], ["impersonate"]),
    ([""], ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"], RW),
    ([""], ["pods/eviction"], ["create"]),
    ([""], ["configmaps", "events", "persistentvolumeclaims", "replicationcontrollers",
            "replicationcontrollers/scale", "secrets", "serviceaccounts", "services", "services/proxy"], RW),
    ([""], ["serviceaccounts/token"], ["create"]),
    (["apps"], ["daemonsets", "deployments", "deployments/rollback", "deployments/scale", "replicasets",
                "replicasets/scale", "statefulsets", "statefulsets/scale"], RW),
    (["autoscaling"], ["horizontalpodautoscalers"], RW),
    (["batch"], ["cronjobs", "jobs"], RW),
    (["extensions"], ["daemonsets", "deployments", "deployments/rollback", "deployments/scale", "ingresses",
                      "networkpolicies", "replicasets", "replicasets/scale", "replicationcontrollers/scale"], RW),
    (["policy"], ["poddisruptionbudgets"], RW),
    (["networking.k8s.io"], ["ingresses", "networkpolicies"], RW),
    (["coordination.k8s.io"], ["leases"], ALL),
]
_AGG_VIEW = [
    ([""], ["configmaps", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "pods",
            "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts", "services",
            "services/status"], RO),
    ([""], ["bindings", "events", "limitranges", "namespaces/status", "pods/log", "pods/status",
            "replicationcontrollers/status", "resourcequotas", "resourcequotas/status"], RO),
    ([""], ["namespaces"], RO),
    (["discovery.k8s.io"], ["endpointslices"], RO),
    (["apps"], ["controllerrevisions", "daemonsets", "daemonsets/status", "deployments", "deployments/scale",
                "deployments/status", "replicasets", "replicasets/scale", "replicasets/status", "statefulsets",
                "statefulsets/scale", "statefulsets/status"], RO),
    (["autoscaling"], ["horizontalpodautoscalers", "horizontalpodautoscalers/status"], RO),
    (["batch"], ["cronjobs", "cronjobs/status", "jobs", "jobs/status"], RO),
    (["extensions"], ["daemonsets", "daemonsets/status", "deployments", "deployments/scale", "deployments/status",
                      "ingresses", "ingresses/status", "networkpolicies", "replicasets", "replicasets/scale",
                      "replicasets/status", "replicationcontrollers/scale"], RO),
    (["policy"], ["poddisruptionbudgets", "poddisruptionbudgets/status"], RO),
    (["networking.k8s.io"], ["ingresses", "ingresses/status", "networkpolicies"], RO),
]
_SCHEDULER = [
    (["", "events.k8s.io"], ["events"], ["create", "patch", "update"]),
    (["coordination.k8s.io"], ["leases"], ["create"]),
    (["coordination.k8s.io"], ["leases"], ["get", "update"], ["kube-scheduler"]),
    ([""], ["nodes"], RO),
    ([""], ["pods"], ["delete", "get", "list", "watch"]),
    ([""], ["bindings", "pods/binding"], ["create"]),
    ([""], ["pods/status"], ["patch", "update"]),
    ([""], ["replicationcontrollers", "services"], RO),
    (["apps", "extensions"], ["replicasets"], RO),
    (["apps"], ["statefulsets"], RO),
    (["policy"], ["poddisruptionbudgets"], RO),
    ([""], ["persistentvolumeclaims", "persistentvolumes"], RO),
    (["authentication.k8s.io"], ["tokenreviews"], ["create"]),
    (["authorization.k8s.io"], ["subjectaccessreviews"], ["create"]),
    (["storage.k8s.io"], ["csinodes"], RO),
    ([""], ["namespaces"], RO),
    (["storage.k8s.io"], ["csidrivers"], RO),
    (["storage.k8s.io"], ["csistoragecapacities"], RO),
]

# name: (rules, extra labels, aggregated-from label or None)
CLUSTER_ROLES: dict[str, tuple[list, dict[str, str], str | None]] = {
    "cluster-admin": ([(["*"], ["*"], ["*"]), ("URL", ["*"], ["*"])], {}, None),
    "admin": ([], {}, "rbac.authorization.k8s.io/aggregate-to-admin"),
    "edit": ([], {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}, "rbac.authorization.k8s.io/aggregate-to-edit"),
    "view": ([], {"rbac.authorization.k8s.io/aggregate-to-edit": "true"}, "rbac.authorization.k8s.io/aggregate-to-view"),
    "system:aggregate-to-admin": ([(["authorization.k8s.io"], ["localsubjectaccessreviews"], ["create"]),
                                   (["rbac.authorization.k8s.io"], ["rolebindings", "roles"], ALL)],
                                  {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}, None),
    "system:aggregate-to-edit": (_AGG_EDIT, {"rbac.authorization.k8s.io/aggregate-to-edit": "true"}, None),
    "system:aggregate-to-view": (_AGG_VIEW, {"rbac.authorization.k8s.io/aggregate-to-view": "true"}, None),
    "system:auth-delegator": ([(["authentication.k8s.io"], ["tokenreviews"], ["create"]),
                               (["authorization.k8s.io"], ["subjectaccessreviews"], ["create"])], {}, None),
    "system:basic-user": ([(["authorization.k8s.io"], ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                            ["create"]),
                           (["authentication.k8s.io"], ["selfsubjectreviews"], ["create"])], {}, None),
    "system:discovery": ([("URL", ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi",
                                   "/openapi/*", "/readyz", "/version", "/version/"], ["get"])], {}, None),
    "system:public-info-viewer": ([("URL", ["/healthz", "/livez", "/readyz", "/version", "/version/"], ["get"])],
                                  {}, None),
    "system:monitoring": ([("URL", ["/healthz", "/healthz/*", "/livez", "/livez/*", "/metrics", "/metrics/slis",
                                    "/readyz", "/readyz/*"], ["get"])], {}, None),
    "system:service-account-issuer-discovery": ([("URL", ["/.well-known/openid-configuration", "/openid/v1/jwks"],
                                                  ["get"])], {}, None),
    "system:kube-scheduler": (_SCHEDULER, {}, None),
    "system:volume-scheduler": ([([""], ["persistentvolumes"], ["get", "list", "patch", "update", "watch"]),
                                 (["storage.k8s.io"], ["storageclasses"], RO),
                                 ([""], ["persistentvolumeclaims"], ["get", "list", "patch", "update", "watch"])],
                                {}, None),
}

# binding name (= role name): subjects as (kind, name)
CLUSTER_ROLE_BINDINGS: dict[str, list[tuple[str, str]]] = {
    "cluster-admin": [("Group", "system:masters")],
    "system:basic-user": [("Group", "system:authenticated")],
    "system:discovery": [("Group", "system:authenticated")],
    "system:public-info-viewer": [("Group", "system:authenticated"), ("Group", "system:unauthenticated")],
    "system:monitoring": [("Group", "system:monitoring")],
    "system:service-account-issuer-discovery": [("Group", "system:serviceaccounts")],
    "system:kube-scheduler": [("User", "system:kube-scheduler")],
    "system:volume-scheduler": [("User", "system:kube-scheduler")],
}

_META_LABELS = {"kubernetes.io/bootstrapping": "rbac-defaults"}
_META_ANNOTATIONS = {"rbac.authorization.kubernetes.io/autoupdate": "true"}


def rule(spec: tuple) -> Obj:
    """One PolicyRule from the compact tuples above."""
    if spec[0] == "URL":
        return {"nonResourceURLs": list(spec[1]), "verbs": list(spec[2])}
    out: Obj = {"apiGroups": list(spec[0]), "resources": list(spec[1]), "verbs": list(spec[2])}
    if len(spec) > 3:
        out["resourceNames"] = list(spec[3])
    return out


def _meta(name: str, labels: dict[str, str] | None = None) -> Obj:
    return {"name": name, "labels": {**_META_LABELS, **(labels or {})}, "annotations": dict(_META_ANNOTATIONS)}


def cluster_roles() -> list[Obj]:
    out = []
    for name, (rules, labels, aggregate_from) in CLUSTER_ROLES.items():
        obj: Obj = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": _meta(name, labels), "rules": [rule(r) for r in rules]}
        if aggregate_from:
            obj["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": {aggregate_from: "true"}}]}
        out.append(obj)
    return out


def cluster_role_bindings() -> list[Obj]:
    return [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": _meta(name),
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
             "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": subject}
                          for kind, subject in subjects]}
            for name, subjects in CLUSTER_ROLE_BINDINGS.items()]
