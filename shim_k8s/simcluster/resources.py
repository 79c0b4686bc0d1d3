"""The API resources the sim-cluster serves, declared once as data.

Discovery documents, the OpenAPI documents, routing and the store all read this table, so a
resource added here is listed by `kubectl api-resources`, routable and watchable at once.
"""

from __future__ import annotations

from dataclasses import dataclass

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

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def bucket(self) -> str:
        return self.store or self.name

    @property
    def prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"


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

PODS = Resource("pods", "pod", "Pod", "", "v1", True, ("po",), ("all",), ("status", "binding"),
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
BINDINGS = Resource("bindings", "binding", "Binding", "", "v1", True, verbs=("create",))

SERVED: tuple[Resource, ...] = (PODS, NODES, NAMESPACES, CONFIGMAPS, SECRETS, EVENTS, NEW_EVENTS)

# (group, version) -> {plural: Resource}
BY_GROUP_VERSION: dict[tuple[str, str], dict[str, Resource]] = {}
for _r in SERVED + (BINDINGS,):
    BY_GROUP_VERSION.setdefault((_r.group, _r.version), {})[_r.name] = _r

BUCKETS: tuple[str, ...] = tuple(dict.fromkeys(r.bucket for r in SERVED))
