"""Known fields, for `?fieldValidation=Strict|Warn` (what `kubectl create -f` sends: Strict).

Only the levels we know completely are checked (the object's top level, ObjectMeta; for pods
PodSpec, its securityContext and tolerations, and in every container ResourceRequirements, ports,
env, envFrom, volumeMounts and securityContext; for nodes NodeSpec and its taints, as of Kubernetes
1.32); anything below is accepted as is. Services, ServiceAccounts, Leases and PodDisruptionBudgets
are checked at every level against their vendored 1.32 schema (`k8sschema`). An unknown field is reported the way a real apiserver does: `unknown field "spec.containers[0].foo"`.
"""

from __future__ import annotations

from typing import Any

from . import k8sschema

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
CONTAINER_PORT = frozenset({"name", "hostPort", "containerPort", "protocol", "hostIP"})
ENV_VAR = frozenset({"name", "value", "valueFrom"})
ENV_FROM = frozenset({"prefix", "configMapRef", "secretRef"})
VOLUME_MOUNT = frozenset({"name", "readOnly", "recursiveReadOnly", "mountPath", "subPath", "mountPropagation",
                          "subPathExpr"})
SECURITY_CONTEXT = frozenset({
    "capabilities", "privileged", "seLinuxOptions", "windowsOptions", "runAsUser", "runAsGroup", "runAsNonRoot",
    "readOnlyRootFilesystem", "allowPrivilegeEscalation", "procMount", "seccompProfile", "appArmorProfile",
})
POD_SECURITY_CONTEXT = frozenset({
    "seLinuxOptions", "windowsOptions", "runAsUser", "runAsGroup", "runAsNonRoot", "supplementalGroups",
    "supplementalGroupsPolicy", "fsGroup", "sysctls", "fsGroupChangePolicy", "seccompProfile", "appArmorProfile",
    "seLinuxChangePolicy",
})
TOLERATION = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})
NODE_SPEC = frozenset({"podCIDR", "podCIDRs", "providerID", "unschedulable", "taints", "configSource", "externalID"})
TAINT = frozenset({"key", "value", "effect", "timeAdded"})
CONTAINER_PARTS: dict[str, tuple[frozenset[str], bool]] = {
    # field of a Container -> (its known fields, whether it is a list of them)
    "resources": (RESOURCES, False), "ports": (CONTAINER_PORT, True), "env": (ENV_VAR, True),
    "envFrom": (ENV_FROM, True), "volumeMounts": (VOLUME_MOUNT, True), "securityContext": (SECURITY_CONTEXT, False),
}
TOP = {
    "priorityclasses": frozenset({"apiVersion", "kind", "metadata", "value", "globalDefault", "description",
                                  "preemptionPolicy"}),
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


# kinds checked against their whole vendored 1.32 schema (k8sschema), every level
VENDORED = {
    "services": "io.k8s.api.core.v1.Service", "serviceaccounts": "io.k8s.api.core.v1.ServiceAccount",
    "leases": "io.k8s.api.coordination.v1.Lease", "poddisruptionbudgets": "io.k8s.api.policy.v1.PodDisruptionBudget",
    "endpoints": "io.k8s.api.core.v1.Endpoints", "endpointslices": "io.k8s.api.discovery.v1.EndpointSlice",
}


def unknown_fields(kind_key: str, obj: Any) -> list[str]:
    """Paths of fields no 1.32 apiserver knows, e.g. ["spec.containers[0].foo"]."""
    out: list[str] = []
    if isinstance(obj, dict) and kind_key in VENDORED:
        return k8sschema.unknown_fields(VENDORED[kind_key], obj)
    if not isinstance(obj, dict) or kind_key not in TOP:
        return out
    _extra(obj, TOP[kind_key], "", out)
    _extra(obj.get("metadata"), OBJECT_META, "metadata", out)
    spec = obj.get("spec")
    if kind_key == "pods" and isinstance(spec, dict):
        _extra(spec, POD_SPEC, "spec", out)
        _extra(spec.get("securityContext"), POD_SECURITY_CONTEXT, "spec.securityContext", out)
        _each(spec.get("tolerations"), TOLERATION, "spec.tolerations", out)
        for group, known in (("initContainers", CONTAINER), ("containers", CONTAINER),
                             ("ephemeralContainers", EPHEMERAL_CONTAINER)):
            for i, c in enumerate(_items(spec.get(group))):
                path = f"spec.{group}[{i}]"
                _extra(c, known, path, out)
                if not isinstance(c, dict):
                    continue
                for part, (fields, is_list) in CONTAINER_PARTS.items():
                    if is_list:
                        _each(c.get(part), fields, f"{path}.{part}", out)
                    else:
                        _extra(c.get(part), fields, f"{path}.{part}", out)
    elif kind_key == "nodes" and isinstance(spec, dict):
        _extra(spec, NODE_SPEC, "spec", out)
        _each(spec.get("taints"), TAINT, "spec.taints", out)
    return out


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _each(value: Any, known: frozenset[str], path: str, out: list[str]) -> None:
    for i, item in enumerate(_items(value)):
        _extra(item, known, f"{path}[{i}]", out)
