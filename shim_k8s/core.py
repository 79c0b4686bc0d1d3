"""The shim's decisions, without I/O: Kubernetes objects and SI messages in, actions out.

`ShimCore` is fed by the trio driver (`shim_k8s.shim`) with watch events (`on_pod`, `on_node`,
`on_synced`), SI connection changes (`on_connect`, `on_disconnect`), engine messages (`on_si`)
and binding results (`on_bind_result`). Each call records actions; `take()` hands them over as
an `Actions` batch: SI messages to send in order, pods to bind, Kubernetes Events to post, pods to
delete or create, and the state transitions to log. Tests drive this object directly.

How it decides (reconciliation, not replay)
-------------------------------------------
The core keeps two views and only ever sends the difference:

- the cluster, from the informers: our pods (`PodInfo`), other schedulers' bound pods (their
  resources count as the node's occupied resource), nodes (`NodeInfo`);
- the engine, from what it accepted: applications, asks, allocations (key -> node) and nodes
  (with the resources, attributes and schedulability last sent; a label or taint change is an
  UPDATE, so the engine's node filter sees what `kubectl label` / `kubectl taint` did). A new
  SI connection (an engine restart) empties this view; recovery is simply reconciling against
  an empty engine.

What may be sent depends on the shim state (`shim_k8s.state`):

- New / Registered: nothing but RegisterResourceManager; changes are only cached.
- Recovering: applications of bound pods, nodes as CREATE_DRAIN (never schedulable), existing
  allocations, releases of allocations whose pods finished. No asks. A node is RECOVERED when the
  engine acknowledged the message carrying its allocations; when none is RECOVERING the core
  sends DRAIN_TO_SCHEDULABLE for every schedulable node, and on that acknowledgement the shim is
  Running. So no node is schedulable before every existing allocation is known to the engine.
- Running: everything, asks included.

Recovery waits until both informers have listed once and no binding is in flight, so a pod whose
bind the old engine started is recovered as bound (or re-asked if the bind failed), never bound
twice. A pod that already has `spec.nodeName` is never bound; a 409 from the binding is "already
bound". Pods bound to a node the engine does not know are held and become existing allocations
when the node appears (orphan adoption). A bound pod whose existing allocation the engine refuses
(its application was rejected) counts as occupied resource on its node, like other schedulers'
pods, so the node is never over-committed. Gang applications get YuniKorn's placeholder pods
(`placeholder_pods`) when their first pending pod is asked for.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping
from typing import Any

import orjson

from engine import resources
from engine.predicates import PLACEMENT_TAG, TAINTS_ATTRIBUTE
from engine.resources import Resource
from engine.si import messages
from engine.si import protocol as si

from . import mapping
from .mapping import NodeInfo, PodInfo
from .state import NodeEvent, NodeRecovery, NodeState, ShimEvent, ShimMachine, ShimState, Transition

log = logging.getLogger("ykshm.shim")

MAX_BIND_ATTEMPTS = 3
EVENT_SOURCE = "yunikorn"


@dataclasses.dataclass(frozen=True, slots=True)
class Bind:
    uid: str
    namespace: str
    name: str
    node: str
    generation: int


@dataclasses.dataclass(frozen=True, slots=True)
class KubeEvent:
    """A Kubernetes Event to post about an object (a pod, or a node)."""

    kind: str
    namespace: str
    name: str
    uid: str
    reason: str
    message: str
    type: str = "Normal"


@dataclasses.dataclass(slots=True)
class Actions:
    si: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    binds: list[Bind] = dataclasses.field(default_factory=list)
    events: list[KubeEvent] = dataclasses.field(default_factory=list)
    deletes: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    creates: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    transitions: list[Transition] = dataclasses.field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.si or self.binds or self.events or self.deletes or self.creates
                    or self.transitions)


@dataclasses.dataclass(slots=True)
class _EngineNode:
    allocatable: Resource
    occupied: Resource
    schedulable: bool
    attributes: dict[str, str]   # labels, taints and ready as last sent


@dataclasses.dataclass(slots=True)
class _Alloc:
    app_id: str
    node: str


class ShimCore:
    """See the module docstring. Not thread-safe; one trio task owns it."""

    def __init__(self, rm_id: str = "mycluster", partition: str = mapping.DEFAULT_PARTITION,
                 machine: ShimMachine | None = None) -> None:
        self.rm_id = rm_id
        self.partition = partition
        self.machine = machine or ShimMachine()
        self.node_recovery = NodeRecovery()
        # --- the cluster (informers) ---
        self.pods: dict[str, PodInfo] = {}                 # uid -> our valid pods
        self.pod_keys: dict[str, str] = {}                 # ns/name -> uid (every pod seen)
        self.bad_pods: dict[str, str] = {}                 # uid -> reason (ours, unmappable)
        self.others: dict[str, tuple[str, Resource]] = {}  # uid -> (node, res) other schedulers
        self._occupied: dict[str, Resource] = {}           # node -> sum of others on it
        self.nodes: dict[str, NodeInfo] = {}
        self.bad_nodes: dict[str, str] = {}
        self.by_node: dict[str, set[str]] = {}             # node -> uids of our bound pods
        self.app_live: dict[str, set[str]] = {}            # app -> uids of unfinished pods
        self.synced: set[str] = set()
        self.app_origin: dict[str, PodInfo] = {}           # app -> the pod that defined it
        self.placeholders_made: set[str] = set()           # gang apps whose placeholders exist
        self.gang_started: set[str] = set()                # gang apps past Reserving
        self.refused: set[str] = set()                     # bound pods the engine refused
        # --- bindings (survive an engine restart) ---
        self.binding: dict[str, str] = {}                  # uid -> node, POST in flight
        self.assumed: dict[str, str] = {}                  # uid -> node, bound, watch not yet
        self.bind_failures: dict[str, int] = {}
        self.bindings_done = 0
        self.bind_conflicts = 0
        self.bind_errors = 0
        # --- the engine ---
        self.generation = 0
        self.connected = False
        self.instance_uuid = ""
        self.ring_name = ""
        self._reset_engine_view()
        self._next_id = 1
        self._register_id = 0
        self._running_id = 0
        self.registrations = 0
        self.recoveries = 0
        self.dirty: set[str] = set()
        self._dirty_nodes: set[str] = set()
        self._actions = Actions()
        self._reset_batch()

    # ------------------------------------------------------------------ engine view / batches
    def _reset_engine_view(self) -> None:
        self.e_apps: dict[str, str] = {}          # app -> queue
        self.e_asks: dict[str, str] = {}          # uid -> app
        self.e_allocs: dict[str, _Alloc] = {}     # uid -> allocation
        self.e_nodes: dict[str, _EngineNode] = {}
        self.rejected_apps: dict[str, str] = {}
        self.rejected_asks: dict[str, str] = {}
        self.awaiting: dict[int, tuple[str, Any]] = {}
        self._running_id = 0

    def _reset_batch(self) -> None:
        self._b_apps: list[messages.AddApplication] = []
        self._b_nodes: list[messages.NodeChange] = []
        self._b_rel_allocs: list[messages.AllocationRelease] = []
        self._b_rel_asks: list[messages.AskRelease] = []
        self._b_allocs: list[messages.ExistingAllocation] = []
        self._b_asks: list[messages.AllocationAsk] = []
        self._b_late_nodes: list[messages.NodeChange] = []
        self._b_recovering: list[str] = []
        self._b_touched_apps: set[str] = set()

    @property
    def state(self) -> ShimState:
        return self.machine.state

    def _id(self) -> int:
        n = self._next_id
        self._next_id += 1
        return n

    def _fire(self, event: ShimEvent, reason: str = "") -> None:
        self._actions.transitions.append(self.machine.fire(event, reason))

    # ------------------------------------------------------------------ public inputs
    def on_synced(self, kind: str) -> None:
        """An informer listed once ("nodes" or "pods")."""
        self.synced.add(kind)
        self._progress()

    def on_connect(self) -> None:
        """A new SI connection: register (the engine may be a new instance)."""
        if self.state is ShimState.FAILED:
            return
        if self.state is not ShimState.NEW:
            self.on_disconnect("new connection")
        self.generation += 1
        self.connected = True
        self._register_id = self._id()
        self._actions.si.append(messages.RegisterResourceManager(
            self.rm_id, "queues", "ykshm-shim/0.1", self._register_id).to_si())

    def on_disconnect(self, reason: str = "SI connection closed") -> None:
        """The engine went away: forget its view, back to New, recover on the next connection."""
        self.connected = False
        if self.state is ShimState.FAILED:
            return
        if self.state is not ShimState.NEW:
            self._fire(ShimEvent.DISCONNECT, reason)
        self._reset_engine_view()
        self._reset_batch()
        self._actions.si.clear()
        for uid in list(self.refused):   # a new engine may accept them
            self.refused.discard(uid)
            self._forget_other(uid)
        for name, state in list(self.node_recovery.states.items()):
            if name not in self.nodes and state is NodeState.LOST:
                self.node_recovery.forget(name)
            else:
                self.node_recovery.fire(name, NodeEvent.RESET)
        self.dirty.update(self.pods)
        self._dirty_nodes.update(self.nodes)

    def fail(self, reason: str) -> None:
        if self.state is not ShimState.FAILED:
            self._fire(ShimEvent.FAIL, reason)

    def on_pod(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """A pod watch event (ADDED / MODIFIED / DELETED)."""
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
        uid = mapping.pod_uid(obj)
        old_uid = self.pod_keys.get(key)
        if old_uid is not None and old_uid != uid:  # same name, new object
            self._forget_pod(old_uid)
            self._forget_other(old_uid)
        if event_type == "DELETED":
            self._forget_pod(uid)
            self.pod_keys.pop(key, None)
            self._forget_other(uid)
            return
        self.pod_keys[key] = uid
        if not mapping.is_ours(obj):
            self._forget_pod(uid)
            node = mapping.pod_node(obj)
            if node and not mapping.pod_finished(obj):
                self._set_other(uid, node, mapping.occupied_resource(obj))
            else:
                self._forget_other(uid)
            return
        try:
            info = mapping.pod_info(obj, self.pods.get(uid))
        except mapping.PodError as exc:
            reason = str(exc)
            previous = self.bad_pods.get(uid)
            self._forget_pod(uid)
            self.bad_pods[uid] = reason
            if previous != reason:
                log.warning("pod %s skipped: %s", key, reason)
                self._actions.events.append(KubeEvent(
                    "Pod", str(meta.get("namespace") or "default"), str(meta.get("name", "")),
                    uid, "InvalidPod", f"pod cannot be scheduled: {reason}", "Warning"))
            return
        self.bad_pods.pop(uid, None)
        prev = self.pods.get(uid)
        self.pods[uid] = info
        self._index_pod(prev, info)
        self._reconcile_pod(uid)
        if prev is not None and prev.placement != info.placement and uid in self.e_asks \
                and self._engine_live():
            # tolerations added to a waiting pod: the engine replaces a re-sent ask's placement
            self._b_asks.append(self._ask_message(uid, info))

    def on_node(self, event_type: str, obj: Mapping[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        if event_type == "DELETED":
            self.nodes.pop(name, None)
            self.bad_nodes.pop(name, None)
            self._reconcile_node(name)
            return
        try:
            info = mapping.node_info(obj)
        except mapping.NodeError as exc:
            reason = str(exc)
            if self.bad_nodes.get(name) != reason:
                self.bad_nodes[name] = reason
                log.warning("node %s skipped: %s", name, reason)
                self._actions.events.append(KubeEvent("Node", "", name, str(
                    (obj.get("metadata") or {}).get("uid", "")), "InvalidNode",
                    f"node cannot be used: {reason}", "Warning"))
            self.nodes.pop(name, None)
            self._reconcile_node(name)
            return
        self.bad_nodes.pop(name, None)
        self.nodes[name] = info
        self._reconcile_node(name)

    def on_bind_result(self, bind: Bind, ok: bool, conflict: bool = False,
                       gone: bool = False, reason: str = "") -> None:
        """The POST binding finished: ok, 409 (already bound), 404 (pod gone) or failed."""
        self.binding.pop(bind.uid, None)
        if ok:
            self.bindings_done += 1
            self.bind_failures.pop(bind.uid, None)
            info = self.pods.get(bind.uid)
            if info is not None and not info.node_name:
                self.assumed[bind.uid] = bind.node
            self._reconcile_pod(bind.uid)
        elif conflict or gone:
            self.bind_conflicts += conflict
            # already bound (by us before a restart, or by someone else): the watch tells where
            self._reconcile_pod(bind.uid)
        else:
            self.bind_errors += 1
            failures = self.bind_failures.get(bind.uid, 0) + 1
            self.bind_failures[bind.uid] = failures
            if bind.generation == self.generation:
                self._release_alloc(bind.uid, f"binding failed: {reason}")
            self._actions.events.append(KubeEvent(
                "Pod", bind.namespace, bind.name, bind.uid, "FailedBinding",
                f"binding to node {bind.node} failed: {reason}", "Warning"))
            if failures < MAX_BIND_ATTEMPTS:
                self._reconcile_pod(bind.uid)
            else:
                self.rejected_asks[bind.uid] = f"binding failed {failures} times"
        self._progress()

    def on_si(self, msg: Mapping[str, Any]) -> None:
        """One message from the engine."""
        mtype = msg.get("type")
        if mtype == si.ALLOCATION_RESPONSE:
            self._on_allocation_response(msg)
        elif mtype == si.ACK:
            self._on_ack(int(msg.get("replyTo", -1)), None)
        elif mtype == si.ERROR:
            if "replyTo" in msg:
                self._on_ack(int(msg["replyTo"]), str(msg.get("message", "")))
            else:
                log.warning("engine error: %s (%s)", msg.get("message"), msg.get("messageType"))
        elif mtype == si.REGISTER_RM_RESPONSE:
            self.instance_uuid = str(msg.get("instanceUUID", ""))
            self.ring_name = str(msg.get("ringName", ""))
        elif mtype == si.APPLICATION_RESPONSE:
            self._on_application_response(msg)
        elif mtype == si.NODE_RESPONSE:
            for item in msg.get("rejected") or []:
                name = str(item.get("nodeID", ""))
                log.warning("engine rejected node %s: %s", name, item.get("reason"))
                if self.e_nodes.pop(name, None) is not None:
                    self._drop_node_allocs(name)
                if self.node_recovery.get(name) is not None:
                    self.node_recovery.fire(name, NodeEvent.LOST)
                self._progress()
        elif mtype == si.EVENT_RECORDS:
            for record in msg.get("events") or []:
                self._on_event_record(record)

    def take(self) -> Actions:
        """Everything decided since the last call, SI messages in the order they must be sent."""
        self._flush()
        actions, self._actions = self._actions, Actions()
        return actions

    # ------------------------------------------------------------------ cluster bookkeeping
    def _index_pod(self, prev: PodInfo | None, info: PodInfo | None) -> None:
        if prev is not None:
            if prev.node_name:
                members = self.by_node.get(prev.node_name)
                if members is not None:
                    members.discard(prev.uid)
                    if not members:
                        del self.by_node[prev.node_name]
            live = self.app_live.get(prev.app_id)
            if live is not None:
                live.discard(prev.uid)
                if not live:
                    del self.app_live[prev.app_id]
            self._b_touched_apps.add(prev.app_id)
        if info is not None:
            if info.node_name and not info.finished:
                self.by_node.setdefault(info.node_name, set()).add(info.uid)
            if not info.finished:
                self.app_live.setdefault(info.app_id, set()).add(info.uid)

    def _forget_pod(self, uid: str) -> None:
        if uid in self.refused:
            self.refused.discard(uid)
            self._forget_other(uid)
        prev = self.pods.pop(uid, None)
        self.bad_pods.pop(uid, None)
        self.assumed.pop(uid, None)
        self.bind_failures.pop(uid, None)
        self.rejected_asks.pop(uid, None)
        self.dirty.discard(uid)
        if prev is not None:
            self._index_pod(prev, None)
        self._release(uid, "pod deleted")

    def _occupy(self, node: str, res: Resource, sign: int) -> None:
        change = resources.add if sign > 0 else resources.sub
        total = resources.strip_zero(change(self._occupied.get(node, {}), res))
        if total:
            self._occupied[node] = total
        else:
            self._occupied.pop(node, None)

    def _set_other(self, uid: str, node: str, res: Resource) -> None:
        prev = self.others.get(uid)
        if prev == (node, res):
            return
        if prev is not None:
            self._occupy(prev[0], prev[1], -1)
        self.others[uid] = (node, res)
        self._occupy(node, res, +1)
        if prev is not None and prev[0] != node:
            self._reconcile_node(prev[0])
        self._reconcile_node(node)

    def _forget_other(self, uid: str) -> None:
        prev = self.others.pop(uid, None)
        if prev is not None:
            self._occupy(prev[0], prev[1], -1)
            self._reconcile_node(prev[0])

    def occupied(self, node: str) -> Resource:
        """What other schedulers' bound, unfinished pods hold on a node."""
        return dict(self._occupied.get(node, {}))

    # ------------------------------------------------------------------ reconciliation
    def _engine_live(self) -> bool:
        return self.connected and self.state in (ShimState.RECOVERING, ShimState.RUNNING)

    def _release(self, uid: str, message: str) -> None:
        """The pod is gone or finished: release whatever the engine holds for it."""
        if not self._engine_live():
            return
        self._release_alloc(uid, message)
        self._release_ask(uid, message)

    def _release_alloc(self, uid: str, message: str) -> None:
        """Release the allocation the engine holds for uid, if any (the shim stopped it)."""
        alloc = self.e_allocs.pop(uid, None)
        if alloc is not None:
            self._b_rel_allocs.append(messages.AllocationRelease(
                alloc.app_id, uid, self.partition, si.TERMINATION_STOPPED_BY_RM, message))
            self._b_touched_apps.add(alloc.app_id)

    def _release_ask(self, uid: str, message: str) -> None:
        """Release the ask the engine holds for uid, if any."""
        app = self.e_asks.pop(uid, None)
        if app is not None:
            self._b_rel_asks.append(messages.AskRelease(app, uid, self.partition, message))
            self._b_touched_apps.add(app)

    def _ensure_app(self, info: PodInfo) -> bool:
        if info.app_id in self.e_apps:
            return True
        if info.app_id in self.rejected_apps:
            return False
        # the first pod seen defines the application (queue, user, gang), and keeps defining it
        # across engine restarts, so recovery puts it in the same queue as before
        info = self.app_origin.setdefault(info.app_id, info)
        self.e_apps[info.app_id] = info.queue
        app = messages.AddApplication(
            info.app_id, info.queue, self.partition,
            messages.UserGroupInfo(info.user, tuple(info.groups)), {"namespace": info.namespace})
        if info.task_groups:
            app = dataclasses.replace(
                app, placeholder_ask=resources.total(
                    {name: value * group.min_member
                     for name, value in group.min_resource.items()}
                    for group in info.task_groups),
                gang_scheduling_style=info.gang_style or si.GANG_SOFT,
                execution_timeout_ms=info.placeholder_timeout_s * 1000)
        self._b_apps.append(app)
        return True

    def _reconcile_pod(self, uid: str) -> None:
        info = self.pods.get(uid)
        if not self._engine_live():
            if info is not None:
                self.dirty.add(uid)
            return
        if info is None or info.finished:
            self._release(uid, "pod finished" if info is not None else "pod deleted")
            if uid in self.refused:
                self.refused.discard(uid)
                self._forget_other(uid)
            return
        node = info.node_name or self.assumed.get(uid, "")
        if info.node_name:
            self.assumed.pop(uid, None)
        alloc = self.e_allocs.get(uid)
        if node:
            if alloc is not None and alloc.node == node:
                self.dirty.discard(uid)
                return
            if alloc is not None and uid not in self.binding:
                self._release(uid, f"pod is bound to {node}, not {alloc.node}")
            self._release_ask(uid, f"pod was bound to {node} elsewhere")
            if uid in self.rejected_asks:
                if uid in self.refused:
                    self._set_other(uid, node, info.resource)
                self.dirty.discard(uid)
                return
            if node in self.e_nodes:
                if not self._ensure_app(info):
                    if self.state is ShimState.RUNNING or info.app_id in self.rejected_apps:
                        self.refused.add(uid)
                        self._set_other(uid, node, info.resource)
                    return
                self.e_allocs[uid] = _Alloc(info.app_id, node)
                self._b_allocs.append(messages.ExistingAllocation(
                    uid, info.app_id, node, self.partition, info.resource, info.placeholder,
                    info.task_group, info.priority))
            # else: held until the node is known to the engine (orphan adoption)
            self.dirty.discard(uid)
            return
        # pending
        if uid in self.binding or alloc is not None or uid in self.e_asks:
            self.dirty.discard(uid)
            return
        if self.state is not ShimState.RUNNING:
            self.dirty.add(uid)
            return
        self.dirty.discard(uid)
        if uid in self.rejected_asks or info.deleting:
            return
        if not self._ensure_app(info):
            return
        if info.task_groups and not info.placeholder:
            app_id = info.app_id
            if app_id not in self.placeholders_made:
                self.placeholders_made.add(app_id)
                if any(self.pods[u].node_name for u in self.app_live.get(app_id, ())):
                    self.gang_started.add(app_id)  # already running (a restarted shim)
                else:
                    self._actions.creates.extend(placeholder_pods(info))
            if not self._gang_ready(app_id):
                self.dirty.add(uid)                # held until the placeholders are placed
                return
        self.e_asks[uid] = info.app_id
        self._b_asks.append(self._ask_message(uid, info))

    def _ask_message(self, uid: str, info: PodInfo) -> messages.AllocationAsk:
        tags = {"kubernetes.io/meta/namespace": info.namespace,
                "kubernetes.io/meta/podName": info.name}
        if info.placement:
            tags[PLACEMENT_TAG] = info.placement
        return messages.AllocationAsk(uid, info.app_id, self.partition, info.resource,
                                      info.priority, info.placeholder, info.task_group, tags)

    def _gang_ready(self, app_id: str) -> bool:
        """YuniKorn's Reserving: a gang app's real pods wait until every placeholder is placed
        (or the engine gave up on them: a placeholder released or timed out)."""
        if app_id in self.gang_started:
            return True
        origin = self.app_origin.get(app_id)
        if origin is None or not origin.task_groups:
            return True
        want = sum(group.min_member for group in origin.task_groups)
        placed = sum(1 for u in self.app_live.get(app_id, ())
                     if self.pods[u].placeholder and (self.pods[u].node_name or u in self.e_allocs))
        if placed < want:
            return False
        self.gang_started.add(app_id)
        return True

    def _gang_progress(self, app_id: str, gave_up: bool = False) -> None:
        """A placeholder of app_id was placed or given up: release the held real pods if due."""
        if app_id in self.gang_started or app_id not in self.placeholders_made:
            return
        if gave_up:
            self.gang_started.add(app_id)
        if self._gang_ready(app_id):
            for u in sorted(self.app_live.get(app_id, ())):
                if not self.pods[u].placeholder:
                    self._reconcile_pod(u)

    def _node_attributes(self, name: str, info: NodeInfo) -> dict[str, str]:
        """The full attribute set: an UPDATE's attributes replace the node's in the engine."""
        attrs = {"si.io/hostname": name, "si/node-partition": self.partition,
                 "ready": "true" if info.ready else "false"}
        attrs.update(info.labels)
        attrs[TAINTS_ATTRIBUTE] = mapping.taints_json(info.taints)
        return attrs

    @staticmethod
    def _node_message(name: str, action: str, have: _EngineNode) -> messages.NodeChange:
        """CREATE / CREATE_DRAIN / UPDATE carry what the engine's view now holds."""
        return messages.NodeChange(name, action, dict(have.attributes), dict(have.allocatable),
                                   dict(have.occupied))

    def _drop_node_allocs(self, name: str) -> None:
        """The engine removed a node and its allocations: those pods are held until it returns."""
        for uid in [u for u, a in self.e_allocs.items() if a.node == name]:
            alloc = self.e_allocs.pop(uid)
            self._b_touched_apps.add(alloc.app_id)

    def _reconcile_node(self, name: str) -> None:
        if not self._engine_live():
            self._dirty_nodes.add(name)
            return
        self._dirty_nodes.discard(name)
        info = self.nodes.get(name)
        have = self.e_nodes.get(name)
        if info is None:
            if have is not None:
                del self.e_nodes[name]
                self._b_nodes.append(messages.NodeChange(name, si.NODE_DECOMISSION))
                self._drop_node_allocs(name)
            if self.node_recovery.get(name) is not None:
                self.node_recovery.fire(name, NodeEvent.LOST)
                self._progress()
            return
        occupied = self.occupied(name)
        attributes = self._node_attributes(name, info)
        if have is None:
            held = self.by_node.get(name)
            recovering = self.state is ShimState.RECOVERING or bool(held)
            schedulable = info.schedulable and not recovering
            action = si.NODE_CREATE if schedulable else si.NODE_CREATE_DRAIN
            have = self.e_nodes[name] = _EngineNode(dict(info.allocatable), occupied, schedulable,
                                                    attributes)
            self._b_nodes.append(self._node_message(name, action, have))
            self.node_recovery.add(name)
            if recovering:
                self._b_recovering.append(name)
            else:
                self.node_recovery.fire(name, NodeEvent.RECOVERED)  # nothing on it to recover
            for uid in sorted(held or ()):
                self._reconcile_pod(uid)
            return
        if (have.allocatable != info.allocatable or have.occupied != occupied
                or have.attributes != attributes):
            have.allocatable, have.occupied = dict(info.allocatable), occupied
            have.attributes = attributes
            self._b_nodes.append(self._node_message(name, si.NODE_UPDATE, have))
        may_schedule = (self.state is ShimState.RUNNING
                        and self.node_recovery.get(name) is NodeState.RECOVERED)
        if have.schedulable and not info.schedulable:
            have.schedulable = False
            self._b_nodes.append(messages.NodeChange(name, si.NODE_DRAIN))
        elif not have.schedulable and info.schedulable and may_schedule:
            have.schedulable = True
            self._b_nodes.append(messages.NodeChange(name, si.NODE_DRAIN_TO_SCHEDULABLE))

    # ------------------------------------------------------------------ progress of the machine
    def _progress(self) -> None:
        """Move the shim machine forward when its condition holds."""
        state = self.state
        if state is ShimState.REGISTERED:
            if {"nodes", "pods"} <= self.synced and not self.binding:
                self._begin_recovery()
        elif state is ShimState.RECOVERING:
            if self._running_id == 0 and not self._b_recovering and self.node_recovery.complete \
                    and not any(tag == "recover" for tag, _ in self.awaiting.values()):
                self._finish_recovery()

    def _begin_recovery(self) -> None:
        self.recoveries += 1
        self._fire(ShimEvent.RECOVER, f"{len(self.nodes)} nodes, {len(self.pods)} pods cached")
        self.node_recovery.start(self.nodes)
        self._running_id = 0
        # applications and existing allocations first (apps of bound pods), then nodes
        for name in sorted(self.nodes):
            self._reconcile_node(name)
        for uid in list(self.pods):
            info = self.pods[uid]
            if info.node_name or uid in self.assumed or info.finished:
                self._reconcile_pod(uid)
        self._dirty_nodes.clear()
        self._progress()

    def _finish_recovery(self) -> None:
        for name in sorted(self.e_nodes):
            have = self.e_nodes[name]
            info = self.nodes.get(name)
            if info is not None and info.schedulable and not have.schedulable:
                have.schedulable = True
                self._b_late_nodes.append(messages.NodeChange(name,
                                                              si.NODE_DRAIN_TO_SCHEDULABLE))
        self._running_id = -1  # set to the id of the message carrying the drains in _flush

    def _on_ack(self, reply_to: int, error: str | None) -> None:
        if reply_to == self._register_id and self.state is ShimState.NEW:
            if error is not None:
                self.fail(f"engine refused registration: {error}")
                return
            self.registrations += 1
            self._fire(ShimEvent.REGISTER, f"rmID {self.rm_id} registered with engine "
                                           f"{self.instance_uuid or '?'}")
            self._progress()
            return
        tag = self.awaiting.pop(reply_to, None)
        if error is not None:
            log.warning("engine answered request %d with an error: %s", reply_to, error)
        if tag is None:
            return
        kind, payload = tag
        if kind == "recover":
            done = 0
            for name in payload:
                if self.node_recovery.get(name) is NodeState.RECOVERING and name in self.e_nodes:
                    self.node_recovery.fire(name, NodeEvent.RECOVERED)
                    done += 1
                    if self.state is ShimState.RUNNING:
                        self._reconcile_node(name)  # drain -> schedulable if it may be
            counts = self.node_recovery.counts()
            log.info("nodes recovering -> recovered: %d (%s) (now %d recovering, %d recovered, "
                     "%d lost)", done, ", ".join(payload[:5]) + (", ..." if len(payload) > 5
                                                                 else ""),
                     counts["recovering"], counts["recovered"], counts["lost"])
            self._progress()
        elif kind == "running" and self.state is ShimState.RECOVERING:
            self._running_id = 0
            self._fire(ShimEvent.RECOVERED, f"{len(self.e_nodes)} nodes recovered, "
                                            f"{len(self.e_allocs)} allocations")
            for name in sorted(self._dirty_nodes | set(self.nodes)):
                self._reconcile_node(name)
            for uid in sorted(self.dirty | set(u for u, p in self.pods.items()
                                                if not p.node_name and not p.finished)):
                self._reconcile_pod(uid)

    # ------------------------------------------------------------------ engine messages
    def _on_allocation_response(self, msg: Mapping[str, Any]) -> None:
        for item in msg.get("new") or []:
            uid = str(item.get("allocationKey", ""))
            app = str(item.get("applicationID", ""))
            node = str(item.get("nodeID", ""))
            self.e_asks.pop(uid, None)
            self.e_allocs[uid] = _Alloc(app, node)
            info = self.pods.get(uid)
            if info is None or info.finished:
                self._release(uid, "pod is gone")
                continue
            bound = info.node_name or self.assumed.get(uid) or self.binding.get(uid)
            if bound:
                if bound != node:
                    self._release(uid, f"pod is already bound to {bound}")
                    self._reconcile_pod(uid)
                continue
            self.binding[uid] = node
            self._actions.binds.append(Bind(uid, info.namespace, info.name, node,
                                            self.generation))
            if info.placeholder:
                self._gang_progress(info.app_id)
        for item in msg.get("released") or []:
            uid = str(item.get("allocationKey", ""))
            alloc = self.e_allocs.pop(uid, None)
            term = item.get("terminationType")
            if alloc is not None:
                self._b_touched_apps.add(alloc.app_id)
            info = self.pods.get(uid)
            if info is not None and term in (si.TERMINATION_PREEMPTED,
                                              si.TERMINATION_PLACEHOLDER_REPLACED,
                                              si.TERMINATION_TIMEOUT):
                self._actions.deletes.append((info.namespace, info.name))
            if info is not None and info.placeholder:
                self._gang_progress(info.app_id, gave_up=True)
        for item in msg.get("releasedAsks") or []:
            uid = str(item.get("allocationKey", ""))
            app = self.e_asks.pop(uid, None)
            if app is not None:
                self._b_touched_apps.add(app)
            self.rejected_asks[uid] = str(item.get("message", "ask released by the scheduler"))
            info = self.pods.get(uid)
            if info is not None and info.placeholder:
                self._gang_progress(info.app_id, gave_up=True)
            if info is not None:
                self._actions.events.append(KubeEvent(
                    "Pod", info.namespace, info.name, uid, "AskReleased",
                    self.rejected_asks[uid], "Warning"))
        for item in msg.get("rejected") or []:
            uid = str(item.get("allocationKey", ""))
            app = self.e_asks.pop(uid, None)
            if app is not None:
                self._b_touched_apps.add(app)
            alloc = self.e_allocs.pop(uid, None)
            reason = str(item.get("reason", "rejected by the scheduler"))
            self.rejected_asks[uid] = reason
            info = self.pods.get(uid)
            if alloc is not None:
                # an existing allocation the engine refused: the pod still runs there, so its
                # node counts it as occupied (never over-committed)
                self._b_touched_apps.add(alloc.app_id)
                if info is not None and not info.finished:
                    self.refused.add(uid)
                    self._set_other(uid, alloc.node, info.resource)
            if info is not None and info.placeholder:
                self._gang_progress(info.app_id, gave_up=True)
            if info is not None:
                self._actions.events.append(KubeEvent(
                    "Pod", info.namespace, info.name, uid, "AskRejected", reason, "Warning"))

    def _on_application_response(self, msg: Mapping[str, Any]) -> None:
        for item in msg.get("rejected") or []:
            app = str(item.get("applicationID", ""))
            reason = str(item.get("reason", "rejected"))
            self.e_apps.pop(app, None)
            self.rejected_apps[app] = reason
            log.warning("application %s rejected: %s", app, reason)
            for uid in [u for u, a in self.e_asks.items() if a == app]:
                del self.e_asks[uid]
            for uid in sorted(self.app_live.get(app, ()))[:100]:
                info = self.pods[uid]
                self._actions.events.append(KubeEvent(
                    "Pod", info.namespace, info.name, uid, "ApplicationRejected",
                    f"application {app} rejected: {reason}", "Warning"))

    def _on_event_record(self, record: Mapping[str, Any]) -> None:
        uid = str(record.get("objectID", ""))
        info = self.pods.get(uid)
        if info is None:
            return
        self._actions.events.append(KubeEvent("Pod", info.namespace, info.name, uid,
                                              "Informational", str(record.get("message", ""))))

    # ------------------------------------------------------------------ batching
    def _flush(self) -> None:
        if not self.connected:
            self._reset_batch()
            return
        # applications whose last pod went away are removed after their releases
        removes = []
        for app in sorted(self._b_touched_apps):
            if not self.app_live.get(app):
                self.app_origin.pop(app, None)
                self.placeholders_made.discard(app)
                self.gang_started.discard(app)
            if app in self.e_apps and not self.app_live.get(app):
                if any(a == app for a in self.e_asks.values()) or any(
                        a.app_id == app for a in self.e_allocs.values()):
                    continue
                del self.e_apps[app]
                removes.append(messages.RemoveApplication(app, self.partition))
        for app in list(self.rejected_apps):
            if not self.app_live.get(app):
                del self.rejected_apps[app]
        rm_id = self.rm_id
        msgs: list[messages.ShimMessage] = []
        if self._b_apps:
            msgs.append(messages.ApplicationRequest(rm_id, new=tuple(self._b_apps)))
        if self._b_nodes:
            msgs.append(messages.NodeRequest(rm_id, tuple(self._b_nodes)))
        if self._b_rel_allocs or self._b_rel_asks:
            msgs.append(messages.AllocationRequest(
                rm_id, allocations_to_release=tuple(self._b_rel_allocs),
                asks_to_release=tuple(self._b_rel_asks)))
        if self._b_allocs or self._b_asks:
            msgs.append(messages.AllocationRequest(rm_id, asks=tuple(self._b_asks),
                                                   allocations=tuple(self._b_allocs)))
        if removes:
            msgs.append(messages.ApplicationRequest(rm_id, remove=tuple(removes)))
        if self._b_recovering:
            if not msgs:
                msgs.append(messages.NodeRequest(rm_id))
            rid = self._id()
            msgs[-1] = dataclasses.replace(msgs[-1], id=rid)
            self.awaiting[rid] = ("recover", list(self._b_recovering))
        if self._running_id == -1:
            rid = self._id()
            msgs.append(messages.NodeRequest(rm_id, tuple(self._b_late_nodes), rid))
            self._b_late_nodes = []
            self._running_id = rid
            self.awaiting[rid] = ("running", None)
        elif self._b_late_nodes:
            msgs.append(messages.NodeRequest(rm_id, tuple(self._b_late_nodes)))
        self._actions.si.extend(msg.to_si() for msg in msgs)
        self._reset_batch()

    # ------------------------------------------------------------------ status
    def status(self) -> dict[str, Any]:
        nodes = {name: state.value for name, state in sorted(self.node_recovery.states.items())}
        return {
            "state": self.state.value,
            "failure": self.machine.failure,
            "rmID": self.rm_id,
            "engineInstanceUUID": self.instance_uuid,
            "ringName": self.ring_name,
            "connected": self.connected,
            "registrations": self.registrations,
            "recoveries": self.recoveries,
            "history": [t.to_json() for t in self.machine.history],
            "nodeRecovery": self.node_recovery.counts(),
            "nodeStates": nodes,
            "cluster": {"nodes": len(self.nodes), "pods": len(self.pods),
                        "badPods": len(self.bad_pods), "badNodes": len(self.bad_nodes),
                        "otherPods": len(self.others), "heldPods": self.held_count()},
            "engine": {"applications": len(self.e_apps), "asks": len(self.e_asks),
                       "allocations": len(self.e_allocs), "nodes": len(self.e_nodes)},
            "bindings": {"done": self.bindings_done, "inFlight": len(self.binding),
                         "conflicts": self.bind_conflicts, "errors": self.bind_errors},
        }

    def held_count(self) -> int:
        return sum(1 for uid, info in self.pods.items()
                   if info.node_name and not info.finished and uid not in self.e_allocs
                   and info.node_name not in self.e_nodes)


_DNS_BAD = re.compile(r"[^a-z0-9-]+")


def _quantity(name: str, value: int) -> str:
    return f"{value}m" if name == "vcore" else str(value)


def placeholder_pods(info: PodInfo) -> list[dict[str, Any]]:
    """YuniKorn's placeholder pods for a gang application: minMember pods per task group.

    Named `tg-<app>-<group>-<i>` (deterministic, so a restarted shim's create is a harmless 409),
    owned by the pod that defined the app, requesting the group's minResource, scheduled by us,
    annotated `yunikorn.apache.org/placeholder: "true"` and with the task-group name, and
    constrained by the group's nodeSelector, affinity and tolerations (as YuniKorn does).
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
                    "labels": {"applicationId": info.app_id, "queue": info.queue,
                               "placeholder": "true"},
                    "annotations": {mapping.ANN_PLACEHOLDER: "true",
                                    mapping.ANN_TASK_GROUP_NAME: group.name,
                                    mapping.ANN_APP_ID: info.app_id},
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": info.name,
                                         "uid": info.uid, "controller": False}],
                },
                "spec": spec,
            })
    return pods
