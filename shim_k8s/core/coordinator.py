"""`ShimCore`: the shim's state and its inputs; the decisions are made by one module per concept.

See `shim_k8s.core` for how it decides. The trio driver (`shim_k8s.shim`) calls the `on_*`
inputs and `take()`; tests drive this object directly. Not thread-safe; one trio task owns it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from si import messages
from si.resources import Resource

from .. import mapping
from ..mapping import NodeInfo, PodInfo
from ..state import NodeRecovery, ShimEvent, ShimMachine, ShimState
from . import batch, binding, configuration, nodes, registration, tasks
from .actions import Actions, Bind
from .batch import Batch
from .engine_view import EngineAllocation, EngineNode

log = logging.getLogger("ykshm.shim")


class ShimCore:
    """See the module docstring. Not thread-safe; one trio task owns it."""

    def __init__(self, rm_id: str = "mycluster", partition: str = mapping.DEFAULT_PARTITION,
                 machine: ShimMachine | None = None) -> None:
        self.rm_id = rm_id
        self.partition = partition
        self.config_source: Any = None
        """A `shim_k8s.configmaps.ConfigMapSource` when the ConfigMaps configure the engine."""
        self.register_config: Any = None
        self.machine = machine or ShimMachine()
        self.node_recovery = NodeRecovery()
        # --- the cluster (informers) ---
        self.pods: dict[str, PodInfo] = {}                 # uid -> our valid pods
        self.pod_keys: dict[str, str] = {}                 # ns/name -> uid (every pod seen)
        self.bad_pods: dict[str, str] = {}                 # uid -> reason (ours, unmappable)
        self.announced: dict[str, set[str]] = {}          # uid -> pod events posted once (podevents)
        self.others: dict[str, tuple[str, Resource]] = {}  # uid -> (node, res) other schedulers
        self.other_usage: dict[str, Resource] = {}         # node -> sum of others on it
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
        self.reset_engine_view()
        self._next_id = 1
        self.register_id = 0
        self.running_id = 0
        self.registrations = 0
        self.recoveries = 0
        self.dirty: set[str] = set()
        self.dirty_nodes: set[str] = set()
        self.actions = Actions()
        self.reset_batch()

    def reset_engine_view(self) -> None:
        """A new engine: it knows nothing of ours yet."""
        self.e_apps: dict[str, str] = {}          # app -> queue
        self.e_accepted: set[str] = set()         # apps the engine accepted: its lifecycle ends them
        self.e_asks: dict[str, str] = {}          # uid -> app
        self.e_allocs: dict[str, EngineAllocation] = {}     # uid -> allocation
        self.e_nodes: dict[str, EngineNode] = {}
        self.rejected_apps: dict[str, str] = {}
        self.rejected_asks: dict[str, str] = {}
        self.awaiting: dict[int, tuple[str, Any]] = {}
        self.running_id = 0

    def reset_batch(self) -> None:
        self.batch = Batch()

    @property
    def state(self) -> ShimState:
        return self.machine.state

    def next_request_id(self) -> int:
        n = self._next_id
        self._next_id += 1
        return n

    def fire(self, event: ShimEvent, reason: str = "") -> None:
        self.actions.transitions.append(self.machine.fire(event, reason))

    def on_synced(self, kind: str) -> None:
        """An informer listed once ("nodes" or "pods")."""
        self.synced.add(kind)
        registration.progress(self)

    def fail(self, reason: str) -> None:
        if self.state is not ShimState.FAILED:
            self.fire(ShimEvent.FAIL, reason)

    # --- inputs --------------------------------------------------------------------------------

    def on_connect(self) -> None:
        """A new SI connection: register (the engine may be a new instance)."""
        registration.on_connect(self)

    def on_disconnect(self, reason: str = "SI connection closed") -> None:
        """The engine went away: forget its view, back to New, recover on the next connection."""
        registration.on_disconnect(self, reason)

    def on_pod(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """A pod watch event (ADDED / MODIFIED / DELETED)."""
        tasks.on_pod(self, event_type, obj)

    def on_node(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """A node watch event (ADDED / MODIFIED / DELETED)."""
        nodes.on_node(self, event_type, obj)

    def on_configmap(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """A ConfigMap watch event of the scheduler's namespace (core.configuration)."""
        configuration.on_configmap(self, event_type, obj)

    def on_bind_result(self, bind: Bind, ok: bool, conflict: bool = False,
                       gone: bool = False, reason: str = "") -> None:
        """The POST binding finished: ok, 409 (already bound), 404 (pod gone) or failed."""
        binding.on_bind_result(self, bind, ok, conflict, gone, reason)

    def on_si(self, msg: Mapping[str, Any]) -> None:
        """One message from the engine (decoded JSON; typed here, at the core's entrance)."""
        message = messages.read_engine(msg)
        if isinstance(message, messages.AllocationResponse):
            binding.on_allocation_response(self, message)
        elif isinstance(message, messages.Ack):
            registration.on_ack(self, message.reply_to, None)
        elif isinstance(message, messages.Error):
            if message.reply_to is not None:
                registration.on_ack(self, message.reply_to, message.message)
            else:
                log.warning("engine error: %s (%s)", message.message, message.message_type)
        elif isinstance(message, messages.RegisterResourceManagerResponse):
            registration.on_registered(self, message)
        elif isinstance(message, messages.ApplicationResponse):
            tasks.on_application_response(self, message)
        elif isinstance(message, messages.NodeResponse):
            nodes.on_node_response(self, message)
        elif isinstance(message, messages.EventRecords):
            for record in message.events:
                tasks.on_event_record(self, record)

    def take(self) -> Actions:
        """Everything decided since the last call, SI messages in the order they must be sent."""
        batch.flush(self)
        actions, self.actions = self.actions, Actions()
        return actions

    def occupied(self, node: str) -> Resource:
        """What other schedulers' bound, unfinished pods hold on a node."""
        return dict(self.other_usage.get(node, {}))

    def engine_live(self) -> bool:
        """Connected, registered and past New: the engine may be told things."""
        return self.connected and self.state in (ShimState.RECOVERING, ShimState.RUNNING)

    def status(self) -> dict[str, Any]:
        node_states = {name: state.value
                       for name, state in sorted(self.node_recovery.states.items())}
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
            "nodeStates": node_states,
            "cluster": {"nodes": len(self.nodes), "pods": len(self.pods),
                        "badPods": len(self.bad_pods), "badNodes": len(self.bad_nodes),
                        "otherPods": len(self.others), "heldPods": self.held_count()},
            "engine": {"applications": len(self.e_apps), "asks": len(self.e_asks),
                       "allocations": len(self.e_allocs), "nodes": len(self.e_nodes)},
            "bindings": {"done": self.bindings_done, "inFlight": len(self.binding),
                         "conflicts": self.bind_conflicts, "errors": self.bind_errors},
        }

    def held_count(self) -> int:
        """Our bound, unfinished pods on nodes the engine does not know (held until it does).
        Walks `by_node` for the unknown nodes only: the status file asks every 200 ms, and a
        walk of every pod was 8-17% of the shim's CPU with 10,000 pods (py-spy, issue 25)."""
        e_nodes, e_allocs, pods = self.e_nodes, self.e_allocs, self.pods
        held = 0
        for node, uids in self.by_node.items():
            if node in e_nodes:
                continue
            for uid in uids:
                info = pods.get(uid)
                if info is not None and not info.finished and uid not in e_allocs:
                    held += 1
        return held

