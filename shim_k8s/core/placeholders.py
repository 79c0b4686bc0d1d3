"""Placeholders: YuniKorn's gang scheduling on the shim side.

A gang application's placeholder pods are created when its first pending pod is asked for; its
real pods wait (Reserving) until every placeholder is placed, or the engine gave up on them.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import orjson

from .. import mapping
from ..mapping import PodInfo
from . import tasks

if TYPE_CHECKING:
    from .coordinator import ShimCore


def gang_ready(core: ShimCore, app_id: str) -> bool:
    """YuniKorn's Reserving: a gang app's real pods wait until every placeholder is placed
    (or the engine gave up on them: a placeholder released or timed out)."""
    if app_id in core.gang_started:
        return True
    origin = core.app_origin.get(app_id)
    if origin is None or not origin.task_groups:
        return True
    want = sum(group.min_member for group in origin.task_groups)
    placed = sum(1 for u in core.app_live.get(app_id, ())
                 if core.pods[u].placeholder and (core.pods[u].node_name or u in core.e_allocs))
    if placed < want:
        return False
    core.gang_started.add(app_id)
    return True


def gang_progress(core: ShimCore, app_id: str, gave_up: bool = False) -> None:
    """A placeholder of app_id was placed or given up: release the held real pods if due."""
    if app_id in core.gang_started or app_id not in core.placeholders_made:
        return
    if gave_up:
        core.gang_started.add(app_id)
    if gang_ready(core, app_id):
        for u in sorted(core.app_live.get(app_id, ())):
            if not core.pods[u].placeholder:
                tasks.reconcile_pod(core, u)


_DNS_BAD = re.compile(r"[^a-z0-9-]+")


def _quantity(name: str, value: int) -> str:
    return f"{value}m" if name == "vcore" else str(value)


def placeholder_pods(info: PodInfo) -> list[dict[str, Any]]:
    """YuniKorn's placeholder pods for a gang application: minMember pods per task group.

    Named `tg-<app>-<group>-<i>` (deterministic, so a restarted shim's create is a harmless 409),
    owned by the pod that defined the app, requesting the group's minResource, scheduled by us,
    annotated `yunikorn.apache.org/placeholder: "true"` and with the task-group name, labelled
    with the group's `labels` (ours win on a clash), and constrained by the group's
    nodeSelector, affinity (node and pod, required terms reach the engine) and tolerations, as
    YuniKorn does.
    """
    pods = []
    for group in info.task_groups:
        requests = {("cpu" if k == "vcore" else k): _quantity(k, v)
                    for k, v in group.min_resource.items() if k != "pods" and v}
        base = _DNS_BAD.sub("-", f"tg-{info.app_id}-{group.name}".lower()).strip("-")[:240]
        placement = orjson.loads(group.placement_spec) if group.placement_spec else {}
        for i in range(group.min_member):
            spec = {"schedulerName": "yunikorn", "restartPolicy": "Never",
                    "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.9",
                                    "resources": {"requests": requests}}], **placement}
            pods.append({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "name": f"{base}-{i}", "namespace": info.namespace,
                    "labels": {**dict(group.labels), "applicationId": info.app_id,
                               "queue": info.queue, "placeholder": "true"},
                    "annotations": {mapping.ANN_PLACEHOLDER: "true",
                                    mapping.ANN_TASK_GROUP_NAME: group.name,
                                    mapping.ANN_APP_ID: info.app_id},
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": info.name,
                                         "uid": info.uid, "controller": False}],
                },
                "spec": spec,
            })
    return pods
