"""One partition: its queue hierarchy, applications, nodes, and the scheduling of its asks.

The partition is the only code that changes the objects of `engine.objects`, and every change
emits its event here (the rows of the event-history seed's "Event overview" tables), through the
`EventSink` the scheduler gives it. Messages for the shim are queued on an `Outbox`; the
scheduler turns them into SI responses. No I/O happens here.

Placement
---------
An application names a queue: a full path (`root.a.b`) or a short name taken under root (`b` ->
`root.b`). If that queue exists it must be a leaf that is not being removed. If it does not
exist, a dynamic leaf is created when its parent exists, is not a leaf, and allows dynamic
children (`parent: true` in the config, or the root queue when no queue is configured under
it). Otherwise the application goes to `root.default`, which is created dynamically if missing.
A dynamic leaf is removed (QUEUE / REMOVE / QUEUE_DYNAMIC) when its last application leaves.

Scheduling
----------
`schedule(deadline)` allocates until nothing more fits or the deadline passes. Each step
descends from root to a leaf choosing children by fair share (usage / guaranteed, then
configuration order), picks an application by the leaf's `application.sort.policy` (fifo:
submission order; fair: smallest share of the queue's guaranteed, else the cluster), and tries its
asks by priority then age. Node choice is `engine.nodes.NodeIndex` (no scan per ask).
Enforcement follows the user-group-usage seed: the UGM usage is increased first, then the queue
maximum is checked up the hierarchy, and the UGM increase is rolled back if the queue check
fails. Queue `maxapplications` and the UGM `maxapplications` are checked before an
application's first allocation (when it would start running).

An ask that fits no node's free space but fits a node's capacity reserves that node (NODE / ADD /
NODE_RESERVATION); the reserved node serves only that ask until it is allocated or removed.

Node placement (`engine.predicates`): wherever a node is chosen -- first fit, reservation,
placeholder replacement -- it must admit the ask (labels and taints). A placeholder whose node
does not admit the real ask is not replaced; the ask is scheduled like one without placeholder.
A change of a node's labels or taints forgets what failed, so waiting asks are tried again.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from engine import resources as R
from engine.app_state import (SCHEDULABLE_STATES, STATE_DETAIL, TERMINAL_STATES,
                              AppEvent, AppState, InvalidTransition)
from engine.config import PartitionConfig, QueueConfig
from engine.nodes import NodeIndex
from engine.objects import Allocation, App, Ask, Node, Queue
from engine.predicates import (PLACEMENT_TAG, TAINTS_ATTRIBUTE, Taint, parse_placement,
                               parse_taints, rejection)
from engine.ugm import UserGroup, UserGroupManager
from shm.events import EventChangeDetail as D
from shm.events import EventChangeType as C
from shm.events import EventRecordType as T

APP, NODE, QUEUE = int(T.APP), int(T.NODE), int(T.QUEUE)
ADD, REMOVE, SET, NONE = int(C.ADD), int(C.REMOVE), int(C.SET), int(C.NONE)

TERMINATION_DETAIL = {
    "STOPPED_BY_RM": int(D.ALLOC_CANCEL),
    "UNKNOWN_TERMINATION_TYPE": int(D.ALLOC_CANCEL),
    "TIMEOUT": int(D.ALLOC_TIMEOUT),
    "PREEMPTED_BY_SCHEDULER": int(D.ALLOC_PREEMPT),
    "PLACEHOLDER_REPLACED": int(D.ALLOC_REPLACED),
}


class Timing:
    """Timeouts of the application lifecycle, in nanoseconds (tests shorten them)."""

    def __init__(self, placeholder_default_ms: int = 15 * 60 * 1000,
                 starting_s: float = 300.0, completing_s: float = 30.0,
                 retention_s: float = 3600.0) -> None:
        self.placeholder_default_ns = placeholder_default_ms * 1_000_000
        self.starting_ns = int(starting_s * 1e9)
        self.completing_ns = int(completing_s * 1e9)
        self.retention_ns = int(retention_s * 1e9)


class Outbox:
    """Messages for the shims, per rmID, collected until the scheduler flushes them."""

    def __init__(self) -> None:
        self.alloc: dict[str, dict[str, list]] = {}
        self.app: dict[str, dict[str, list]] = {}

    def _a(self, rm: str) -> dict[str, list]:
        box = self.alloc.get(rm)
        if box is None:
            box = self.alloc[rm] = {"new": [], "released": [], "releasedAsks": [],
                                    "rejected": []}
        return box

    def _p(self, rm: str) -> dict[str, list]:
        box = self.app.get(rm)
        if box is None:
            box = self.app[rm] = {"accepted": [], "rejected": [], "updated": []}
        return box

    def alloc_new(self, rm: str, alloc: Allocation) -> None:
        self._a(rm)["new"].append(alloc.si())

    def alloc_released(self, rm: str, alloc: Allocation, termination: str, message: str) -> None:
        self._a(rm)["released"].append({"allocationKey": alloc.key, "applicationID": alloc.app_id,
                                        "partitionName": alloc.partition,
                                        "terminationType": termination, "message": message})

    def ask_released(self, rm: str, app_id: str, key: str, message: str) -> None:
        self._a(rm)["releasedAsks"].append({"allocationKey": key, "applicationID": app_id,
                                            "message": message})

    def alloc_rejected(self, rm: str, app_id: str, key: str, reason: str) -> None:
        self._a(rm)["rejected"].append({"allocationKey": key, "applicationID": app_id,
                                        "reason": reason})

    def app_update(self, rm: str, app_id: str, state: str, message: str) -> None:
        self._p(rm)["updated"].append({"applicationID": app_id, "state": state,
                                       "message": message})

    def take(self) -> dict[str, list[dict[str, Any]]]:
        """{rmID: [ApplicationResponse?, AllocationResponse?]} and empty the box."""
        out: dict[str, list[dict[str, Any]]] = {}
        for rm, box in self.app.items():
            if any(box.values()):
                out.setdefault(rm, []).append({"type": "ApplicationResponse", **box})
        for rm, box in self.alloc.items():
            if any(box.values()):
                out.setdefault(rm, []).append({"type": "AllocationResponse", **box})
        self.alloc = {}
        self.app = {}
        return out


class Partition:
    """A partition's objects and scheduling; see the module docstring."""

    def __init__(self, config: PartitionConfig, sink: Any, outbox: Outbox,
                 *, clock: Callable[[], int] = time.monotonic_ns,
                 timing: Timing | None = None) -> None:
        self.name = config.name
        self.sink = sink
        self.emit = sink.emit
        self.ugm = UserGroupManager(config.name, sink.emit)
        self.out = outbox
        self.clock = clock
        self.timing = timing or Timing()
        self.node_sort_policy = config.node_sort_policy
        self.queues: dict[str, Queue] = {}
        self.apps: dict[str, App] = {}
        self.terminated: dict[str, App] = {}
        self.nodes: dict[str, Node] = {}
        self.index = NodeIndex(binpacking=config.node_sort_policy == "binpacking")
        self.capacity: dict[str, int] = {}
        self.reservations: dict[str, tuple[App, Ask, Node]] = {}
        self._timers: list[tuple[int, int, str, str]] = []
        self._timer_seq = itertools.count()
        self.version = 0
        self.allocations_made = 0
        self.root = self._build(config.root, None)
        self._push_limits()

    # --- queues --------------------------------------------------------------------------------

    def _build(self, cfg: QueueConfig, parent: Queue | None) -> Queue:
        q = self._add_queue(cfg, parent)
        for child in cfg.children:
            self._build(child, q)
        return q

    def _add_queue(self, cfg: QueueConfig, parent: Queue | None) -> Queue:
        """A configured queue (without its children): registered, QUEUE / ADD emitted."""
        q = Queue(cfg.name, cfg.path, parent, leaf=cfg.is_leaf)
        self._configure(q, cfg)
        self.queues[q.path] = q
        if parent is not None:
            parent.children[q.name] = q
        self.emit(QUEUE, ADD, int(D.DETAILS_NONE), q.path, "", "configured queue added")
        return q

    def _configure(self, q: Queue, cfg: QueueConfig) -> None:
        q.guaranteed = dict(cfg.guaranteed)
        q.max = dict(cfg.max)
        q.max_apps = cfg.max_applications
        q.properties = dict(cfg.properties)
        q.limits = list(cfg.limits)
        q.template = cfg.child_template
        q.managed_children_allowed = (not cfg.children) if q.parent is None else cfg.parent
        q.update_share()

    def _push_limits(self) -> None:
        self.ugm.update_limits({q.path: q.limits for q in self.queues.values() if q.limits})

    def update_config(self, config: PartitionConfig) -> None:
        """Apply a changed queue configuration (SIGHUP reload); emits the QUEUE SET rows."""
        seen: set[str] = set()
        for cfg in config.root.walk():
            seen.add(cfg.path)
            q = self.queues.get(cfg.path)
            if q is None:
                parent = self.queues.get(cfg.path.rsplit(".", 1)[0])
                if parent is None:
                    continue
                if parent.is_leaf:
                    parent.parent_flag = True
                    self.emit(QUEUE, SET, int(D.QUEUE_TYPE), parent.path, "", "leaf -> parent")
                self._add_queue(cfg, parent)
                continue
            if q.max != cfg.max:
                self.emit(QUEUE, SET, int(D.QUEUE_MAX), q.path, "", "max resource changed",
                          cfg.max or None)
            if q.guaranteed != cfg.guaranteed:
                self.emit(QUEUE, SET, int(D.QUEUE_GUARANTEED), q.path, "",
                          "guaranteed resource changed", cfg.guaranteed or None)
            if q.is_leaf != cfg.is_leaf and (cfg.is_leaf is False or not q.children):
                q.parent_flag = not cfg.is_leaf
                self.emit(QUEUE, SET, int(D.QUEUE_TYPE), q.path, "",
                          "leaf -> parent" if q.parent_flag else "parent -> leaf")
            self._configure(q, cfg)
            q.dynamic = False
            q.draining = False
        for path in sorted(self.queues, key=lambda p: -p.count(".")):
            q = self.queues[path]
            if path not in seen and not q.dynamic and q.parent is not None:
                q.draining = True
                self._maybe_remove_queue(q)
        self._push_limits()
        self.version += 1

    def _maybe_remove_queue(self, q: Queue) -> None:
        while q.parent is not None and (q.dynamic or q.draining) and not q.apps \
                and not q.children and not q.pending_count and R.is_zero(q.allocated):
            parent = q.parent
            del parent.children[q.name]
            del self.queues[q.path]
            if q.dynamic:
                self.emit(QUEUE, REMOVE, int(D.QUEUE_DYNAMIC), q.path, "", "dynamic queue removed")
            else:
                self.emit(QUEUE, REMOVE, int(D.DETAILS_NONE), q.path, "",
                          "configured queue removed")
            q = parent

    def _dynamic_leaf(self, parent: Queue, name: str) -> Queue:
        q = Queue(name, f"{parent.path}.{name}", parent, leaf=True, dynamic=True)
        if parent.template is not None:
            self._configure(q, parent.template)
        elif parent.properties.get("application.sort.policy"):
            q.properties = {"application.sort.policy":
                            parent.properties["application.sort.policy"]}
        parent.children[name] = q
        self.queues[q.path] = q
        self.emit(QUEUE, ADD, int(D.QUEUE_DYNAMIC), q.path, "", "dynamic queue added")
        return q

    def place(self, queue_name: str) -> tuple[Queue | None, str]:
        """The leaf an application named `queue_name` goes to (creating it), or (None, why)."""
        name = (queue_name or "").strip()
        if name:
            path = name if name == "root" or name.startswith("root.") else f"root.{name}"
            q = self.queues.get(path)
            if q is not None:
                if not q.is_leaf:
                    return None, f"queue {path} is a parent queue, applications need a leaf"
                if q.draining:
                    return None, f"queue {path} is being removed"
                return q, ""
            parent_path, _, leaf = path.rpartition(".")
            parent = self.queues.get(parent_path)
            if parent is not None and not parent.is_leaf and parent.managed_children_allowed \
                    and not parent.draining and leaf:
                return self._dynamic_leaf(parent, leaf), ""
        q = self.queues.get("root.default")
        if q is None:
            return self._dynamic_leaf(self.root, "default"), ""
        if not q.is_leaf:
            return None, "queue root.default is a parent queue"
        if q.draining:
            return None, "queue root.default is being removed"
        return q, ""

    # --- applications --------------------------------------------------------------------------

    def _set_state(self, app: App, event: AppEvent, message: str = "") -> bool:
        """Fire an event on the app's machine; emit APP/SET (REMOVE for Rejected). False if the
        transition is illegal from the current state (nothing changes)."""
        old = app.fsm.state
        try:
            new = app.fsm.fire(event)
        except InvalidTransition:
            return False
        if new is old:
            return True
        now = time.time_ns()
        app.state_log.append({"time": now, "applicationState": new.value})
        app.ver += 1
        if new is AppState.REJECTED:
            self.emit(APP, REMOVE, int(D.APP_REJECT), app.app_id, "", message)
        else:
            self.emit(APP, SET, int(STATE_DETAIL[new]), app.app_id, "", message)
        self.out.app_update(app.rm_id, app.app_id, new.value, message)
        if new is AppState.STARTING:
            app.start_time = now
            self._timer(self.timing.starting_ns, "starting", app.app_id)
        elif new is AppState.COMPLETING:
            self._timer(self.timing.completing_ns, "completing", app.app_id)
        elif new in TERMINAL_STATES:
            self._terminate(app)
        self.version += 1
        return True

    def add_app(self, rm_id: str, info: Mapping[str, Any]) -> str | None:
        """Add an application; None if accepted, else the rejection reason (app is Rejected)."""
        app_id = info["applicationID"]
        if app_id in self.apps:
            return f"application {app_id} already exists"
        self.terminated.pop(app_id, None)
        ugi_raw = info.get("ugi") or {}
        user = ugi_raw.get("user") or "nobody"
        groups = tuple(ugi_raw.get("groups") or ())
        ugi = UserGroup(user, groups)
        try:
            ph_ask = R.from_si(info.get("placeholderAsk"))
        except ValueError:
            ph_ask = {}  # informational only; validate() already checked the shape
        app = App(app_id, self.name, info.get("queueName") or "", ugi, dict(info.get("tags") or {}),
                  rm_id, ph_ask, info.get("gangSchedulingStyle") or "Soft",
                  int(info.get("executionTimeoutMilliSeconds") or 0))
        self.emit(APP, ADD, int(D.DETAILS_NONE), app_id, "", app.queue_name)
        self.emit(APP, SET, int(D.APP_NEW), app_id, "", "")
        queue, reason = self.place(app.queue_name)
        if queue is None:
            app.rejected_message = reason
            self.terminated[app_id] = app
            self._set_state(app, AppEvent.REJECT, reason)
            return reason
        app.queue = queue
        queue.apps[app_id] = app
        self.apps[app_id] = app
        self.emit(QUEUE, ADD, int(D.QUEUE_APP), queue.path, app_id, "")
        self.version += 1
        return None

    def remove_app(self, app_id: str, message: str = "removed by the RM") -> bool:
        """The RM removed the application: cancel asks, drop allocations, reach a final state."""
        app = self.apps.get(app_id)
        if app is None:
            if self.terminated.pop(app_id, None) is not None:
                self.emit(APP, REMOVE, int(D.DETAILS_NONE), app_id, "", message)
                self.version += 1
                return True
            return False
        for ask in list(app.asks.values()):
            self._remove_ask(app, ask, int(D.REQUEST_CANCEL))
        for alloc in list(app.allocations.values()):
            self._remove_allocation(app, alloc, int(D.ALLOC_CANCEL))
        state = app.fsm.state
        if state not in TERMINAL_STATES:
            if app.fsm.can_fire(AppEvent.COMPLETE):
                self._set_state(app, AppEvent.COMPLETE, message)
                self._set_state(app, AppEvent.COMPLETE, message)
            else:
                self._set_state(app, AppEvent.FAIL, message)
                self._set_state(app, AppEvent.FAIL, message)
        if app.app_id in self.apps:  # could not reach a terminal state: detach anyway
            self._terminate(app)
        self.terminated.pop(app_id, None)
        self.emit(APP, REMOVE, int(D.DETAILS_NONE), app_id, "", message)
        self.version += 1
        return True

    def _terminate(self, app: App) -> None:
        """Final state reached: leave the queue, keep the app for readers until it expires."""
        app.finished_time = time.time_ns()
        q = app.queue
        if app.app_id in self.apps:
            del self.apps[app.app_id]
            for ask in list(app.asks.values()):
                self._remove_ask(app, ask, int(D.REQUEST_CANCEL))
            if q is not None and q.apps.pop(app.app_id, None) is not None:
                self.emit(QUEUE, REMOVE, int(D.QUEUE_APP), q.path, app.app_id, "")
                self._maybe_remove_queue(q)
        if app.fsm.state is not AppState.EXPIRED:
            self.terminated[app.app_id] = app
            self._timer(self.timing.retention_ns, "expire", app.app_id)

    def _check_done(self, app: App) -> None:
        if app.allocations:
            return
        state = app.fsm.state
        if state is AppState.FAILING:
            self._set_state(app, AppEvent.FAIL, "all allocations released")
        elif not app.asks and state in (AppState.ACCEPTED, AppState.STARTING, AppState.RUNNING):
            self._set_state(app, AppEvent.COMPLETE, "no allocations or requests left")

    # --- asks ----------------------------------------------------------------------------------

    def add_ask(self, rm_id: str, info: Mapping[str, Any]) -> str | None:
        """Add a pending ask; None if accepted, else why not."""
        app = self.apps.get(info["applicationID"])
        if app is None:
            return f"unknown application {info['applicationID']}"
        key = info["allocationKey"]
        if key in app.asks:
            return self._replace_placement(app, app.asks[key], info)
        if key in app.allocations:
            return None  # a replay of what we have: idempotent
        if app.fsm.state not in SCHEDULABLE_STATES and app.fsm.state is not AppState.NEW:
            return f"application {app.app_id} is {app.fsm.state.value}"
        try:
            res = R.from_si(info.get("resourceAsk"))
        except ValueError as exc:
            return f"ask {key}: {exc}"
        tags = dict(info.get("allocationTags") or {})
        try:
            placement = parse_placement(tags[PLACEMENT_TAG]) if PLACEMENT_TAG in tags else None
        except ValueError as exc:
            return f"ask {key}: allocationTags.{PLACEMENT_TAG}: {exc}"
        ask = Ask(key, app.app_id, res, int(info.get("priority") or 0),
                  bool(info.get("placeholder")), info.get("taskGroupName") or "",
                  tags, rm_id=rm_id, placement=placement)
        app.asks[key] = ask
        app.pending.add(ask)
        app.ver += 1
        app.pending_res = R.add(app.pending_res, res)
        for q in app.queue.ancestors():
            q.pending_count += 1
            q.pending = R.add(q.pending, res)
        self.emit(APP, ADD, int(D.APP_REQUEST), app.app_id, key, "", res)
        if ask.placeholder:
            _count_placeholder(app, ask.task_group, res)
            if not app.ph_timer_started:
                app.ph_timer_started = True
                timeout = (app.ph_timeout_ms * 1_000_000 if app.ph_timeout_ms
                           else self.timing.placeholder_default_ns)
                self._timer(timeout, "placeholder", app.app_id)
        if app.fsm.state is AppState.NEW:
            self._set_state(app, AppEvent.RUN, f"first request {key}")
            if self.sink.requests_enabled:
                self.sink.request(key, app.app_id,
                                  f"Application {app.app_id} added to queue {app.queue.path}")
        elif app.fsm.state is AppState.COMPLETING:
            self._set_state(app, AppEvent.RUN, f"new request {key}")
        self.version += 1
        return None

    def release_ask(self, app_id: str, key: str, message: str = "") -> bool:
        app = self.apps.get(app_id)
        if app is None:
            return False
        keys = [key] if key else list(app.asks)
        found = False
        for k in keys:
            ask = app.asks.get(k)
            if ask is not None:
                self._remove_ask(app, ask, int(D.APP_REQUEST), message)
                found = True
        if found:
            self._check_done(app)
        return found

    def _replace_placement(self, app: App, ask: Ask, info: Mapping[str, Any]) -> str | None:
        """A pending ask sent again: a replay, except for its placement tag, which replaces the
        ask's (a pod's tolerations may be added while it waits, e.g. to let it onto a tainted
        node). A bad new tag rejects the ask, which is then gone (as the RM is told)."""
        tag = (info.get("allocationTags") or {}).get(PLACEMENT_TAG)
        if tag == ask.tags.get(PLACEMENT_TAG):
            return None
        try:
            placement = parse_placement(tag) if tag is not None else None
        except ValueError as exc:
            self._remove_ask(app, ask, int(D.REQUEST_CANCEL), "placement tag rejected")
            return f"ask {ask.key}: allocationTags.{PLACEMENT_TAG}: {exc}"
        ask.set_placement(placement, tag)
        ask.reported.discard("reserve")
        ask.reported.discard("nonode")
        app.ver += 1
        self.version += 1
        return None

    def _remove_ask(self, app: App, ask: Ask, detail: int, message: str = "") -> None:
        self._take_ask(app, ask)
        self.emit(APP, REMOVE, detail, app.app_id, ask.key, message, ask.resource)
        self.version += 1

    # --- allocations ---------------------------------------------------------------------------

    def _apply(self, app: App, key: str, res: dict[str, int], node: Node, *, placeholder: bool,
               task_group: str, priority: int, recovered: bool = False,
               notify: bool = True) -> Allocation:
        """Book an allocation everywhere and emit its events (no checks: callers did them)."""
        alloc = Allocation(key, app.app_id, self.name, node.node_id, res, placeholder,
                           task_group, priority, recovered)
        node.allocations[key] = alloc
        node.ver += 1
        nalloc, navail = node.allocated, node.available
        for name, value in res.items():
            nalloc[name] = nalloc.get(name, 0) + value
            navail[name] = navail.get(name, 0) - value
        app.allocations[key] = alloc
        app.ver += 1
        aalloc = app.allocated
        for name, value in res.items():
            aalloc[name] = aalloc.get(name, 0) + value
        for name, value in aalloc.items():
            if value > app.max_used.get(name, 0):
                app.max_used[name] = value
        q = app.queue
        first = not app.counted_running
        while q is not None:
            qa = q.allocated
            for name, value in res.items():
                qa[name] = qa.get(name, 0) + value
            if first:
                q.running_apps += 1
            if q.guaranteed:
                q.update_share()
            q = q.parent
        app.counted_running = True
        self._app_share(app)
        self.emit(APP, ADD, 200, app.app_id, key, "", res)  # APP_ALLOC
        self.emit(NODE, ADD, 303, node.node_id, key, "", res)  # NODE_ALLOC
        state = app.fsm.state
        if state is AppState.NEW:
            self._set_state(app, AppEvent.RUN, "recovered allocation")
            state = app.fsm.state
        if state is AppState.ACCEPTED:
            self._set_state(app, AppEvent.RUN, f"first allocation {key}")
            if not app.asks:
                self._set_state(app, AppEvent.RUN, "all requests allocated")
        elif state is AppState.STARTING or state is AppState.COMPLETING:
            self._set_state(app, AppEvent.RUN, f"allocation {key}")
        if notify:
            self.out.alloc_new(app.rm_id, alloc)
        self.allocations_made += 1
        self.version += 1
        return alloc

    def _app_share(self, app: App) -> None:
        base = app.queue.guaranteed or app.queue.max or self.capacity
        app.share = R.share(app.allocated, base)

    def _remove_allocation(self, app: App, alloc: Allocation, detail: int, *,
                           termination: str = "", message: str = "", node_removed: bool = False,
                           replacing: bool = False) -> None:
        """Unbook an allocation; `termination` set = tell the shim (an engine-side release)."""
        res = alloc.resource
        node = self.nodes.get(alloc.node_id)
        if node is not None and node.allocations.pop(alloc.key, None) is not None:
            node.ver += 1
            nalloc, navail = node.allocated, node.available
            for name, value in res.items():
                nalloc[name] = nalloc.get(name, 0) - value
                navail[name] = navail.get(name, 0) + value
            if not node_removed:
                self.emit(NODE, REMOVE, int(D.NODE_ALLOC), node.node_id, alloc.key, message, res)
                if node.index_pos >= 0 and node.reserved_for is None:
                    self.index.freed(node)
        del app.allocations[alloc.key]
        app.ver += 1
        aalloc = app.allocated
        for name, value in res.items():
            aalloc[name] = aalloc.get(name, 0) - value
        last = not app.allocations and not replacing
        q = app.queue
        while q is not None:
            qa = q.allocated
            for name, value in res.items():
                qa[name] = qa.get(name, 0) - value
            if last and app.counted_running:
                q.running_apps -= 1
            if q.guaranteed:
                q.update_share()
            q = q.parent
        if last:
            app.counted_running = False
        self._app_share(app)
        self.emit(APP, REMOVE, detail, app.app_id, alloc.key, message, res)
        self.ugm.decrease(app.queue.path, app.app_id, res, app.ugi, last)
        if termination:
            self.out.alloc_released(app.rm_id, alloc, termination, message)
        self.version += 1
        if not replacing:
            self._check_done(app)

    def release_allocation(self, app_id: str, key: str, termination: str,
                           message: str = "") -> int:
        """The shim released allocations (all of the app's if key is empty); how many."""
        app = self.apps.get(app_id)
        if app is None:
            return 0
        detail = TERMINATION_DETAIL.get(termination or "STOPPED_BY_RM", int(D.ALLOC_CANCEL))
        allocs = [app.allocations[key]] if key in app.allocations else (
            list(app.allocations.values()) if not key else [])
        for alloc in allocs:
            if alloc.key in app.allocations:
                if alloc.placeholder and detail == int(D.ALLOC_TIMEOUT):
                    _count_timedout(app, alloc.task_group)
                self._remove_allocation(app, alloc, detail, message=message)
        return len(allocs)

    def add_existing(self, rm_id: str, info: Mapping[str, Any]) -> str | None:
        """A recovered, already bound allocation: booked even above the queue max."""
        app = self.apps.get(info["applicationID"])
        if app is None:
            return f"unknown application {info['applicationID']}"
        node = self.nodes.get(info["nodeID"])
        if node is None:
            return f"unknown node {info['nodeID']}"
        key = info["allocationKey"]
        if key in app.allocations:
            return None
        try:
            res = R.from_si(info.get("resourcePerAlloc"))
        except ValueError as exc:
            return f"allocation {key}: {exc}"
        ask = app.asks.get(key)
        if ask is not None:
            self._remove_ask(app, ask, int(D.APP_REQUEST), "bound before recovery")
        # an existing allocation: tracked even above a (since lowered) user/group limit
        self.ugm.increase(app.queue.path, app.app_id, res, app.ugi, force=True)
        placeholder = bool(info.get("placeholder"))
        tg = info.get("taskGroupName") or ""
        if placeholder:
            _count_placeholder(app, tg, res)
        self._apply(app, key, res, node, placeholder=placeholder, task_group=tg,
                    priority=int(info.get("priority") or 0), recovered=True, notify=False)
        return None

    # --- nodes ---------------------------------------------------------------------------------

    def add_node(self, rm_id: str, info: Mapping[str, Any], *, drain: bool = False) -> str | None:
        node_id = info["nodeID"]
        if node_id in self.nodes:
            return f"node {node_id} already exists"
        try:
            cap = R.from_si(info.get("schedulableResource"))
            occ = R.from_si(info.get("occupiedResource"))
        except ValueError as exc:
            return f"node {node_id}: {exc}"
        attrs = _attributes(info.get("attributes") or {})
        try:
            taints = _taints(attrs)
        except ValueError as exc:
            return f"node {node_id}: {exc}"
        node = Node(node_id, rm_id, self.name, cap, occ, attrs, schedulable=not drain,
                    ready=_ready(attrs), taints=taints)
        self.nodes[node_id] = node
        self.capacity = R.add(self.capacity, cap)
        self.emit(NODE, ADD, int(D.DETAILS_NONE), node_id, "", "", cap)
        if node.usable:
            self.index.add(node)
        self.version += 1
        return None

    def _refresh_index(self, node: Node) -> None:
        if node.usable:
            self.index.add(node)
        else:
            self.index.remove(node)
            if node.reserved_for is not None:
                self._unreserve_node(node)

    def update_node(self, info: Mapping[str, Any]) -> str | None:
        """UPDATE: capacity and occupation if given; `attributes`, if given, replace the
        node's (the shim sends the full set: a label or taint left out is gone). Nothing
        changes when any part is malformed."""
        node = self.nodes.get(info["nodeID"])
        if node is None:
            return f"unknown node {info['nodeID']}"
        attrs = info.get("attributes")
        taints = node.taints
        try:
            cap = R.from_si(info["schedulableResource"]) if info.get("schedulableResource") \
                else None
            occ = R.from_si(info["occupiedResource"]) if "occupiedResource" in info else None
            if attrs is not None:
                attrs = _attributes(attrs)
                taints = _taints(attrs)
        except ValueError as exc:
            return f"node {node.node_id}: {exc}"
        if cap is not None and cap != node.capacity:
            self.capacity = R.add(R.sub(self.capacity, node.capacity), cap)
            node.capacity = cap
            self.emit(NODE, SET, int(D.NODE_CAPACITY), node.node_id, "", "", cap)
        if occ is not None and occ != node.occupied:
            node.occupied = occ
            self.emit(NODE, SET, int(D.NODE_OCCUPIED), node.node_id, "", "", occ or None)
        if attrs is not None and attrs != node.attributes:
            node.attributes = attrs
            node.taints = taints
            self._placement_changed()
            ready = _ready(attrs)
            if ready != node.ready:
                node.ready = ready
                self.emit(NODE, SET, int(D.NODE_READY), node.node_id, "", f"ready: {ready}")
        node.recompute()
        self._refresh_index(node)
        self.version += 1
        return None

    def _placement_changed(self) -> None:
        """A node's labels or taints changed: asks that found no node, or no node to reserve,
        may find one now (both caches are cleared; the next cycle tries them again)."""
        self.index.placement_changed()
        for app in self.apps.values():
            for ask in app.pending:
                ask.reported.discard("reserve")

    def set_schedulable(self, node_id: str, schedulable: bool) -> str | None:
        node = self.nodes.get(node_id)
        if node is None:
            return f"unknown node {node_id}"
        if node.schedulable != schedulable:
            node.schedulable = schedulable
            node.ver += 1
            self.emit(NODE, SET, int(D.NODE_SCHEDULABLE), node_id, "",
                      f"schedulable: {schedulable}")
            self._refresh_index(node)
            self.version += 1
        return None

    def remove_node(self, node_id: str, *, notify: bool = True) -> str | None:
        node = self.nodes.get(node_id)
        if node is None:
            return f"unknown node {node_id}"
        if node.reserved_for is not None:
            self._unreserve_node(node)
        self.index.remove(node)
        for alloc in list(node.allocations.values()):
            app = self.apps.get(alloc.app_id)
            if app is not None and alloc.key in app.allocations:
                self._remove_allocation(app, alloc, int(D.ALLOC_NODEREMOVED),
                                        termination="STOPPED_BY_RM" if notify else "",
                                        message=f"node {node_id} removed", node_removed=True)
        del self.nodes[node_id]
        self.capacity = R.sub(self.capacity, node.capacity)
        self.emit(NODE, REMOVE, int(D.NODE_DECOMISSION), node_id, "", "")
        self.version += 1
        return None

    def remove_rm(self, rm_id: str) -> None:
        """Forget everything an RM registered (re-registration: it will replay)."""
        for app in [a for a in self.apps.values() if a.rm_id == rm_id]:
            self.remove_app(app.app_id, "resource manager re-registered")
        for app_id in [k for k, a in self.terminated.items() if a.rm_id == rm_id]:
            self.terminated.pop(app_id)
        for node_id in [k for k, n in self.nodes.items() if n.rm_id == rm_id]:
            self.remove_node(node_id, notify=False)

    # --- reservations --------------------------------------------------------------------------

    def _reserve(self, app: App, ask: Ask, node: Node) -> None:
        node.reserved_for = (app.app_id, ask.key)
        node.ver += 1
        app.ver += 1
        ask.reserved_node = node.node_id
        self.reservations[ask.key] = (app, ask, node)
        self.emit(NODE, ADD, int(D.NODE_RESERVATION), node.node_id, ask.key,
                  f"reserved for application {app.app_id}", ask.resource)
        self.version += 1

    def _unreserve(self, ask: Ask) -> None:
        entry = self.reservations.pop(ask.key, None)
        ask.reserved_node = None
        if entry is None:
            return
        node = entry[2]
        node.reserved_for = None
        node.ver += 1
        entry[0].ver += 1
        self.emit(NODE, REMOVE, int(D.NODE_RESERVATION), node.node_id, ask.key, "", ask.resource)
        if node.index_pos >= 0:
            self.index.freed(node)
        self.version += 1

    def _unreserve_node(self, node: Node) -> None:
        if node.reserved_for is not None:
            app_id, key = node.reserved_for
            app = self.apps.get(app_id)
            ask = app.asks.get(key) if app else None
            if ask is not None:
                self._unreserve(ask)
            else:
                node.reserved_for = None
                node.ver += 1

    # --- timers --------------------------------------------------------------------------------

    def _timer(self, delay_ns: int, kind: str, app_id: str) -> None:
        heapq.heappush(self._timers, (self.clock() + delay_ns, next(self._timer_seq), kind,
                                      app_id))

    def tick(self) -> None:
        """Fire every timer that is due (placeholder, starting, completing, expiry)."""
        now = self.clock()
        timers = self._timers
        while timers and timers[0][0] <= now:
            _, _, kind, app_id = heapq.heappop(timers)
            if kind == "expire":
                app = self.terminated.get(app_id)
                if app is not None and app.fsm.state in TERMINAL_STATES \
                        and app.finished_time and app.fsm.state is not AppState.EXPIRED:
                    if app.fsm.can_fire(AppEvent.EXPIRE):
                        self._set_state(app, AppEvent.EXPIRE, "retention time passed")
                    self.terminated.pop(app_id, None)
                continue
            app = self.apps.get(app_id)
            if app is None:
                continue
            if kind == "starting" and app.fsm.state is AppState.STARTING:
                self._set_state(app, AppEvent.RUN, "starting timeout")
            elif kind == "completing" and app.fsm.state is AppState.COMPLETING:
                self._set_state(app, AppEvent.COMPLETE, "completing timeout")
            elif kind == "placeholder":
                self._placeholder_timeout(app)

    def _placeholder_timeout(self, app: App) -> None:
        ph_allocs = [a for a in app.allocations.values() if a.placeholder]
        ph_asks = [a for a in app.asks.values() if a.placeholder]
        if not ph_allocs and not ph_asks:
            return
        gang_started = any(not a.placeholder for a in app.allocations.values())
        msg = "placeholder timeout"
        if not gang_started:
            if app.gang_style == "Hard":
                self._set_state(app, AppEvent.FAIL, f"{msg} (gang style Hard)")
                for ask in list(app.asks.values()):
                    if not ask.placeholder:
                        self._remove_ask(app, ask, int(D.REQUEST_CANCEL), msg)
                        self.out.ask_released(app.rm_id, app.app_id, ask.key,
                                              "application failed")
            else:
                self._set_state(app, AppEvent.RESUME, f"{msg} (gang style Soft)")
        for ask in ph_asks:
            self._remove_ask(app, ask, int(D.REQUEST_TIMEOUT), msg)
            self.out.ask_released(app.rm_id, app.app_id, ask.key, msg)
            _count_timedout(app, ask.task_group)
        for alloc in ph_allocs:
            _count_timedout(app, alloc.task_group)
            self._remove_allocation(app, alloc, int(D.ALLOC_TIMEOUT), termination="TIMEOUT",
                                    message=msg)
        if app.fsm.state is AppState.RESUMING:
            self._set_state(app, AppEvent.RUN, "placeholders released")
            self._check_done(app)
        elif app.fsm.state is AppState.FAILING:
            self._check_done(app)

    # --- scheduling ----------------------------------------------------------------------------

    def _queue_fits(self, q: Queue | None, res: Mapping[str, int]) -> bool:
        while q is not None:
            mx = q.max
            if mx:
                qa = q.allocated
                for name, value in res.items():
                    limit = mx.get(name)
                    if limit is not None and qa.get(name, 0) + value > limit:
                        return False
            q = q.parent
        return True

    def _headroom(self, q: Queue) -> dict[str, int]:
        room: dict[str, int] = {}
        for anc in q.ancestors():
            for name, limit in anc.max.items():
                free = max(0, limit - anc.allocated.get(name, 0))
                room[name] = min(room.get(name, free), free)
        return room

    def _can_run(self, app: App) -> bool:
        for q in app.queue.ancestors():
            if q.max_apps and q.running_apps >= q.max_apps:
                return False
        return self.ugm.can_run_app(app.queue.path, app.app_id, app.ugi)

    def _report(self, ask: Ask, reason: str, message: str) -> None:
        """A request event for the shim, once per ask and reason."""
        if reason in ask.reported:
            return
        ask.reported.add(reason)
        self.sink.request(ask.key, ask.app_id, message, ask.resource)

    def _commit(self, app: App, ask: Ask, node: Node) -> str | None:
        """Book the ask on the node unless a limit refuses it (why not: "apps", "user",
        "queue"). An application's first allocation needs room for one more running
        application (whichever path found the node: first fit or reservation); then the seed
        order: UGM increase, queue check, UGM rollback if the queue check fails."""
        if not app.counted_running and not self._can_run(app):
            return "apps"
        res = ask.resource
        q = app.queue
        ugm = self.ugm
        if not ugm.increase(q.path, app.app_id, res, app.ugi):
            return "user"
        if not self._queue_fits(q, res):
            ugm.decrease(q.path, app.app_id, res, app.ugi, not app.allocations)
            return "queue"
        self._take_ask(app, ask)
        self._apply(app, ask.key, res, node, placeholder=ask.placeholder,
                    task_group=ask.task_group, priority=ask.priority)
        if self.sink.requests_enabled:
            self.sink.request(ask.key, app.app_id,
                              f"Successfully allocated on node {node.node_id}")
        return None

    def _take_ask(self, app: App, ask: Ask) -> None:
        """An ask leaves the pending list because it is being allocated (no event)."""
        if ask.reserved_node:
            self._unreserve(ask)
        del app.asks[ask.key]
        app.pending.remove(ask)
        app.ver += 1
        res = ask.resource
        pr = app.pending_res
        for name, value in res.items():
            pr[name] = pr.get(name, 0) - value
        q = app.queue
        while q is not None:
            q.pending_count -= 1
            qp = q.pending
            for name, value in res.items():
                qp[name] = qp.get(name, 0) - value
            q = q.parent

    def _usable_placeholder(self, app: App, ask: Ask) -> Allocation | None:
        """The first placeholder of the ask's task group on a node that admits the ask."""
        found = False
        for alloc in app.allocations.values():
            if alloc.placeholder and alloc.task_group == ask.task_group and not alloc.replacing:
                found = True
                node = self.nodes.get(alloc.node_id)
                if node is not None and node.admits(ask.placement):
                    return alloc
        if found and self.sink.requests_enabled:
            self._report(ask, "phnode",
                         f"Task group '{ask.task_group}' in application '{app.app_id}': no "
                         f"placeholder is on a node that admits request '{ask.key}'")
        return None

    def _try_replace(self, app: App, ask: Ask) -> bool | None:
        """Gang: put a real ask in the place of a placeholder of its task group.
        True = replaced; False = size mismatch (placeholder released); None = no placeholder
        on a node that admits the ask (scheduled as an ask without placeholder)."""
        ph = self._usable_placeholder(app, ask)
        if ph is None:
            return None
        data = app.placeholder_data.get(ask.task_group)
        if not R.fits(ask.resource, ph.resource):
            self._report(ask, "mismatch",
                         f"Task group '{ask.task_group}' in application '{app.app_id}': "
                         f"allocation resources '{R.strip_zero(ask.resource)}' are not matching "
                         f"placeholder '{R.strip_zero(ph.resource)}' allocation with ID "
                         f"'{ph.key}'")
            if data is not None:
                data["timedout"] += 1
            self._remove_allocation(app, ph, int(D.ALLOC_TIMEOUT), termination="TIMEOUT",
                                    message="placeholder size mismatch")
            return False
        node = self.nodes[ph.node_id]
        ph.replacing = True
        self._remove_allocation(app, ph, int(D.ALLOC_REPLACED),
                                termination="PLACEHOLDER_REPLACED",
                                message=f"replaced by {ask.key}", replacing=True)
        # the gang's resources were already admitted as placeholders: track, never refuse
        self.ugm.increase(app.queue.path, app.app_id, ask.resource, app.ugi, force=True)
        self._take_ask(app, ask)
        self._apply(app, ask.key, ask.resource, node, placeholder=False,
                    task_group=ask.task_group, priority=ask.priority)
        if data is not None:
            data["replaced"] += 1
        return True

    def _try_reserved(self) -> int:
        made = 0
        for key, (app, ask, node) in list(self.reservations.items()):
            if key not in self.reservations or not node.usable:
                continue
            if not node.admits(ask.placement):
                self._unreserve(ask)  # a label or taint changed: the node no longer admits it
                ask.reported.discard("reserve")
            elif R.fits(ask.resource, node.available):
                self._unreserve(ask)
                if self._commit(app, ask, node) is None:
                    made += 1
            elif not R.fits(ask.resource, R.sub(node.capacity, node.occupied)):
                self._unreserve(ask)  # the node shrank: it can never hold the ask
                ask.reported.discard("reserve")
        return made

    def _pick(self, q: Queue, skip: set[str], exhausted: set[int]) -> App | None:
        if q.is_leaf:
            apps = q.apps
            if q.properties.get("application.sort.policy") == "fair":
                best = None
                for app in apps.values():
                    if app.asks and app.app_id not in skip and \
                            app.fsm.state in SCHEDULABLE_STATES:
                        if best is None or (app.share, app.submit_time, app.seq) < \
                                (best.share, best.submit_time, best.seq):
                            best = app
                if best is not None:
                    return best
            else:
                for app in apps.values():
                    if app.asks and app.app_id not in skip and \
                            app.fsm.state in SCHEDULABLE_STATES:
                        return app
            exhausted.add(id(q))
            return None
        children = [c for c in q.children.values() if c.pending_count and id(c) not in exhausted]
        if len(children) > 1:
            children.sort(key=lambda c: (c.share, c.order))
        for child in children:
            app = self._pick(child, skip, exhausted)
            if app is not None:
                return app
        exhausted.add(id(q))
        return None

    def _try_app(self, app: App, failed: set) -> bool:
        if not app.counted_running and not self._can_run(app):
            return False
        q = app.queue
        index = self.index
        for ask in app.pending:
            if ask.reserved_node is not None or ask.shape in failed:
                continue
            if ask.task_group and not ask.placeholder:
                replaced = self._try_replace(app, ask)
                if replaced:
                    return True
                if replaced is False:
                    return True  # placeholder released (size mismatch): pick again
            node = index.find(ask.resource, ask.shape, ask.placement)
            if node is None:
                failed.add(ask.shape)
                if not self._queue_fits(q, ask.resource):
                    self._report_queue(app, ask)
                    continue
                # one reservation per application; a node to reserve is looked for once
                # per ask (until a placement change or a lost reservation allows another try)
                if "reserve" not in ask.reported and \
                        not any(e[0] is app for e in self.reservations.values()):
                    ask.reported.add("reserve")
                    cand = index.find_capacity(ask.resource, ask.placement)
                    if cand is not None:
                        self._reserve(app, ask, cand)
                        continue
                if self.sink.requests_enabled and "nonode" not in ask.reported:
                    self._report(ask, "nonode", self._no_node_message(ask))
                continue
            why = self._commit(app, ask, node)
            if why is None:
                return True
            failed.add(ask.shape)
            if why == "queue":
                self._report_queue(app, ask)
            elif why == "user" and self.sink.requests_enabled:
                reason = self.ugm.why_not(q.path, app.app_id, ask.resource, app.ugi)
                self._report(ask, "user", f"Request '{ask.key}' exceeds the user/group limit "
                                          f"in queue '{q.path}': {reason or 'limit reached'}")
        return False

    def _no_node_message(self, ask: Ask) -> str:
        """Why no node took the ask, counted per reason like kube-scheduler's FailedScheduling
        ("0/3 nodes are available: 1 node(s) had untolerated taint {k: v}, 2 node(s) ..."), so
        `kubectl describe pod` tells a pending pod's user what to change. A scan of every node,
        once per ask."""
        reasons: Counter[str] = Counter(self._node_rejection(node, ask)
                                        for node in self.nodes.values())
        parts = ", ".join(f"{count} node(s) {why}" for why, count in sorted(reasons.items()))
        return (f"Request '{ask.key}' does not fit on any of {len(self.nodes)} nodes: "
                f"0/{len(self.nodes)} nodes are available: {parts}")

    @staticmethod
    def _node_rejection(node: Node, ask: Ask) -> str:
        if not node.ready:
            return "were not ready"
        if not node.schedulable:
            return "were unschedulable"
        why = rejection(ask.placement, node.node_id, node.attributes, node.taints)
        if why is not None:
            return why
        if node.reserved_for is not None:
            return "were reserved for another request"
        for name, value in sorted(ask.resource.items()):
            if value > node.available.get(name, 0):
                return f"had insufficient {name}"
        return "had room (it freed up meanwhile)"

    def _report_queue(self, app: App, ask: Ask) -> None:
        if self.sink.requests_enabled and "queue" not in ask.reported:
            self._report(ask, "queue",
                         f"Request '{ask.key}' does not fit in queue '{app.queue.path}' "
                         f"(requested {R.strip_zero(ask.resource)}, available "
                         f"{self._headroom(app.queue)})")

    def schedule(self, deadline_ns: int) -> int:
        """Allocate what fits until nothing more does or the deadline passes; how many."""
        before = self.allocations_made
        if self.reservations:
            self._try_reserved()
        if not self.root.pending_count or not len(self.index):
            return self.allocations_made - before
        skip: set[str] = set()
        exhausted: set[int] = set()
        failed: dict[str, set] = {}
        clock = self.clock
        root = self.root
        steps = 0
        while True:
            app = self._pick(root, skip, exhausted)
            if app is None:
                break
            f = failed.get(app.app_id)
            if f is None:
                f = failed[app.app_id] = set()
            if not self._try_app(app, f):
                skip.add(app.app_id)
            steps += 1
            if not steps & 31 and clock() > deadline_ns:
                break
        return self.allocations_made - before

    # --- readers -------------------------------------------------------------------------------

    def all_apps(self):
        yield from self.apps.values()
        yield from self.terminated.values()


def _count_timedout(app: App, task_group: str) -> None:
    """One more placeholder of the task group timed out (or was released as mismatched)."""
    data = app.placeholder_data.get(task_group)
    if data is not None:
        data["timedout"] += 1


def _count_placeholder(app: App, task_group: str, res: dict[str, int]) -> None:
    """One more placeholder of a task group (asked, or recovered already placed)."""
    data = app.placeholder_data.setdefault(
        task_group, {"count": 0, "replaced": 0, "timedout": 0, "minResource": res})
    data["count"] += 1


# --- node attributes ---------------------------------------------------------------------------

def _attributes(raw: Mapping[Any, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in raw.items()}


def _ready(attrs: Mapping[str, str]) -> bool:
    return attrs.get("ready", "true").lower() != "false"


def _taints(attrs: Mapping[str, str]) -> tuple[Taint, ...]:
    """The node's parsed taints; ValueError names the attribute."""
    try:
        return parse_taints(attrs.get(TAINTS_ATTRIBUTE))
    except ValueError as exc:
        raise ValueError(f"attributes.{TAINTS_ATTRIBUTE}: {exc}") from None
