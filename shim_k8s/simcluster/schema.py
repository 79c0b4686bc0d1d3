"""Known fields, for `?fieldValidation=Strict|Warn` (what `kubectl create -f` sends: Strict).

Only the levels we know completely are checked (the object's top level, ObjectMeta, and for pods
PodSpec, Container and ResourceRequirements, as of Kubernetes 1.32); anything below is accepted as
is. An unknown field is reported the way a real apiserver does: `unknown field "spec.containers[0].foo"`.
"""

from __future__ import annotations

from typing import Any

OBJECT_META = frozenset({
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation", "creationTimestamp",
    "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences", "finalizers",
    "managedFields",
})
POD_SPEC = frozenset({
    "volumes", "initContainers", "containers", "ephemeralContainers", "restartPolicy", "terminationGracePeriodSeconds",
    "activeDeadlineSeconds", "dnsPolicy", "nodeSelector", "serviceAccountName", "serviceAccount",
    "automountServiceAccountToken", "nodeName", "hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace",
    "securityContext", "imagePullSecrets", "hostname", "subdomain", "affinity", "schedulerName", "tolerations",
    "hostAliases", "priorityClassName", "priority", "dnsConfig", "readinessGates", "runtimeClassName",
    "enableServiceLinks", "preemptionPolicy", "overhead", "topologySpreadConstraints", "setHostnameAsFQDN", "os",
    "hostUsers", "schedulingGates", "resourceClaims", "resources",
})
CONTAINER = frozenset({
    "name", "image", "command", "args", "workingDir", "ports", "envFrom", "env", "resources", "resizePolicy",
    "restartPolicy", "volumeMounts", "volumeDevices", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle",
    "terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy", "securityContext", "stdin", "stdinOnce",
    "tty",
})
EPHEMERAL_CONTAINER = CONTAINER | {"targetContainerName"}
RESOURCES = frozenset({"limits", "requests", "claims"})
TOP = {
    "pods": frozenset({"apiVersion", "kind", "metadata", "spec", "status"}),
    "nodes": frozenset({"apiVersion", "kind", "metadata", "spec", "status"}),
    "namespaces": frozenset({"apiVersion", "kind", "metadata", "spec", "status"}),
    "configmaps": frozenset({"apiVersion", "kind", "metadata", "data", "binaryData", "immutable"}),
    "secrets": frozenset({"apiVersion", "kind", "metadata", "data", "stringData", "type", "immutable"}),
    "events": frozenset({
        "apiVersion", "kind", "metadata", "involvedObject", "reason", "message", "source", "firstTimestamp",
        "lastTimestamp", "count", "type", "eventTime", "series", "action", "related", "reportingComponent",
        "reportingInstance",
    }),
    "events.k8s.io": frozenset({
        "apiVersion", "kind", "metadata", "eventTime", "series", "reportingController", "reportingInstance", "action",
        "reason", "regarding", "related", "note", "type", "deprecatedSource", "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp", "deprecatedCount",
    }),
}


def _extra(obj: Any, known: frozenset[str], path: str, out: list[str]) -> None:
    if isinstance(obj, dict):
        for key in obj:
            if key not in known:
                out.append(f"{path}.{key}" if path else key)


def unknown_fields(kind_key: str, obj: Any) -> list[str]:
    """Paths of fields no 1.32 apiserver knows, e.g. ["spec.containers[0].foo"]."""
    out: list[str] = []
    if not isinstance(obj, dict) or kind_key not in TOP:
        return out
    _extra(obj, TOP[kind_key], "", out)
    _extra(obj.get("metadata"), OBJECT_META, "metadata", out)
    if kind_key == "pods" and isinstance(obj.get("spec"), dict):
        spec = obj["spec"]
        _extra(spec, POD_SPEC, "spec", out)
        for group, known in (("initContainers", CONTAINER), ("containers", CONTAINER),
                             ("ephemeralContainers", EPHEMERAL_CONTAINER)):
            for i, c in enumerate(spec.get(group) or [] if isinstance(spec.get(group), list) else []):
                _extra(c, known, f"spec.{group}[{i}]", out)
                if isinstance(c, dict):
                    _extra(c.get("resources"), RESOURCES, f"spec.{group}[{i}].resources", out)
    return out
