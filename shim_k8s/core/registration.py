"""Registration and recovery: the SI connection, RegisterResourceManager, Acks, recovery.

A new connection registers (the engine may be a new instance) and forgets the engine's view;
once both informers listed and no binding is in flight, recovery sends applications, nodes as
CREATE_DRAIN and existing allocations, then DRAIN_TO_SCHEDULABLE when every node's allocations
were acknowledged; on that Ack the shim is Running (`shim_k8s.state` holds the machines).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from si import messages
from si import protocol as si

from ..state import NodeEvent, NodeState, ShimEvent, ShimState
from . import configuration, nodes, tasks

if TYPE_CHECKING:
    from .coordinator import ShimCore

log = logging.getLogger("ykshm.shim")


def on_connect(core: ShimCore) -> None:
    """A new SI connection: register (the engine may be a new instance)."""
    if core.state is ShimState.FAILED:
        return
    if core.state is not ShimState.NEW:
        on_disconnect(core, "new connection")
    core.generation += 1
    core.connected = True
    core.register_id = core.next_request_id()
    core.actions.si.append(configuration.register_message(core))


def on_disconnect(core: ShimCore, reason: str = "SI connection closed") -> None:
    """The engine went away: forget its view, back to New, recover on the next connection."""
    core.connected = False
    if core.state is ShimState.FAILED:
        return
    if core.state is not ShimState.NEW:
        core.fire(ShimEvent.DISCONNECT, reason)
    core.reset_engine_view()
    core.reset_batch()
    core.actions.si.clear()
    for uid in list(core.refused):   # a new engine may accept them
        core.refused.discard(uid)
        nodes.forget_other(core, uid)
    for name, state in list(core.node_recovery.states.items()):
        if name not in core.nodes and state is NodeState.LOST:
            core.node_recovery.forget(name)
        else:
            core.node_recovery.fire(name, NodeEvent.RESET)
    core.dirty.update(core.pods)
    core.dirty_nodes.update(core.nodes)


def progress(core: ShimCore) -> None:
    """Move the shim machine forward when its condition holds."""
    state = core.state
    if state is ShimState.REGISTERED:
        if {"nodes", "pods"} <= core.synced and not core.binding:
            _begin_recovery(core)
    elif state is ShimState.RECOVERING:
        if core.running_id == 0 and not core.batch.recovering and core.node_recovery.complete \
                and not any(tag == "recover" for tag, _ in core.awaiting.values()):
            _finish_recovery(core)


def _begin_recovery(core: ShimCore) -> None:
    core.recoveries += 1
    core.fire(ShimEvent.RECOVER, f"{len(core.nodes)} nodes, {len(core.pods)} pods cached")
    core.node_recovery.start(core.nodes)
    core.running_id = 0
    # applications and existing allocations first (apps of bound pods), then nodes
    for name in sorted(core.nodes):
        nodes.reconcile_node(core, name)
    for uid in list(core.pods):
        info = core.pods[uid]
        if info.node_name or uid in core.assumed or info.finished:
            tasks.reconcile_pod(core, uid)
    core.dirty_nodes.clear()
    progress(core)


def check_recovery_deadline(core: ShimCore, recovery: int, timeout: float) -> None:
    """Recovery number `recovery` started `timeout` seconds ago: if it is still the one going
    on, the shim fails (the seed's Failed path; the process exits and is restarted)."""
    if core.state is ShimState.RECOVERING and core.recoveries == recovery:
        counts = core.node_recovery.counts()
        core.fail(f"recovery did not complete within {timeout:g} s ({counts['recovering']} nodes "
                  f"still recovering, {counts['recovered']} recovered)")


def _finish_recovery(core: ShimCore) -> None:
    for name in sorted(core.e_nodes):
        have = core.e_nodes[name]
        info = core.nodes.get(name)
        if info is not None and info.schedulable and not have.schedulable:
            have.schedulable = True
            core.batch.late_nodes.append(messages.NodeChange(name,
                                                             si.NODE_DRAIN_TO_SCHEDULABLE))
    core.running_id = -1  # set to the id of the message carrying the drains in batch.flush


def on_registered(core: ShimCore, message: messages.RegisterResourceManagerResponse) -> None:
    """RegisterResourceManagerResponse: which engine instance and ring we talk to."""
    core.instance_uuid = message.instance_uuid
    core.ring_name = message.ring_name


def on_ack(core: ShimCore, reply_to: int, error: str | None) -> None:
    """An Ack (error None) or Error answering request `reply_to`."""
    if reply_to == core.register_id and core.state is ShimState.NEW:
        configuration.on_register_answer(core, error)
        if error is not None:
            core.fail(f"engine refused registration: {error}")
            return
        core.registrations += 1
        core.fire(ShimEvent.REGISTER, f"rmID {core.rm_id} registered with engine "
                                       f"{core.instance_uuid or '?'}")
        progress(core)
        return
    tag = core.awaiting.pop(reply_to, None)
    if error is not None:
        log.warning("engine answered request %d with an error: %s", reply_to, error)
    if tag is None:
        return
    kind, payload = tag
    if kind == "config":
        configuration.on_update_answer(core, payload, error)
        return
    if kind == "recover" and error is not None and core.state is ShimState.RECOVERING:
        # the seed's Failed path: a node the engine refused is not recovered, and the shim
        # cannot claim recovery done; fail so the process restarts into a fresh recovery
        core.fail(f"engine refused a recovery message: {error}")
        return
    if kind == "recover":
        done = 0
        for name in payload:
            if core.node_recovery.get(name) is NodeState.RECOVERING and name in core.e_nodes:
                core.node_recovery.fire(name, NodeEvent.RECOVERED)
                done += 1
                if core.state is ShimState.RUNNING:
                    nodes.reconcile_node(core, name)  # drain -> schedulable if it may be
        counts = core.node_recovery.counts()
        log.info("nodes recovering -> recovered: %d (%s) (now %d recovering, %d recovered, "
                 "%d lost)", done, ", ".join(payload[:5]) + (", ..." if len(payload) > 5
                                                             else ""),
                 counts["recovering"], counts["recovered"], counts["lost"])
        progress(core)
    elif kind == "running" and core.state is ShimState.RECOVERING:
        core.running_id = 0
        core.fire(ShimEvent.RECOVERED, f"{len(core.e_nodes)} nodes recovered, "
                                        f"{len(core.e_allocs)} allocations")
        for name in sorted(core.dirty_nodes | set(core.nodes)):
            nodes.reconcile_node(core, name)
        for uid in sorted(core.dirty | set(u for u, p in core.pods.items()
                                            if not p.node_name and not p.finished)):
            tasks.reconcile_pod(core, uid)
