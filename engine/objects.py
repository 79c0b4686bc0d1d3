"""The scheduler's objects: asks, allocations, nodes, queues and applications.

Plain slotted classes with no behaviour beyond their own bookkeeping; the partition
(`engine.partition`) owns them and is the only code that changes them, so every change can emit
its event in one place. Resources are `dict[str, int]` (see `si.resources`). Timestamps
(epoch ns) are given by the partition, from its injected wall clock.
"""

from __future__ import annotations

import itertools
from typing import Any

import orjson
from sortedcontainers import SortedList

from engine.app_state import ApplicationFSM, AppState
from engine.daotags import dao_tags
from engine.predicates import Placement, Taint, admits
from engine.ugm import UserGroup
from si import resources
from si.tags import (CORE_HOSTNAME_ATTRIBUTE, CORE_RACKNAME_ATTRIBUTE, PARTITION_ATTRIBUTE,
                     PLACEMENT_TAG)

_seq = itertools.count()

MIN_PRIORITY = -2**31
"""The lowest priority (YuniKorn's configs.MinPriority): an application's `maxRequestPriority`
and a queue's priority with nothing pending."""

UNKNOWN_INSTANCE_TYPE = "UNKNOWN"
"""The `resourceHistory` key of a node without `si/instance-type` (YuniKorn's)."""


def abs_used(capacity: dict[str, int], used: dict[str, int]) -> dict[str, int]:
    """Percent of `capacity` used, per resource both name (YuniKorn's CalculateAbsUsedCapacity:
    a resource nothing uses is absent, a zero capacity with use is 100)."""
    out: dict[str, int] = {}
    for name, cap in capacity.items():
        value = used.get(name)
        if value is None:
            continue
        out[name] = 0 if value <= 0 else 100 if cap <= 0 else min(int(value / cap * 100), 2**31 - 1)
    return out


def omit_empty(dao: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """`dao` without the `keys` whose value is empty: YuniKorn's DAOs tag those fields
    `omitempty`, so a client sees them absent, never as 0, "", false, null or []."""
    return {k: v for k, v in dao.items() if k not in keys or v not in (None, "", 0, {}, [], False)}


def _ask_order(ask: "Ask") -> tuple[int, int, int]:
    return (-ask.priority, ask.create_time, ask.seq)


class VersionedDao:
    """A REST view (DAO) cached until the object changes: every change bumps `ver`.

    The snapshot is rebuilt often and most nodes and applications have not changed since the
    last one, so their DAO dicts and pre-serialised orjson fragments are kept per version.
    Subclasses have `ver`, `_dao`, `_frag` slots and a `_build_dao()`.
    """

    __slots__ = ()

    def dao(self) -> dict[str, Any]:
        cached = self._dao
        if cached is not None and cached[0] == self.ver:
            return cached[1]
        dao = self._build_dao()
        self._dao = (self.ver, dao)
        return dao

    def fragment(self) -> Any:
        """The DAO pre-serialised (orjson.Fragment), cached like `dao()`."""
        cached = self._frag
        if cached is not None and cached[0] == self.ver:
            return cached[1]
        frag = orjson.Fragment(orjson.dumps(self.dao()))
        self._frag = (self.ver, frag)
        return frag


class Ask:
    """A pending request for one allocation (one pod). Its key becomes the allocation's key.

    `shape` (resources and placement) keys the caches of what failed to fit: asks of one shape
    fit on the same nodes, so one failure stands for all of them.
    """

    __slots__ = ("key", "app_id", "resource", "priority", "create_time", "seq", "placeholder",
                 "task_group", "tags", "placement", "shape", "reserved_node", "reported", "rm_id",
                 "allow_preempt_self", "allow_preempt_other", "queued_ns", "preempt_checked_ns",
                 "triggered_preemption", "meta", "interpod", "pod_shape", "originator")

    def __init__(self, key: str, app_id: str, resource: dict[str, int], priority: int = 0,
                 placeholder: bool = False, task_group: str = "", tags: dict | None = None,
                 *, create_time: int, rm_id: str = "",
                 placement: Placement | None = None) -> None:
        self.key = key
        self.app_id = app_id
        self.resource = resource
        self.priority = priority
        self.create_time = create_time
        self.seq = next(_seq)
        self.placeholder = placeholder
        self.task_group = task_group
        self.tags = tags or {}
        self.placement = placement
        self.shape = (tuple(sorted(resource.items())), placement)
        self.reserved_node: str | None = None
        self.reported: set[str] = set()  # request-event reasons already sent for this ask
        self.rm_id = rm_id
        # preemption (engine.partition.preemption): the pod's policy, when it started waiting
        # (monotonic ns), when it last looked for victims, and whether it already preempted
        self.allow_preempt_self = True
        self.allow_preempt_other = False
        self.queued_ns = 0
        self.preempt_checked_ns: int | None = None
        self.triggered_preemption = False
        # inter-pod affinity (engine.partition.interpod), computed when first needed:
        self.meta: tuple[str, dict[str, str]] | None = None  # namespace, labels (from tags)
        self.interpod: Any = None    # the trackers it holds (interpod.AskTerms)
        self.pod_shape: tuple | None = None  # shape + namespace + labels
        self.originator = False
        """The application's first pod (the SI's originator): its REST views say so."""

    def set_placement(self, placement: Placement | None, tag: str | None) -> None:
        """A new placement (and its tag) for this pending ask; its shape follows."""
        self.placement = placement
        self.shape = (self.shape[0], placement)
        self.pod_shape = None
        if tag is None:
            self.tags.pop(PLACEMENT_TAG, None)
        else:
            self.tags[PLACEMENT_TAG] = tag

    def dao(self) -> dict[str, Any]:
        """AllocationAskDAOInfo; `tags_cut` of it is what `dao_tags` left out."""
        return self.dao_and_cut()[0]

    def dao_and_cut(self) -> tuple[dict[str, Any], int]:
        tags, cut = dao_tags(self.tags)
        return omit_empty({"allocationKey": self.key, "applicationId": self.app_id,
                           "resource": dict(self.resource), "priority": str(self.priority),
                           "requestTime": self.create_time, "placeholder": self.placeholder,
                           "taskGroupName": self.task_group, "allocationTags": tags,
                           "originator": self.originator}, _ASK_OMITEMPTY), cut


_ASK_OMITEMPTY = ("allocationTags", "requestTime", "resource", "priority", "applicationId",
                  "placeholder", "taskGroupName", "originator")
"""AllocationAskDAOInfo keys YuniKorn omits when empty."""
_ALLOCATION_OMITEMPTY = ("allocationTags", "allocationTime", "resource", "priority", "nodeId",
                         "applicationId", "placeholder", "taskGroupName", "originator")
"""AllocationDAOInfo keys YuniKorn omits when empty (it has no partition nor allocationID)."""


class Allocation:
    """Resources bound on a node for one ask (or recovered from the RM)."""

    __slots__ = ("key", "app_id", "partition", "node_id", "resource", "placeholder",
                 "task_group", "priority", "create_time", "recovered", "replacing", "tags",
                 "placement", "meta", "_dao", "allow_preempt_self", "preempted", "tags_cut",
                 "originator")

    def __init__(self, key: str, app_id: str, partition: str, node_id: str,
                 resource: dict[str, int], placeholder: bool = False, task_group: str = "",
                 priority: int = 0, recovered: bool = False, *, create_time: int,
                 tags: dict[str, str] | None = None,
                 placement: Placement | None = None) -> None:
        self.key = key
        self.app_id = app_id
        self.partition = partition
        self.node_id = node_id
        self.resource = resource
        self.placeholder = placeholder
        self.task_group = task_group
        self.priority = priority
        self.create_time = create_time
        self.recovered = recovered
        self.replacing = False
        self.tags = tags or {}
        """The ask's tags (kubernetes.io/meta/namespace, .../podName...): the UI names pods by them."""
        self.placement = placement
        """The ask's placement: its anti-affinity terms keep other pods away while it runs."""
        self.meta: tuple[str, dict[str, str]] | None = None  # namespace, labels (interpod)
        self._dao: dict[str, Any] | None = None
        self.tags_cut = 0
        """Tags its DAO leaves out (engine.daotags), known once the DAO is built."""
        self.allow_preempt_self = True
        """False: the pod asked not to be a preemption victim (considered last)."""
        self.preempted = False
        """Chosen as a victim and released to the shim; booked until the shim confirms."""
        self.originator = False
        """The application's first pod (the SI's originator, from its ask or the RM)."""

    def dao(self) -> dict[str, Any]:
        """AllocationDAOInfo (computed once: an allocation never changes)."""
        if self._dao is None:
            self._dao = self._build_dao()
        return self._dao

    def _build_dao(self) -> dict[str, Any]:
        dao = {"allocationKey": self.key,
               "resource": dict(self.resource), "priority": str(self.priority),
               "nodeId": self.node_id, "applicationId": self.app_id,
               "placeholder": self.placeholder, "taskGroupName": self.task_group,
               "allocationTime": self.create_time, "originator": self.originator}
        if self.tags:
            dao["allocationTags"], self.tags_cut = dao_tags(self.tags)
        return omit_empty(dao, _ALLOCATION_OMITEMPTY)


class Node(VersionedDao):
    """A node: capacity, what foreign pods occupy, what we allocated, and the flags.

    `attributes` are also the labels node placement matches; `taints` is their parsed
    `ykshm.io/taints` (the partition keeps the two in step).
    """

    __slots__ = ("node_id", "rm_id", "attributes", "taints", "capacity", "occupied", "allocated",
                 "available", "ready", "schedulable", "allocations", "reserved_for",
                 "index_pos", "partition", "ver", "_dao", "_frag")

    def __init__(self, node_id: str, rm_id: str, partition: str, capacity: dict[str, int],
                 occupied: dict[str, int], attributes: dict[str, str],
                 schedulable: bool = True, ready: bool = True,
                 taints: tuple[Taint, ...] = ()) -> None:
        self.node_id = node_id
        self.rm_id = rm_id
        self.partition = partition
        self.attributes = attributes
        self.taints = taints
        self.capacity = capacity
        self.occupied = occupied
        self.allocated: dict[str, int] = {}
        self.available: dict[str, int] = {}
        self.ready = ready
        self.schedulable = schedulable
        self.allocations: dict[str, Allocation] = {}
        self.reserved_for: tuple[str, str] | None = None  # (app_id, ask key)
        self.index_pos = -1
        self.ver = 0
        self._dao: tuple[int, dict[str, Any]] | None = None
        self._frag: tuple[int, Any] | None = None
        self.recompute()

    def recompute(self) -> None:
        self.ver += 1
        self.available = resources.sub(resources.sub(self.capacity, self.occupied), self.allocated)

    @property
    def usable(self) -> bool:
        return self.ready and self.schedulable

    def admits(self, placement: Placement | None) -> bool:
        """Whether an ask with this placement may go here (labels and taints only)."""
        return admits(placement, self.node_id, self.attributes, self.taints)

    def _build_dao(self) -> dict[str, Any]:
        """NodeDAOInfo as YuniKorn's core answers it: `hostName`/`rackName` from the
        `si/hostname`/`si/rackname` attributes, the partition attribute normalised to
        `[rmID]partition` (YuniKorn's rmproxy), usage maps without zero entries."""
        allocated = resources.strip_zero(self.allocated)
        utilized = {name: pct for name, pct in abs_used(self.capacity, allocated).items()
                    if self.capacity.get(name, 0) > 0}
        attributes = dict(self.attributes)
        if PARTITION_ATTRIBUTE in attributes:
            attributes[PARTITION_ATTRIBUTE] = f"[{self.rm_id}]{self.partition}"
        return omit_empty({
            "nodeID": self.node_id, "hostName": self.attributes.get(CORE_HOSTNAME_ATTRIBUTE, ""),
            "rackName": self.attributes.get(CORE_RACKNAME_ATTRIBUTE, ""),
            "attributes": attributes,
            "capacity": dict(self.capacity), "allocated": allocated,
            "occupied": resources.strip_zero(self.occupied),
            "available": {k: max(0, v) for k, v in self.available.items()},
            "utilized": utilized,
            "allocations": [a.dao() for a in self.allocations.values()],
            "schedulable": self.schedulable,
            "isReserved": self.reserved_for is not None,
            "reservations": ([f"{self.reserved_for[0]}|{self.reserved_for[1]}"]
                             if self.reserved_for else [])}, _NODE_OMITEMPTY)


_NODE_OMITEMPTY = ("hostName", "rackName", "attributes", "capacity", "allocated", "occupied",
                   "available", "utilized", "allocations", "reservations")
"""NodeDAOInfo keys YuniKorn omits when empty (it answers no `ready` nor `partition`)."""


class Queue:
    """A queue of the hierarchy. Usage (`allocated`) and counters include all descendants."""

    __slots__ = ("name", "path", "parent", "children", "parent_flag", "dynamic", "guaranteed",
                 "max", "max_apps", "properties", "limits", "template", "apps", "allocated",
                 "pending", "pending_count", "prioritized", "running_apps", "draining",
                 "order", "share", "preempting")

    def __init__(self, name: str, path: str, parent: "Queue | None", *, leaf: bool,
                 dynamic: bool = False) -> None:
        self.name = name
        self.path = path
        self.parent = parent
        self.children: dict[str, Queue] = {}
        self.parent_flag = not leaf
        self.dynamic = dynamic
        self.guaranteed: dict[str, int] = {}
        self.max: dict[str, int] = {}
        self.max_apps = 0
        self.properties: dict[str, str] = {}
        self.limits: list[dict[str, Any]] = []
        self.template: Any = None
        self.apps: dict[str, Application] = {}
        self.allocated: dict[str, int] = {}
        self.pending: dict[str, int] = {}
        self.pending_count = 0
        self.prioritized = 0
        """Pending asks of this leaf's apps with a priority other than 0: while there are none,
        `application.sort.priority` cannot change the order and the cycle skips the scan."""
        self.running_apps = 0
        self.draining = False
        self.order = next(_seq)
        self.share = 0.0
        self.preempting: dict[str, int] = {}
        """Usage of preemption victims not yet released by the shim (counts in `allocated`)."""

    @property
    def is_leaf(self) -> bool:
        return not self.parent_flag

    def ancestors(self):
        """This queue and its parents up to root."""
        q: Queue | None = self
        while q is not None:
            yield q
            q = q.parent

    def update_share(self) -> None:
        self.share = resources.share(self.allocated, self.guaranteed)


_APP_OMITEMPTY = ("usedResource", "maxUsedResource", "pendingResource", "submissionTime",
                  "startTime", "finishedTime", "requests", "allocations", "applicationState",
                  "user", "groups", "rejectedMessage", "stateLog", "placeholderData",
                  "hasReserved", "reservations", "maxRequestPriority")
"""ApplicationDAOInfo keys YuniKorn omits when empty (`resourceHistory` is a struct: always
there, `{}` until an allocation is released)."""


class Application(VersionedDao):
    """An application: its asks (pending, ordered by priority then age) and allocations."""

    __slots__ = ("app_id", "partition", "queue", "queue_name", "ugi", "tags", "rm_id", "fsm",
                 "submit_time", "asks", "pending", "allocations", "allocated", "placeholder_ask",
                 "gang_style", "ph_timeout_ms", "finished_time", "state_log", "rejected_message",
                 "counted_running", "share", "pending_res", "max_used", "ph_timer_started",
                 "start_time", "seq", "placeholder_data", "ver", "_dao", "_frag", "tags_cut",
                 "history")

    def __init__(self, app_id: str, partition: str, queue_name: str, ugi: UserGroup, tags: dict,
                 rm_id: str, placeholder_ask: dict[str, int], gang_style: str,
                 ph_timeout_ms: int, *, submit_time: int) -> None:
        self.app_id = app_id
        self.partition = partition
        self.queue: Queue | None = None
        self.queue_name = queue_name
        self.ugi = ugi
        self.tags = tags
        self.rm_id = rm_id
        self.fsm = ApplicationFSM()
        self.submit_time = submit_time
        self.start_time = 0
        self.finished_time = 0
        self.asks: dict[str, Ask] = {}
        self.pending: SortedList = SortedList(key=_ask_order)
        self.allocations: dict[str, Allocation] = {}
        self.allocated: dict[str, int] = {}
        self.pending_res: dict[str, int] = {}
        self.max_used: dict[str, int] = {}
        self.placeholder_ask = placeholder_ask
        self.gang_style = gang_style or "Soft"
        self.ph_timeout_ms = ph_timeout_ms
        self.ph_timer_started = False
        self.state_log: list[dict[str, Any]] = []
        """The states entered, oldest first: New is where an application starts, not a change
        (YuniKorn's stateLog opens with Accepted)."""
        self.rejected_message = ""
        self.counted_running = False
        self.share = 0.0
        self.seq = next(_seq)
        # task group -> {"count", "replaced", "timedout", "minResource"}
        self.placeholder_data: dict[str, dict[str, Any]] = {}
        self.ver = 0
        self._dao: tuple[int, dict[str, Any]] | None = None
        self._frag: tuple[int, Any] | None = None
        self.tags_cut = 0
        """Tags its DAO (its requests' and allocations') leaves out (engine.daotags)."""
        self.history: dict[str, dict[str, dict[str, int]]] = {}
        """The REST `resourceHistory`: per kind (resourceUsage, preemptedResource,
        placeholderResource), per node instance type, resource x whole seconds held by the
        allocations released so far (YuniKorn's TrackedResource)."""

    def track_released(self, alloc: "Allocation", instance_type: str, now: int) -> None:
        """Add a released allocation's resource-seconds to `history` (YuniKorn's
        trackCompletedResource: preempted, else placeholder, else used)."""
        kind = ("preemptedResource" if alloc.preempted else
                "placeholderResource" if alloc.placeholder else "resourceUsage")
        seconds = max(0, now - alloc.create_time) // 1_000_000_000
        per_type = self.history.setdefault(kind, {}).setdefault(
            instance_type or UNKNOWN_INSTANCE_TYPE, {})
        for name, value in alloc.resource.items():
            per_type[name] = per_type.get(name, 0) + value * seconds

    # --- placeholder counters (the REST placeholderData) ---------------------------------------

    def count_placeholder(self, task_group: str, res: dict[str, int]) -> None:
        """One more placeholder of a task group (asked, or recovered already placed)."""
        data = self.placeholder_data.setdefault(
            task_group, {"count": 0, "replaced": 0, "timedout": 0, "minResource": res})
        data["count"] += 1

    def count_timedout(self, task_group: str) -> None:
        """One more placeholder of the task group timed out (or was released as mismatched)."""
        data = self.placeholder_data.get(task_group)
        if data is not None:
            data["timedout"] += 1

    def count_replaced(self, task_group: str) -> None:
        """One more placeholder of the task group was replaced by a real allocation."""
        data = self.placeholder_data.get(task_group)
        if data is not None:
            data["replaced"] += 1

    @property
    def state(self) -> AppState:
        return self.fsm.state

    def _build_dao(self) -> dict[str, Any]:
        """ApplicationDAOInfo as YuniKorn's core answers it (its omitempty fields left out
        when empty); the application's own tags are not in it (YuniKorn's has none)."""
        requests = [a.dao_and_cut() for a in self.pending]
        allocations = [a.dao() for a in self.allocations.values()]
        self.tags_cut = sum(c for _, c in requests) + \
            sum(a.tags_cut for a in self.allocations.values())
        return omit_empty({
            "applicationID": self.app_id,
            "usedResource": resources.strip_zero(self.allocated),
            "maxUsedResource": resources.strip_zero(self.max_used),
            "pendingResource": resources.strip_zero(self.pending_res),
            "partition": self.partition,
            "queueName": self.queue.path if self.queue else self.queue_name,
            "submissionTime": self.submit_time,
            "startTime": self.start_time // 1_000_000,  # YuniKorn: UnixMilli
            "finishedTime": self.finished_time or None,
            "requests": [dao for dao, _ in requests],
            "allocations": allocations,
            "applicationState": self.fsm.state.value,
            "user": self.ugi.user, "groups": list(self.ugi.groups),
            "rejectedMessage": self.rejected_message,
            "stateLog": list(self.state_log),
            "placeholderData": [
                {"taskGroupName": tg, "count": d["count"], "minResource": d["minResource"],
                 "replaced": d["replaced"], "timedout": d["timedout"]}
                for tg, d in self.placeholder_data.items()],
            "hasReserved": any(a.reserved_node for a in self.asks.values()),
            "reservations": [f"{a.reserved_node}|{a.key}" for a in self.asks.values()
                             if a.reserved_node],
            "maxRequestPriority": max((a.priority for a in self.pending), default=MIN_PRIORITY),
            "resourceHistory": {kind: {t: dict(r) for t, r in per.items()}
                                for kind, per in self.history.items()}}, _APP_OMITEMPTY)
