"""The state snapshot document (docs/CONTRACTS.md) built from a Scheduler, in YuniKorn DAO shapes.

`build(scheduler, pid=..)` returns the dict the web serves as-is: `partitions` (PartitionInfo),
`queues` (PartitionQueueDAOInfo tree per partition), `applications` (ApplicationDAOInfo),
`nodes` (NodeDAOInfo) and `usage` (the UGM's users/groups REST JSON). Resources are maps of
name -> integer, as YuniKorn's REST shows them. `SnapshotPublisher` rate-limits publishing so
that building the document never dominates the scheduling cycle.
"""

from __future__ import annotations

import gc
import os
import time
from collections import Counter
from typing import Any

from engine import resources
from engine.objects import Queue
from engine.partition import Partition, queues


def _queue_dao(part: Partition, q: Queue) -> dict[str, Any]:
    headroom = queues.headroom(q) if q.max or (q.parent and q.parent.max) else {}
    abs_used: dict[str, int] = {}
    base = q.max or part.capacity
    for name, value in q.allocated.items():
        if base.get(name):
            abs_used[name] = (value * 100) // base[name]
    dao: dict[str, Any] = {
        "queuename": q.path,
        "status": "Draining" if q.draining else "Active",
        "partition": part.name,
        "pendingResource": resources.strip_zero(q.pending),
        "maxResource": dict(q.max) if q.parent is not None else dict(part.capacity),
        "guaranteedResource": dict(q.guaranteed),
        "allocatedResource": resources.strip_zero(q.allocated),
        "preemptingResource": {},
        "headroom": headroom,
        "isLeaf": q.is_leaf,
        "isManaged": not q.dynamic,
        "properties": dict(q.properties),
        "parent": q.parent.path if q.parent else "",
        "templateInfo": None,
        "children": [_queue_dao(part, c) for c in q.children.values()],
        "childNames": [c.path for c in q.children.values()],
        "absUsedCapacity": abs_used,
        "maxRunningApps": q.max_apps,
        "runningApps": q.running_apps,
        "currentPriority": 0,
        "allocatingAcceptedApps": [a.app_id for a in q.apps.values()
                                   if a.fsm.state.value == "Accepted"],
    }
    if q.template is not None:
        dao["templateInfo"] = {"maxApplications": q.template.max_applications,
                               "properties": dict(q.template.properties),
                               "maxResource": dict(q.template.max),
                               "guaranteedResource": dict(q.template.guaranteed)}
    return dao


def _partition_info(part: Partition, cluster_id: str) -> dict[str, Any]:
    states = Counter(a.fsm.state.value for a in part.all_apps())
    apps = {"total": sum(states.values()), **states}
    utilization = {}
    for name, cap in part.capacity.items():
        if cap > 0:
            utilization[name] = (part.root.allocated.get(name, 0) * 100) // cap
    return {
        "clusterId": cluster_id,
        "name": part.name,
        "capacity": {"capacity": dict(part.capacity),
                     "usedCapacity": resources.strip_zero(part.root.allocated),
                     "utilization": utilization},
        "nodeSortingPolicy": {"type": part.node_sort_policy, "resourceWeights":
                              {"memory": 1.0, "vcore": 1.0}},
        "totalNodes": len(part.nodes),
        "applications": apps,
        "totalContainers": sum(len(a.allocations) for a in part.apps.values()),
        "state": "Active",
        "lastStateTransitionTime": 0,
    }


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
        "partitions": [], "queues": {}, "applications": {}, "nodes": {}, "usage": {},
    }
    cluster_id = next(iter(sorted(scheduler.rms)), "")
    for name, part in scheduler.partitions.items():
        doc["partitions"].append(_partition_info(part, cluster_id))
        doc["queues"][name] = _queue_dao(part, part.root)
        if fragments:
            doc["applications"][name] = [a.fragment() for a in part.all_apps()]
            doc["nodes"][name] = [n.fragment() for n in part.nodes.values()]
        else:
            doc["applications"][name] = [a.dao() for a in part.all_apps()]
            doc["nodes"][name] = [n.dao() for n in part.nodes.values()]
        doc["usage"][name] = {"users": part.ugm.users_json(), "groups": part.ugm.groups_json()}
    return doc


class SnapshotPublisher:
    """Publishes `build(...)` through a SnapshotWriter at most every `min_interval` seconds,
    only when the scheduler's version changed, and never more often than `cost_factor` times
    the time the last build took (so a huge state backs off on its own)."""

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
            self.writer.publish(build(self.scheduler, fragments=True))
        finally:
            if gc_was_enabled:
                gc.enable()
        self.last_cost = time.perf_counter() - start
        self.total_cost += self.last_cost
        self.last_version = version
        self.published += 1
        return True
