"""Nodes: added, updated, drained and removed by the RM.

A node's `attributes` are its labels; `ykshm.io/taints` among them is parsed once into
`Node.taints` and `ready` ("false" = not ready) into `Node.ready`. An UPDATE that sends
attributes replaces them (a label or taint left out is gone); nothing changes when any part of
an UPDATE is malformed. A change of labels or taints forgets what failed, so waiting asks are
tried again.

Reservations (`reservations`) end when a node stops being usable or goes; the node index
(`nodeindex.NodeIndex`) is told of every node that becomes usable or unusable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from engine.objects import Node
from engine.partition import allocations, apps, reservations
from engine.partition.eventcodes import ADD, NODE, QUEUE, REMOVE, SET
from engine.predicates import Taint, parse_taints
from shm.events import EventChangeDetail as Detail
from si import resources
from si.tags import TAINTS_ATTRIBUTE, node_ready

if TYPE_CHECKING:
    from engine.partition.state import PartitionState
    from si.messages import NodeChange


def add(part: PartitionState, rm_id: str, request: NodeChange, *,
        drain: bool = False) -> str | None:
    """CREATE (or CREATE_DRAIN: not schedulable yet); None if accepted, else why not."""
    node_id = request.node_id
    if node_id in part.nodes:
        return f"node {node_id} already exists"
    cap = dict(request.schedulable_resource or {})
    occ = dict(request.occupied_resource or {})
    attrs = dict(request.attributes or {})
    try:
        taints = _taints(attrs)
    except ValueError as exc:
        return f"node {node_id}: {exc}"
    node = Node(node_id, rm_id, part.name, cap, occ, attrs, schedulable=not drain,
                ready=node_ready(attrs), taints=taints)
    part.nodes[node_id] = node
    if drain:  # registered not schedulable: said as YuniKorn says it (then true when drained to it)
        part.emit(NODE, SET, int(Detail.NODE_SCHEDULABLE), node_id, "", "schedulable: false")
    _set_capacity(part, resources.add(part.capacity, cap))
    part.emit(NODE, ADD, int(Detail.DETAILS_NONE), node_id, "", "", cap)
    if node.usable:
        part.index.add(node)
    part.version += 1
    return None


def update(part: PartitionState, request: NodeChange) -> str | None:
    """UPDATE: capacity and occupation if given; `attributes`, if given, replace the
    node's (the shim sends the full set: a label or taint left out is gone). Nothing
    changes when any part is malformed."""
    node = part.nodes.get(request.node_id)
    if node is None:
        return f"unknown node {request.node_id}"
    cap = request.schedulable_resource
    occ = request.occupied_resource
    attrs = None if request.attributes is None else dict(request.attributes)
    taints = node.taints
    if attrs is not None:
        try:
            taints = _taints(attrs)
        except ValueError as exc:
            return f"node {node.node_id}: {exc}"
    if cap is not None and cap != node.capacity:
        cap = dict(cap)
        _set_capacity(part, resources.add(resources.sub(part.capacity, node.capacity), cap))
        node.capacity = cap
        part.emit(NODE, SET, int(Detail.NODE_CAPACITY), node.node_id, "", "", cap)
    if occ is not None and occ != node.occupied:
        node.occupied = dict(occ)
        part.emit(NODE, SET, int(Detail.NODE_OCCUPIED), node.node_id, "", "", occ or None)
    if attrs is not None and attrs != node.attributes:
        node.attributes = attrs
        node.taints = taints
        _placement_changed(part)
        ready = node_ready(attrs)
        if ready != node.ready:
            node.ready = ready
            part.emit(NODE, SET, int(Detail.NODE_READY), node.node_id, "", f"ready: {ready}")
    node.recompute()
    _refresh_index(part, node)
    part.version += 1
    return None


def _set_capacity(part: PartitionState, capacity: dict[str, int]) -> None:
    """The partition's size, which is the root queue's max: a change is the root's QUEUE_MAX
    event, as YuniKorn's SetMaxResource sends it at each node registered, resized or removed
    (the event carries the new max; YuniKorn's carries the one it replaces)."""
    if capacity != part.capacity:
        part.capacity = capacity
        part.emit(QUEUE, SET, int(Detail.QUEUE_MAX), part.root.path, "", "",
                  resources.strip_zero(capacity) or None)


def _refresh_index(part: PartitionState, node: Node) -> None:
    if node.usable:
        part.index.add(node)
    else:
        part.index.remove(node)
        if node.reserved_for is not None:
            reservations.unreserve_node(part, node)


def _placement_changed(part: PartitionState) -> None:
    """A node's labels or taints changed: asks that found no node, or no node to reserve,
    may find one now (both caches are cleared; the next cycle tries them again), and the
    inter-pod counts per topology value are counted again."""
    part.index.placement_changed()
    part.interpod.topology_changed()
    for app in part.apps.values():
        for ask in app.pending:
            ask.reported.discard("reserve")


def set_schedulable(part: PartitionState, node_id: str, schedulable: bool) -> str | None:
    """DRAIN_NODE / DRAIN_TO_SCHEDULABLE; None, or why not."""
    node = part.nodes.get(node_id)
    if node is None:
        return f"unknown node {node_id}"
    if node.schedulable != schedulable:
        node.schedulable = schedulable
        node.ver += 1
        part.emit(NODE, SET, int(Detail.NODE_SCHEDULABLE), node_id, "",
                  f"schedulable: {str(schedulable).lower()}")
        _refresh_index(part, node)
        part.version += 1
    return None


def remove(part: PartitionState, node_id: str, *, notify: bool = True) -> str | None:
    """DECOMISSION: the node's allocations go with it (the shim is told unless `notify` is
    False: the RM re-registered and knows)."""
    node = part.nodes.get(node_id)
    if node is None:
        return f"unknown node {node_id}"
    if node.reserved_for is not None:
        reservations.unreserve_node(part, node)
    part.index.remove(node)
    for alloc in list(node.allocations.values()):
        app = part.apps.get(alloc.app_id)
        if app is not None and alloc.key in app.allocations:
            allocations.remove(part, app, alloc, int(Detail.ALLOC_NODEREMOVED),
                               termination="STOPPED_BY_RM" if notify else "",
                               message=f"node {node_id} removed", node_removed=True)
            apps.check_done(part, app)
    del part.nodes[node_id]
    _set_capacity(part, resources.sub(part.capacity, node.capacity))
    part.emit(NODE, REMOVE, int(Detail.NODE_DECOMISSION), node_id, "", "")
    part.version += 1
    return None


# --- node attributes ---------------------------------------------------------------------------

def _taints(attrs: Mapping[str, str]) -> tuple[Taint, ...]:
    """The node's parsed taints; ValueError names the attribute."""
    try:
        return parse_taints(attrs.get(TAINTS_ATTRIBUTE))
    except ValueError as exc:
        raise ValueError(f"attributes.{TAINTS_ATTRIBUTE}: {exc}") from None
