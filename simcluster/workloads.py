"""Deployments, ReplicaSets and Jobs as the apiserver stores them: defaults and validation (422
naming the field); what their controllers do with them is `controllers`.

Defaults as apps/v1 and batch/v1: a Deployment's `replicas: 1`, `strategy: RollingUpdate` with
`maxSurge`/`maxUnavailable` 25%, `revisionHistoryLimit: 10`, `progressDeadlineSeconds: 600`; a
ReplicaSet's `replicas: 1`; a Job's `parallelism: 1`, `completions: 1` (both when neither is
given), `backoffLimit: 6`, `completionMode: NonIndexed`, and (no `manualSelector`) the selector
`batch.kubernetes.io/controller-uid: UID` with the labels `controller-uid`, `job-name`,
`batch.kubernetes.io/controller-uid` and `batch.kubernetes.io/job-name` added to its pod template.
Every one carries `metadata.generation` (1, then +1 per spec change), which `observedGeneration`
answers. Checked: a selector, template labels it selects, a template with containers, replicas and
counts >= 0, a Job template's `restartPolicy` Never or OnFailure.
"""

from __future__ import annotations

from typing import Any

from .disruption import selector_matches
from .errors import Invalid
from .objects import Cause, invalid, required
from .resources import DEPLOYMENTS, JOBS, REPLICASETS, Resource

Obj = dict[str, Any]
KINDS = (DEPLOYMENTS, REPLICASETS, JOBS)


def _counts(spec: Obj, keys: tuple[str, ...], causes: list[Cause]) -> None:
    for key in keys:
        value = spec.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            causes.append(invalid(f"spec.{key}", value, "must be greater than or equal to 0"))


def _check_template(spec: Obj, causes: list[Cause]) -> None:
    template = spec.get("template")
    if not isinstance(template, dict):
        causes.append(required("spec.template"))
        return
    pod_spec = template.get("spec")
    if not isinstance(pod_spec, dict) or not pod_spec.get("containers"):
        causes.append(required("spec.template.spec.containers"))
    labels = (template.get("metadata") or {}).get("labels") or {}
    selector = spec.get("selector")
    if not isinstance(selector, dict) or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        causes.append(required("spec.selector"))
    elif not selector_matches(selector, labels):
        causes.append(invalid("spec.template.metadata.labels", labels,
                              "`selector` does not match template `labels`"))


def _default_deployment(spec: Obj) -> None:
    spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    strategy = spec.setdefault("strategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        rolling.setdefault("maxSurge", "25%")
        rolling.setdefault("maxUnavailable", "25%")


def _default_job(obj: Obj) -> None:
    spec, meta = obj["spec"], obj["metadata"]
    if spec.get("parallelism") is None and spec.get("completions") is None:
        spec["completions"] = 1
    if spec.get("parallelism") is None:
        spec["parallelism"] = 1
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    if spec.get("manualSelector"):
        return
    uid, name = meta["uid"], meta["name"]
    spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    template = spec.setdefault("template", {})
    labels = template.setdefault("metadata", {}).setdefault("labels", {})
    labels.update({"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
                   "controller-uid": uid, "job-name": name})


def _validate(res: Resource, obj: Obj) -> None:
    spec = obj.get("spec")
    causes: list[Cause] = []
    if not isinstance(spec, dict):
        raise Invalid.fields(res.kind, obj["metadata"]["name"], [required("spec")], res.group)
    _counts(spec, ("replicas", "parallelism", "completions", "backoffLimit"), causes)
    _check_template(spec, causes)
    if res is JOBS:
        policy = ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy")
        if policy not in ("Never", "OnFailure"):
            causes.append(("FieldValueNotSupported", "spec.template.spec.restartPolicy",
                           f'Unsupported value: "{policy or ""}": supported values: "OnFailure", "Never"'))
    if res is DEPLOYMENTS and (spec.get("strategy") or {}).get("type") not in ("RollingUpdate", "Recreate"):
        causes.append(("FieldValueNotSupported", "spec.strategy.type",
                       f'Unsupported value: "{spec["strategy"].get("type")}": supported values: "Recreate", '
                       '"RollingUpdate"'))
    if causes:
        raise Invalid.fields(res.kind, obj["metadata"]["name"], causes, res.group)


def on_create(res: Resource, obj: Obj) -> None:
    """Default and validate a new Deployment, ReplicaSet or Job (in place)."""
    spec = obj.setdefault("spec", {}) if isinstance(obj.get("spec", {}), dict) else obj["spec"]
    if res is DEPLOYMENTS and isinstance(spec, dict):
        _default_deployment(spec)
    elif res is REPLICASETS and isinstance(spec, dict):
        spec.setdefault("replicas", 1)
    elif res is JOBS and isinstance(spec, dict):
        _default_job(obj)
    _validate(res, obj)
    obj["metadata"]["generation"] = 1
    obj.setdefault("status", {})


def on_update(res: Resource, new: Obj, old: Obj) -> None:
    """An update keeps the defaults (and a Job its generated selector) and is validated again."""
    if res is DEPLOYMENTS and isinstance(new.get("spec"), dict):
        _default_deployment(new["spec"])
    elif res is JOBS and isinstance(new.get("spec"), dict):
        old_spec = old.get("spec") or {}
        for key in ("selector", "completionMode", "backoffLimit", "parallelism"):
            if key not in new["spec"] and key in old_spec:
                new["spec"][key] = old_spec[key]
    _validate(res, new)
