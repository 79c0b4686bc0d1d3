"""Nodes: the cluster's nodes as the engine should see them (CREATE, UPDATE, drains,
DECOMISSION), and what other schedulers' pods occupy on them.

A node's attributes are sent whole (labels, `ready`, taints, partition): an UPDATE replaces the
engine's, so `kubectl label` / `kubectl taint` reach the node filter.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from si import messages
from si import protocol as si
from si import resources
from si.resources import Resource
from si.tags import (DEFAULT_RACK, HOSTNAME_ATTRIBUTE, PARTITION_ATTRIBUTE, RACKNAME_ATTRIBUTE,
                     READY_ATTRIBUTE, TAINTS_ATTRIBUTE)

from .. import mapping
from ..mapping import NodeInfo
from ..state import NodeEvent, NodeState, ShimState
from . import registration, tasks
from .actions import KubeEvent
from .engine_view import EngineNode

if TYPE_CHECKING:
    from .coordinator import ShimCore

log = logging.getLogger("ykshm.shim")


def on_node(core: ShimCore, event_type: str, obj: Mapping[str, Any]) -> None:
    name = str((obj.get("metadata") or {}).get("name", ""))
    if event_type == "DELETED":
        core.nodes.pop(name, None)
        core.bad_nodes.pop(name, None)
        reconcile_node(core, name)
        return
    try:
        info = mapping.node_info(obj)
    except mapping.NodeError as exc:
        reason = str(exc)
        if core.bad_nodes.get(name) != reason:
            core.bad_nodes[name] = reason
            log.warning("node %s skipped: %s", name, reason)
            core.actions.events.append(KubeEvent("Node", "", name, str(
                (obj.get("metadata") or {}).get("uid", "")), "InvalidNode",
                f"node cannot be used: {reason}", "Warning"))
        core.nodes.pop(name, None)
        reconcile_node(core, name)
        return
    core.bad_nodes.pop(name, None)
    core.nodes[name] = info
    reconcile_node(core, name)


def _occupy(core: ShimCore, node: str, res: Resource, sign: int) -> None:
    change = resources.add if sign > 0 else resources.sub
    total = resources.strip_zero(change(core.other_usage.get(node, {}), res))
    if total:
        core.other_usage[node] = total
    else:
        core.other_usage.pop(node, None)


def set_other(core: ShimCore, uid: str, node: str, res: Resource) -> None:
    prev = core.others.get(uid)
    if prev == (node, res):
        return
    if prev is not None:
        _occupy(core, prev[0], prev[1], -1)
    core.others[uid] = (node, res)
    _occupy(core, node, res, +1)
    if prev is not None and prev[0] != node:
        reconcile_node(core, prev[0])
    reconcile_node(core, node)


def forget_other(core: ShimCore, uid: str) -> None:
    prev = core.others.pop(uid, None)
    if prev is not None:
        _occupy(core, prev[0], prev[1], -1)
        reconcile_node(core, prev[0])


def _node_attributes(core: ShimCore, name: str, info: NodeInfo) -> dict[str, str]:
    """The full attribute set: an UPDATE's attributes replace the node's in the engine."""
    attrs = {HOSTNAME_ATTRIBUTE: name, RACKNAME_ATTRIBUTE: DEFAULT_RACK,
             PARTITION_ATTRIBUTE: core.partition, READY_ATTRIBUTE: "true" if info.ready else "false"}
    attrs.update(info.labels)
    attrs[TAINTS_ATTRIBUTE] = mapping.taints_json(info.taints)
    return attrs


def _node_message(name: str, action: str, have: EngineNode) -> messages.NodeChange:
    """CREATE / CREATE_DRAIN / UPDATE carry what the engine's view now holds."""
    return messages.NodeChange(name, action, dict(have.attributes), dict(have.allocatable),
                               dict(have.occupied))


def drop_node_allocs(core: ShimCore, name: str) -> None:
    """The engine removed a node and its allocations: those pods are held until it returns."""
    for uid in [u for u, a in core.e_allocs.items() if a.node == name]:
        alloc = core.e_allocs.pop(uid)
        core.batch.touched_apps.add(alloc.app_id)


def reconcile_node(core: ShimCore, name: str) -> None:
    if not core.engine_live():
        core.dirty_nodes.add(name)
        return
    core.dirty_nodes.discard(name)
    info = core.nodes.get(name)
    have = core.e_nodes.get(name)
    if info is None:
        if have is not None:
            del core.e_nodes[name]
            core.batch.nodes.append(messages.NodeChange(name, si.NODE_DECOMISSION))
            drop_node_allocs(core, name)
        if core.node_recovery.get(name) is not None:
            core.node_recovery.fire(name, NodeEvent.LOST)
            registration.progress(core)
        return
    occupied = core.occupied(name)
    attributes = _node_attributes(core, name, info)
    if have is None:
        held = core.by_node.get(name)
        recovering = core.state is ShimState.RECOVERING or bool(held)
        schedulable = info.schedulable and not recovering
        action = si.NODE_CREATE if schedulable else si.NODE_CREATE_DRAIN
        have = core.e_nodes[name] = EngineNode(dict(info.allocatable), occupied, schedulable,
                                                attributes)
        core.batch.nodes.append(_node_message(name, action, have))
        core.node_recovery.add(name)
        if recovering:
            core.batch.recovering.append(name)
        else:
            core.node_recovery.fire(name, NodeEvent.RECOVERED)  # nothing on it to recover
        for uid in sorted(held or ()):
            tasks.reconcile_pod(core, uid)
        return
    if (have.allocatable != info.allocatable or have.occupied != occupied
            or have.attributes != attributes):
        have.allocatable, have.occupied = dict(info.allocatable), occupied
        have.attributes = attributes
        core.batch.nodes.append(_node_message(name, si.NODE_UPDATE, have))
    may_schedule = (core.state is ShimState.RUNNING
                    and core.node_recovery.get(name) is NodeState.RECOVERED)
    if have.schedulable and not info.schedulable:
        have.schedulable = False
        core.batch.nodes.append(messages.NodeChange(name, si.NODE_DRAIN))
    elif not have.schedulable and info.schedulable and may_schedule:
        have.schedulable = True
        core.batch.nodes.append(messages.NodeChange(name, si.NODE_DRAIN_TO_SCHEDULABLE))


def on_node_response(core: ShimCore, message: messages.NodeResponse) -> None:
    """NodeResponse: a node the engine rejected is not in its view (nor recoverable)."""
    for rejected in message.rejected:
        name = rejected.node_id
        log.warning("engine rejected node %s: %s", name, rejected.reason)
        if core.e_nodes.pop(name, None) is not None:
            drop_node_allocs(core, name)
        if core.node_recovery.get(name) is not None:
            core.node_recovery.fire(name, NodeEvent.LOST)
        registration.progress(core)
