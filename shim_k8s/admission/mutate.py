"""The `/mutate` webhook's decisions, without I/O (admission_controller.go `mutate`).

Pod CREATE, in YuniKorn's order: a `user.info` the pod brings is checked (trusted submitter, valid
JSON) or, when absent, written from the request's userInfo; a pod labelled `app=yunikorn` or in a
namespace not processed is let through untouched (the user.info patch is dropped with it); else
`schedulerName: yunikorn`, and in a labelled namespace the application ID labels (generated
`yunikorn-<ns>-autogen`, or copied from the canonical label), the legacy `queue` label and
`allow-preemption` from the pod's PriorityClass. Workload CREATE (Deployment, ReplicaSet,
StatefulSet, DaemonSet, Job, CronJob): only `user.info` in the pod template, so the pods the
controller creates carry the workload's creator; a ReplicaSet created by a system user (the
Deployment controller) is skipped. Pod UPDATE: a changed `user.info` is denied.

Where we depart from YuniKorn (README, "Decisions a YuniKorn user should know"): `user.info` is
checked before any label or namespace decides whether a pod or template is processed, and on
UPDATE of the workload kinds too, so neither a label (`app=yunikorn`, the app-id labels) nor a
later template edit switches the check off.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ..mapping import (ANN_ALLOW_PREEMPTION, ANN_APP_ID, LABEL_APP_ID, LABEL_QUEUE,
                       LABEL_SPARK_APP)
from . import namespaces, usergroup
from .conf import AdmissionConf, matches
from .request import Request, Response, dig, go_type, object_meta

LABEL_APP = "app"
YUNIKORN_POD = "yunikorn"
SCHEDULER_NAME = "yunikorn"
CANONICAL_QUEUE = "yunikorn.apache.org/queue"
AUTOGEN_PREFIX, AUTOGEN_SUFFIX, UNIQUE_SUFFIX = "yunikorn", "autogen", "uniqueautogen"
TEMPLATES: dict[str, tuple[str, ...]] = {
    "Deployment": ("spec", "template"), "ReplicaSet": ("spec", "template"),
    "StatefulSet": ("spec", "template"), "DaemonSet": ("spec", "template"),
    "Job": ("spec", "template"), "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
GO_TYPES = {"Deployment": "v1.Deployment", "ReplicaSet": "v1.ReplicaSet",
            "StatefulSet": "v1.StatefulSet", "DaemonSet": "v1.DaemonSet", "Job": "v1.Job",
            "CronJob": "v1beta1.CronJob"}


class Cluster(Protocol):
    """What the handlers look up in the informers' caches."""

    def namespace_annotations(self, namespace: str) -> Mapping[str, str] | None: ...

    def preemption_allowed(self, priority_class: str) -> bool: ...


def app_id(namespace: str, unique: bool) -> str:
    """utils.GenerateApplicationID at admission time (the pod has no UID yet: the shim replaces
    `-uniqueautogen` with the pod's UID)."""
    generated = (f"{namespace[:26]}-{UNIQUE_SUFFIX}" if unique
                 else f"{AUTOGEN_PREFIX}-{namespace}-{AUTOGEN_SUFFIX}")
    return generated[:63]


def _labels(conf: AdmissionConf, namespace: str, labels: dict[str, str],
            annotations: Mapping[str, str]) -> dict[str, str]:
    """updatePodLabel: the whole label map to add."""
    result = dict(labels)
    canonical = labels.get(ANN_APP_ID, "")
    if not (canonical or labels.get(LABEL_SPARK_APP) or labels.get(LABEL_APP_ID)
            or annotations.get(ANN_APP_ID)):
        generated = app_id(namespace, conf.generate_unique_app_id)
        result[ANN_APP_ID] = result[LABEL_APP_ID] = generated
    elif canonical:
        result[LABEL_APP_ID] = canonical
    if labels.get(CANONICAL_QUEUE):
        result[LABEL_QUEUE] = labels[CANONICAL_QUEUE]
    return result


def _preemption(pod: Any, annotations: Mapping[str, str], cluster: Cluster,
                patch: list[dict[str, Any]]) -> None:
    """updatePreemptionInfo: set allow-preemption unless already "true"/"false"."""
    if annotations.get(ANN_ALLOW_PREEMPTION) in ("true", "false"):
        return
    pc = dig(pod, "spec", "priorityClassName")
    value = "true" if cluster.preemption_allowed(pc if isinstance(pc, str) else "") else "false"
    for op in patch:
        if op["op"] == "add" and op["path"] == "/metadata/annotations":
            op["value"][ANN_ALLOW_PREEMPTION] = value
            return
    patch.append({"op": "add", "path": "/metadata/annotations",
                  "value": {**annotations, ANN_ALLOW_PREEMPTION: value}})


def _check_user_info(conf: AdmissionConf, req: Request, annotations: Mapping[str, str]
                     ) -> Response | None:
    """checkUserInfoAnnotation: a denial, or None."""
    if usergroup.ANN_USER_INFO not in annotations or conf.bypass_auth:
        return None
    if not usergroup.is_allowed(conf, req.user, req.groups):
        return Response(req.uid, False, usergroup.not_allowed(req.user, req.groups))
    error = usergroup.annotation_error(annotations[usergroup.ANN_USER_INFO])
    return Response(req.uid, False, error) if error else None


def _processes(conf: AdmissionConf, cluster: Cluster, namespace: str,
               labels: Mapping[str, str]) -> bool:
    """shouldProcessAdmissionReview."""
    ns_ann = cluster.namespace_annotations(namespace)
    return namespaces.should_process(conf, namespace, ns_ann) and bool(
        labels.get(ANN_APP_ID) or labels.get(LABEL_APP_ID) or labels.get(LABEL_SPARK_APP)
        or namespaces.should_label(conf, namespace, ns_ann))


def pod_create(conf: AdmissionConf, cluster: Cluster, req: Request, namespace: str) -> Response:
    labels, annotations, error = object_meta(req.object, "v1.Pod")
    if error:
        return Response(req.uid, False, error)
    denied = _check_user_info(conf, req, annotations)
    if denied:
        return denied
    patch: list[dict[str, Any]] = []
    if usergroup.ANN_USER_INFO not in annotations and not conf.bypass_auth:
        value = usergroup.user_info_value(req.user, req.groups)
        patch.append({"op": "add", "path": "/metadata/annotations",
                      "value": {**annotations, usergroup.ANN_USER_INFO: value}})
    ns_ann = cluster.namespace_annotations(namespace)
    if labels.get(LABEL_APP) == YUNIKORN_POD or not namespaces.should_process(conf, namespace, ns_ann):
        return Response(req.uid, True)
    patch.append({"op": "add", "path": "/spec/schedulerName", "value": SCHEDULER_NAME})
    if namespaces.should_label(conf, namespace, ns_ann):
        patch.append({"op": "add", "path": "/metadata/labels",
                      "value": _labels(conf, namespace, labels, annotations)})
        _preemption(req.object, annotations, cluster, patch)
    return Response(req.uid, True, patch=patch)


def _template(kind: str, obj: Any) -> tuple[Any, str | None]:
    """The pod template of a workload object, or Go's error for a spec that does not decode."""
    type_name = GO_TYPES[kind]
    _, _, error = object_meta(obj, type_name)
    if error:
        return None, error
    path = TEMPLATES[kind]
    for depth, key in enumerate(path):
        child = obj.get(key) if isinstance(obj, dict) else None
        if child is not None and not isinstance(child, dict):
            where = ".".join(path[:depth + 1])
            return None, (f"json: cannot unmarshal {go_type(child)} into Go struct field "
                          f"{type_name.split('.')[-1]}.{where} of type object")
        obj = child
    return obj, None


def _template_meta(kind: str, obj: Any) -> tuple[dict[str, str], dict[str, str], str | None]:
    """The labels and annotations of a workload's pod template (Go's error when it does not decode)."""
    template, error = _template(kind, obj)
    if error:
        return {}, {}, error
    return object_meta(template, "v1.PodTemplateSpec")


def workload(conf: AdmissionConf, cluster: Cluster, req: Request, namespace: str) -> Response:
    """A workload's CREATE or UPDATE: the template's `user.info` is checked like a pod's, before
    (and whatever) its labels or namespace say; an UPDATE that leaves it as it was passes (it was
    checked when it was set). YuniKorn checks CREATE only, and only a processed template: a
    template edited afterwards, or created with labels that skip the check, ran its pods as
    anyone (security review 2, N3). A template without it gets the submitter's, as on CREATE, so
    removing it does not make the pods the controller's; but a system user's UPDATE (a controller
    on a workload older than the webhook) is not stamped, which would start a rollout."""
    if req.kind == "ReplicaSet" and matches(conf.system_users, req.user):
        return Response(req.uid, True)      # the Deployment controller copying a checked template
    labels, annotations, error = _template_meta(req.kind, req.object)
    if error:
        return Response(req.uid, False, error)
    if req.operation == "UPDATE":
        _, old_annotations, error = _template_meta(req.kind, req.old_object)
        if error:
            return Response(req.uid, False, error)
        if (usergroup.ANN_USER_INFO in annotations
                and annotations[usergroup.ANN_USER_INFO] == old_annotations.get(usergroup.ANN_USER_INFO)):
            return Response(req.uid, True)
    denied = _check_user_info(conf, req, annotations)
    if denied:
        return denied
    if not _processes(conf, cluster, namespace, labels):
        return Response(req.uid, True)
    if usergroup.ANN_USER_INFO in annotations or conf.bypass_auth:
        return Response(req.uid, True)
    if req.operation == "UPDATE" and matches(conf.system_users, req.user):
        return Response(req.uid, True)      # a controller touching a template made before us
    path = "/" + "/".join(TEMPLATES[req.kind]) + "/metadata/annotations"
    value = usergroup.user_info_value(req.user, req.groups)
    return Response(req.uid, True, patch=[{"op": "add", "path": path,
                                           "value": {**annotations, usergroup.ANN_USER_INFO: value}}])


def pod_update(conf: AdmissionConf, cluster: Cluster, req: Request, namespace: str) -> Response:
    """A changed `user.info` is denied, first and whatever the labels and namespace: YuniKorn
    skips a pod labelled `app=yunikorn` or not processed before comparing, so adding that label
    in the same update let a forged value in (security review 2, N3)."""
    _, new_ann, error = object_meta(req.object, "v1.Pod")
    if error:
        return Response(req.uid, False, error)
    _, old_ann, error = object_meta(req.old_object, "v1.Pod")
    if error:
        return Response(req.uid, False, error)
    if old_ann.get(usergroup.ANN_USER_INFO, "") != new_ann.get(usergroup.ANN_USER_INFO, ""):
        return Response(req.uid, False, "user info annotation change is not allowed")
    return Response(req.uid, True)


def mutate(conf: AdmissionConf, cluster: Cluster, req: Request) -> Response:
    namespace = req.namespace or "default"
    if req.kind == "Pod":
        update = req.operation == "UPDATE"
        return (pod_update if update else pod_create)(conf, cluster, req, namespace)
    if req.kind not in TEMPLATES:
        return Response(req.uid, True)
    return workload(conf, cluster, req, namespace)


__all__ = ["Cluster", "app_id", "mutate"]
