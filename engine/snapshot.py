"""The state snapshot document (docs/CONTRACTS.md) built from a Scheduler, in YuniKorn DAO shapes.

`build(scheduler, pid=..)` returns the dict the web serves as-is: `partitions` (PartitionInfo),
`queues` (PartitionQueueDAOInfo tree per partition), `applications` (ApplicationDAOInfo),
`nodes` (NodeDAOInfo) and `usage` (the UGM's users/groups REST JSON). Resources are maps of
name -> integer, as YuniKorn's REST shows them. `SnapshotPublisher` rate-limits publishing so
that building the document never dominates the scheduling cycle.
"""

from __future__ import annotations

import datetime
import gc
import importlib.metadata
import logging
import os
import platform
import time
from collections import Counter
from typing import Any

import msgspec

from engine import config_doc, placement
from engine.objects import MIN_PRIORITY, Queue, abs_used, omit_empty
from engine.partition import Partition
from engine.partition.preemption import queue_priority
from shm.errors import SnapshotTooLargeError
from si import resources

log = logging.getLogger("ykshm.engine")


def _package_version() -> str:
    try:
        return importlib.metadata.version("ykshm")
    except importlib.metadata.PackageNotFoundError:
        return "dev"


BUILD_VERSION = _package_version()


QUEUE_OMITEMPTY = ("status", "pendingResource", "maxResource", "guaranteedResource",
                   "allocatedResource", "preemptingResource", "headroom", "properties", "parent",
                   "template", "children", "childNames", "absUsedCapacity", "maxRunningApps",
                   "runningApps", "allocatingAcceptedApps", "sortingPolicy", "preemptionDelay",
                   "quotaPreemptionDelay", "priorityOffset")
"""PartitionQueueDAOInfo keys YuniKorn omits when empty (the others are always present)."""


def _template_dao(q: Queue) -> dict[str, Any] | None:
    t = q.template
    if t is None:
        return None
    return omit_empty({"maxApplications": t.max_applications, "maxResource": dict(t.max),
                       "guaranteedResource": dict(t.guaranteed), "properties": dict(t.properties)},
                      ("maxApplications", "maxResource", "guaranteedResource", "properties"))


def _priority_offset(q: Queue) -> int:
    try:
        return int(q.properties.get("priority.offset", "0"))
    except ValueError:
        return 0


def _headroom(part: Partition, q: Queue, parent: dict[str, int] | None) -> dict[str, int] | None:
    """YuniKorn's getHeadRoom: what is left under the queue's own max (root's: the partition's
    capacity), at most the parent's headroom; a queue without a max has its parent's. Not
    clamped at 0: a max lowered below the usage shows as a negative headroom, as in YuniKorn."""
    own = part.capacity if q.parent is None else q.max
    if not own:
        return parent
    room = {name: limit - q.allocated.get(name, 0) for name, limit in own.items()}
    if parent is None:
        return room
    return {**parent, **{name: min(v, parent[name]) if name in parent else v
                         for name, v in room.items()}}


def _queue_dao(part: Partition, q: Queue, parent_room: dict[str, int] | None = None) -> dict[str, Any]:
    """PartitionQueueDAOInfo as YuniKorn's core builds it (partition named on the root only)."""
    headroom = _headroom(part, q, parent_room)
    props = q.properties
    preemption_policy = props.get("preemption.policy", "default")
    children = [_queue_dao(part, c, headroom) for c in q.children.values()]
    if q.is_leaf:  # an application's priority: its highest pending ask's (YuniKorn)
        highest = max((app.pending[0].priority for app in q.apps.values() if app.pending),
                      default=MIN_PRIORITY)
    else:
        highest = max((c["currentPriority"] for c in children), default=MIN_PRIORITY)
    dao: dict[str, Any] = {
        "queuename": q.path,
        "status": "Draining" if q.draining else "Active",
        "partition": part.name if q.parent is None else "",
        "pendingResource": resources.strip_zero(q.pending),
        "maxResource": dict(q.max) if q.parent is not None else dict(part.capacity),
        "guaranteedResource": dict(q.guaranteed),
        "allocatedResource": resources.strip_zero(q.allocated),
        "preemptingResource": resources.strip_zero(q.preempting),
        "headroom": headroom or {},
        "isLeaf": q.is_leaf,
        "isManaged": not q.dynamic,
        "properties": dict(props),
        "parent": q.parent.path if q.parent else "",
        "template": _template_dao(q),
        "children": children,
        "childNames": [c.path for c in q.children.values()],
        "absUsedCapacity": abs_used(part.capacity if q.parent is None else q.max,
                                    resources.strip_zero(q.allocated)),
        "maxRunningApps": q.max_apps,
        "runningApps": q.running_apps,
        "currentPriority": queue_priority(q, highest),
        "allocatingAcceptedApps": [a.app_id for a in q.apps.values()
                                   if a.fsm.state.value == "Accepted"],
        # a parent queue sorts its children fair, whatever its properties say (YuniKorn)
        "sortingPolicy": props.get("application.sort.policy", "fifo") if q.is_leaf else "fair",
        "prioritySorting": props.get("application.sort.priority", "enabled") != "disabled",
        "preemptionEnabled": preemption_policy != "disabled",
        "isPreemptionFence": preemption_policy == "fence",
        "preemptionDelay": props.get("preemption.delay", "30s"),
        "quotaPreemptionDelay": "0s",  # ykshm has no quota preemption (YuniKorn's default: off)
        "isPriorityFence": props.get("priority.policy", "default") == "fence",
        "priorityOffset": _priority_offset(q),
    }
    return omit_empty(dao, QUEUE_OMITEMPTY)


def _partition_info(part: Partition, cluster_id: str, started_nano: int) -> dict[str, Any]:
    """PartitionInfo; the partition became Active when the engine started."""
    states = Counter(a.fsm.state.value for a in part.all_apps())
    apps = {"total": sum(states.values()), **states}
    used = resources.strip_zero(part.root.allocated)
    capacity = {"capacity": dict(part.capacity), "usedCapacity": used,
                "utilization": abs_used(part.capacity, used)}
    return omit_empty({
        "clusterId": cluster_id,
        "name": part.name,
        "capacity": omit_empty(capacity, tuple(capacity)),
        "nodeSortingPolicy": {"type": part.node_sort_policy, "resourceWeights":
                              {"memory": 1.0, "vcore": 1.0}},
        "totalNodes": len(part.nodes),
        "applications": apps,
        "totalContainers": sum(len(a.allocations) for a in part.apps.values()),
        "state": "Active",
        "lastStateTransitionTime": started_nano,
        "preemptionEnabled": part.preemption_enabled,
        "quotaPreemptionEnabled": False,
    }, ("totalNodes", "totalContainers"))


def _build_info(rm: dict[str, Any]) -> dict[str, str]:
    """One entry of ClusterDAOInfo.rmBuildInformation (the UI shows buildVersion, buildDate, rmId)."""
    return {"buildVersion": BUILD_VERSION, "buildDate": _iso(rm.get("registeredNano", 0)),
            "isPluginVersion": "false", "rmId": rm["rmID"], "arch": platform.machine(),
            "pythonVersion": platform.python_version(), "shimVersion": str(rm.get("version", ""))}


def _iso(nano: int) -> str:
    return datetime.datetime.fromtimestamp(nano / 1e9, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S%z")


def build(scheduler: Any, *, pid: int | None = None, fragments: bool = False) -> dict[str, Any]:
    """The whole snapshot document of the scheduler's current state.

    With `fragments`, applications and nodes are cached pre-serialised `orjson.Fragment`s
    (only changed objects are encoded again): for publishing, not for inspecting."""
    doc: dict[str, Any] = {
        "engine": {"pid": pid if pid is not None else os.getpid(),
                   "instanceUUID": scheduler.instance_uuid,
                   "startedNano": scheduler.started_nano,
                   "publishedNano": time.time_ns(),
                   "rmIDs": sorted(scheduler.rms), "cycles": scheduler.cycles},
        "partitions": [], "queues": {}, "applications": {}, "nodes": {}, "usage": {}, "placementRules": {},
        "rmBuildInformation": [_build_info(rm) for _, rm in sorted(scheduler.rms.items())],
        "history": scheduler.history.document(),
        "config": config_doc.document(scheduler.config.source, scheduler.config.checksum,
                                      scheduler.config.extra),
    }
    if scheduler.reload_error:
        when, why = scheduler.reload_error
        doc["engine"]["reloadError"] = {"timeNano": when, "message": why}
    if scheduler.config_warnings:
        doc["engine"]["configWarnings"] = list(scheduler.config_warnings)
    doc["engine"]["configSource"] = scheduler.config_origin
    doc["engine"]["eventSettings"] = msgspec.to_builtins(scheduler.config.event)
    doc["metrics"] = scheduler.metrics.document()
    cluster_id = next(iter(sorted(scheduler.rms)), "")
    for name, part in scheduler.partitions.items():
        doc["partitions"].append(_partition_info(part, cluster_id, scheduler.started_nano))
        doc["queues"][name] = _queue_dao(part, part.root)
        doc["placementRules"][name] = placement.rules_dao(part.placement_rules)
        if fragments:
            doc["applications"][name] = [a.fragment() for a in part.all_apps()]
            doc["nodes"][name] = [n.fragment() for n in part.nodes.values()]
        else:
            doc["applications"][name] = [a.dao() for a in part.all_apps()]
            doc["nodes"][name] = [n.dao() for n in part.nodes.values()]
        doc["usage"][name] = {"users": part.ugm.users_json(), "groups": part.ugm.groups_json()}
    # after the DAOs above were built (a DAO counts what it leaves out when it is built)
    doc["engine"]["daoTagsTruncated"] = sum(a.tags_cut for part in scheduler.partitions.values()
                                            for a in part.all_apps())
    return doc


BASE_HALF_BYTES = 32 << 20
"""Room for the live state (queues, nodes, running applications) in each half of NAME.state."""

BYTES_PER_RETAINED_APP = 2048
"""Budget per finished application kept visible: ~930 bytes measured (one allocation, short
names), doubled for longer IDs, tags and state logs."""


def snapshot_size(partitions: int, max_retained_apps: int) -> int:
    """NAME.state's size for a configuration: a 4 KiB header and two halves of
    `BASE_HALF_BYTES + partitions * maxRetainedApplications * BYTES_PER_RETAINED_APP`
    (the defaults, 1 partition and 10,000 apps: 2 x 51.5 MiB; pages are used as written)."""
    half = BASE_HALF_BYTES + partitions * max_retained_apps * BYTES_PER_RETAINED_APP
    return 4096 + 2 * half


def unavailable_document(engine: dict[str, Any], reason: str) -> dict[str, Any]:
    """What is published when the state does not fit: readers answer 503 with `reason` and the
    healthcheck fails its "State snapshot" check, instead of serving the last state as current."""
    return {"engine": engine, "unavailable": {"reason": reason, "sinceNano": time.time_ns()}}


class SnapshotPublisher:
    """Publishes `build(...)` through a SnapshotWriter at most every `min_interval` seconds,
    only when the scheduler's version changed, and never more often than `cost_factor` times
    the time the last build took (so a huge state backs off on its own). A document too large for
    the segment is replaced by `unavailable_document` (logged once, retried at the next change)."""

    def __init__(self, scheduler: Any, writer: Any, *, min_interval: float = 0.2,
                 cost_factor: float = 10.0) -> None:
        self.scheduler = scheduler
        self.writer = writer
        self.min_interval = min_interval
        self.cost_factor = cost_factor
        self.last_version = -1
        self.last_cost = 0.0
        self.published = 0
        self.total_cost = 0.0
        self.failure = ""
        """Why the last publish could not write the state ("" after a good one)."""

    @property
    def interval(self) -> float:
        return max(self.min_interval, self.last_cost * self.cost_factor)

    def maybe_publish(self, force: bool = False) -> bool:
        version = self.scheduler.version
        if version == self.last_version and not force:
            return False
        start = time.perf_counter()
        gc_was_enabled = gc.isenabled()
        gc.disable()  # a large short-lived document must not trigger full collections
        try:
            self._publish(build(self.scheduler, fragments=True))
        finally:
            if gc_was_enabled:
                gc.enable()
        self.last_cost = time.perf_counter() - start
        self.total_cost += self.last_cost
        self.last_version = version
        self.published += 1
        return True

    def _publish(self, doc: dict[str, Any]) -> None:
        try:
            self.writer.publish(doc)
        except SnapshotTooLargeError as exc:
            reason = (f"The engine's state no longer fits its snapshot ({exc}): lower "
                      "service.maxRetainedApplications or start the engine with a larger --snapshot-size")
            if not self.failure:
                log.error("snapshot: %s", reason)
            self.failure = reason
            self.writer.publish(unavailable_document(doc["engine"], reason))
            return
        if self.failure:
            log.info("snapshot: the state fits again")
        self.failure = ""
