"""The API resources the sim-cluster serves, declared once as data.

Discovery documents, the OpenAPI documents, routing and the store all read this table, so a
resource added here is listed by `kubectl api-resources`, routable and watchable at once.

The built-in resources are constants (`SERVED`); a running server keeps them in a `Registry`, to
which each established CustomResourceDefinition adds one `Resource` per served version (with a
`Custom` part: its schema, printer columns and scale paths) and from which its deletion removes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

VERBS_ALL = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
_BASE_FIELDS = frozenset({"metadata.name", "metadata.namespace"})


@dataclass(frozen=True)
class Resource:
    """One REST resource: `/api/v1/pods`, `/apis/events.k8s.io/v1/namespaces/x/events`, ..."""

    name: str  # plural, the path segment
    singular: str
    kind: str
    group: str  # "" is the core group
    version: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()  # "status", "binding"
    field_labels: frozenset[str] = _BASE_FIELDS
    has_status: bool = False  # main-resource writes keep status, the status subresource keeps the rest
    store: str = ""  # the store bucket (events.k8s.io/v1 events share core/v1 events); default name
    verbs: tuple[str, ...] = VERBS_ALL
    custom: Custom | None = field(default=None, compare=False)  # set for resources a CRD defines
    scale: ScalePaths | None = None  # a built-in kind's /scale sub-resource (a CRD's is in `custom`)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def bucket(self) -> str:
        return self.store or self.name

    @property
    def prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"


@dataclass(frozen=True)
class PrinterColumn:
    """One `additionalPrinterColumns` entry of a CRD version."""

    name: str
    type: str  # integer, number, string, boolean, date
    json_path: str
    format: str = ""
    description: str = ""
    priority: int = 0


@dataclass(frozen=True)
class ScalePaths:
    """`subresources.scale` of a CRD version: where the replicas and the selector live."""

    spec_replicas: str  # .spec.width
    status_replicas: str  # .status.width
    label_selector: str | None = None


@dataclass(frozen=True, eq=False)
class Custom:
    """What a CRD version adds to its Resource: the CRD's name, schema, columns and scale paths."""

    crd: str
    schema: Mapping[str, Any]
    columns: tuple[PrinterColumn, ...] = ()
    scale: ScalePaths | None = None


POD_FIELDS = _BASE_FIELDS | {
    "spec.nodeName", "spec.schedulerName", "status.phase", "spec.restartPolicy", "spec.serviceAccountName",
    "spec.hostNetwork", "status.podIP", "status.nominatedNodeName",
}
NODE_FIELDS = _BASE_FIELDS | {"spec.unschedulable"}
EVENT_FIELDS = _BASE_FIELDS | {
    "involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
    "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
    "reason", "reportingComponent", "source", "type",
}
NEW_EVENT_FIELDS = _BASE_FIELDS | {
    "regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid", "reason",
    "reportingController", "type",
}

PODS = Resource("pods", "pod", "Pod", "", "v1", True, ("po",), ("all",), ("status", "binding", "eviction"),
                POD_FIELDS, has_status=True)
NODES = Resource("nodes", "node", "Node", "", "v1", False, ("no",), (), ("status",), NODE_FIELDS, has_status=True)
NAMESPACES = Resource("namespaces", "namespace", "Namespace", "", "v1", False, ("ns",), (), ("status",),
                      _BASE_FIELDS | {"status.phase"}, has_status=True,
                      verbs=("create", "delete", "get", "list", "patch", "update", "watch"))
CONFIGMAPS = Resource("configmaps", "configmap", "ConfigMap", "", "v1", True, ("cm",))
SECRETS = Resource("secrets", "secret", "Secret", "", "v1", True, (), (), (), _BASE_FIELDS | {"type"})
EVENTS = Resource("events", "event", "Event", "", "v1", True, ("ev",), (), (), EVENT_FIELDS)
NEW_EVENTS = Resource("events", "event", "Event", "events.k8s.io", "v1", True, (), (), (), NEW_EVENT_FIELDS,
                      store="events")
CRDS = Resource("customresourcedefinitions", "customresourcedefinition", "CustomResourceDefinition",
                "apiextensions.k8s.io", "v1", False, ("crd", "crds"), ("api-extensions",), ("status",),
                has_status=True)
SERVICEACCOUNTS = Resource("serviceaccounts", "serviceaccount", "ServiceAccount", "", "v1", True, ("sa",), (),
                           ("token",))
SERVICES = Resource("services", "service", "Service", "", "v1", True, ("svc",), ("all",), ("status",),
                    _BASE_FIELDS | {"spec.clusterIP", "spec.type"}, has_status=True)
LEASES = Resource("leases", "lease", "Lease", "coordination.k8s.io", "v1", True)
PDBS = Resource("poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget", "policy", "v1", True,
                ("pdb",), (), ("status",), has_status=True)
PRIORITYCLASSES = Resource("priorityclasses", "priorityclass", "PriorityClass", "scheduling.k8s.io", "v1", False,
                           ("pc",))
MUTATING_WEBHOOKS = Resource("mutatingwebhookconfigurations", "mutatingwebhookconfiguration",
                             "MutatingWebhookConfiguration", "admissionregistration.k8s.io", "v1", False,
                             categories=("api-extensions",))
VALIDATING_WEBHOOKS = Resource("validatingwebhookconfigurations", "validatingwebhookconfiguration",
                               "ValidatingWebhookConfiguration", "admissionregistration.k8s.io", "v1", False,
                               categories=("api-extensions",))
DEPLOYMENTS = Resource("deployments", "deployment", "Deployment", "apps", "v1", True, ("deploy",), ("all",),
                       ("status", "scale"), has_status=True, scale=ScalePaths(".spec.replicas", ".status.replicas"))
REPLICASETS = Resource("replicasets", "replicaset", "ReplicaSet", "apps", "v1", True, ("rs",), ("all",),
                       ("status", "scale"), has_status=True, scale=ScalePaths(".spec.replicas", ".status.replicas"))
JOBS = Resource("jobs", "job", "Job", "batch", "v1", True, (), ("all",), ("status",), has_status=True)
_RBAC = "rbac.authorization.k8s.io"
ROLES = Resource("roles", "role", "Role", _RBAC, "v1", True)
CLUSTERROLES = Resource("clusterroles", "clusterrole", "ClusterRole", _RBAC, "v1", False)
ROLEBINDINGS = Resource("rolebindings", "rolebinding", "RoleBinding", _RBAC, "v1", True)
CLUSTERROLEBINDINGS = Resource("clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding", _RBAC, "v1", False)
RBAC_KINDS = (ROLES, CLUSTERROLES, ROLEBINDINGS, CLUSTERROLEBINDINGS)

# create-only reviews: answered by `reviews`, never stored
_AUTHZ, _AUTHN = "authorization.k8s.io", "authentication.k8s.io"
REVIEWS = tuple(Resource(plural, plural[:-1], kind, group, "v1", namespaced, verbs=("create",)) for plural, kind, group,
                namespaced in (("selfsubjectaccessreviews", "SelfSubjectAccessReview", _AUTHZ, False),
                               ("selfsubjectrulesreviews", "SelfSubjectRulesReview", _AUTHZ, False),
                               ("subjectaccessreviews", "SubjectAccessReview", _AUTHZ, False),
                               ("localsubjectaccessreviews", "LocalSubjectAccessReview", _AUTHZ, True),
                               ("selfsubjectreviews", "SelfSubjectReview", _AUTHN, False),
                               ("tokenreviews", "TokenReview", _AUTHN, False)))

NETWORKPOLICIES = Resource("networkpolicies", "networkpolicy", "NetworkPolicy", "networking.k8s.io", "v1", True,
                           ("netpol",))
ENDPOINTS = Resource("endpoints", "endpoints", "Endpoints", "", "v1", True, ("ep",))
ENDPOINTSLICES = Resource("endpointslices", "endpointslice", "EndpointSlice", "discovery.k8s.io", "v1", True,
                          field_labels=_BASE_FIELDS | {"addressType"})
BINDINGS = Resource("bindings", "binding", "Binding", "", "v1", True, verbs=("create",))
EVICTIONS = Resource("eviction", "", "Eviction", "policy", "v1", True, verbs=("create",))  # pods/eviction's body

SERVED: tuple[Resource, ...] = (PODS, NODES, NAMESPACES, CONFIGMAPS, SECRETS, EVENTS, NEW_EVENTS, CRDS,
                                SERVICEACCOUNTS, SERVICES, LEASES, PDBS, PRIORITYCLASSES, MUTATING_WEBHOOKS,
                                VALIDATING_WEBHOOKS, DEPLOYMENTS, REPLICASETS, JOBS, *RBAC_KINDS, ENDPOINTS,
                                ENDPOINTSLICES, NETWORKPOLICIES)

BUCKETS: tuple[str, ...] = tuple(dict.fromkeys(r.bucket for r in SERVED))


class Registry:
    """The resources one server serves: the built-ins plus those of its CRDs (by CRD name)."""

    def __init__(self, base: Iterable[Resource] = SERVED, extra: Iterable[Resource] = (BINDINGS, *REVIEWS)) -> None:
        self._base = tuple(base)
        self._extra = tuple(extra)
        self._custom: dict[str, tuple[Resource, ...]] = {}
        self.generation = 0  # bumped on every change: cached discovery/OpenAPI documents compare it
        self._rebuild()

    def _rebuild(self) -> None:
        self.served: tuple[Resource, ...] = self._base + tuple(r for rs in self._custom.values() for r in rs)
        self.by_group_version: dict[tuple[str, str], dict[str, Resource]] = {}
        for r in self.served + self._extra:
            self.by_group_version.setdefault((r.group, r.version), {})[r.name] = r
        self.by_bucket: dict[str, Resource] = {}
        for r in self.served:
            self.by_bucket.setdefault(r.bucket, r)
        self.generation += 1

    def lookup(self, group: str, version: str) -> dict[str, Resource] | None:
        return self.by_group_version.get((group, version))

    def custom(self, crd: str) -> tuple[Resource, ...]:
        return self._custom.get(crd, ())

    def set_custom(self, crd: str, resources: tuple[Resource, ...]) -> None:
        """Serve `resources` for the CRD `crd` (replacing what it served before; () stops serving)."""
        if resources:
            self._custom[crd] = resources
        else:
            self._custom.pop(crd, None)
        self._rebuild()
