"""Nodes: added, updated, drained and removed by the RM; reservations; the node index.

Nodes
-----
A node's `attributes` are its labels; `ykshm.io/taints` among them is parsed once into
`Node.taints` and `ready` ("false" = not ready) into `Node.ready`. An UPDATE that sends
attributes replaces them (a label or taint left out is gone); nothing changes when any part of
an UPDATE is malformed. A change of labels or taints forgets what failed, so waiting asks are
tried again.

Reservations
------------
An ask that fits no node's free space but fits a node's capacity reserves that node (NODE /
ADD / NODE_RESERVATION); the reserved node serves only that ask until it is allocated, the ask
goes, or the node stops being usable.

Node index
----------
The usable nodes (ready and schedulable) sit in a list; `find(ask)` starts at a cursor and takes
the first node whose free space fits the ask, so a cluster with room answers after a handful of
checks, not a scan of every node. The cursor then moves past the chosen node ("fair": spread
the load) or stays on it ("binpacking": fill a node before the next).

`largest free` bound: for every resource name we keep an upper bound of the free amount on any
usable node. A scan that finds nothing sets the bound exactly (it saw every node); freeing
resources on a node raises the bound to that node's free amount; allocating only lowers free
space, so the bound stays an upper bound. An ask larger than the bound in any name fits nowhere,
known in O(1) without a scan. Asks of a shape that failed since the last time space was freed
also fail in O(1) (`_failed` keyed by the ask's shape, cleared by any increase of free space
and by any change of a node's labels or taints).

Placement (`engine.predicates`): a node is taken only if it admits the ask. The shape includes
the placement, so a constrained ask that fails says nothing about unconstrained asks of the same
size. The bound stays a bound over every unreserved node, whatever they admit. An ask without
placement on an untainted node pays one test of two attributes per candidate. Inter-pod
affinity (`engine.partition.interpod`) comes as a `Probe`: a node must pass it too, and a
failure is remembered under the probe's key (the ask's shape, namespace and labels).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from engine.objects import Application, Ask, Node
from engine.partition import allocations
from engine.partition.eventcodes import ADD, NODE, REMOVE, SET
from engine.partition.interpod import Probe
from engine.predicates import Placement, Taint, parse_taints
from shm.events import EventChangeDetail as Detail
from si import resources
from si.tags import TAINTS_ATTRIBUTE, node_ready

if TYPE_CHECKING:
    from engine.partition.coordinator import Partition
    from si.messages import NodeChange


class NodeIndex:
    """The usable nodes, a cursor and the largest-free bound (see the module docstring)."""

    __slots__ = ("_nodes", "_cursor", "_bound", "_failed", "binpacking")

    def __init__(self, binpacking: bool = False) -> None:
        self._nodes: list[Node] = []
        self._cursor = 0
        self._bound: dict[str, int] = {}
        self._failed: set[tuple] = set()
        self.binpacking = binpacking

    def __len__(self) -> int:
        return len(self._nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self._nodes)

    def add(self, node: Node) -> None:
        """A node became usable, or a usable node's free space may have grown."""
        if node.index_pos < 0:
            node.index_pos = len(self._nodes)
            self._nodes.append(node)
        self.freed(node)

    def remove(self, node: Node) -> None:
        pos = node.index_pos
        if pos < 0:
            return
        last = self._nodes.pop()
        if last is not node:
            self._nodes[pos] = last
            last.index_pos = pos
        node.index_pos = -1

    def freed(self, node: Node) -> None:
        """Free space on a usable node grew (release, capacity up, node added)."""
        self._failed.clear()
        bound = self._bound
        for name, value in node.available.items():
            if value > bound.get(name, 0):
                bound[name] = value

    def placement_changed(self) -> None:
        """A node's labels or taints changed: what failed may now find a node."""
        self._failed.clear()

    def find(self, ask: Mapping[str, int], shape: tuple = (),
             placement: Placement | None = None, probe: Probe | None = None) -> Node | None:
        """A usable, unreserved node that admits the ask (and passes its inter-pod `probe`)
        and whose free space fits it, or None. `shape` must be the ask's shape (it includes
        `placement`); a failure is remembered under `probe.key` when there is a probe."""
        bound = self._bound
        for name, value in ask.items():
            if value > 0 and value > bound.get(name, 0):
                return None
        failed = self._failed
        if shape and shape in failed or probe is not None and probe.key in failed:
            return None
        nodes = self._nodes
        count = len(nodes)
        if not count:
            return None
        start = self._cursor
        if start >= count:
            start = 0
        items = [(name, value) for name, value in ask.items() if value > 0]
        i = start
        for _ in range(count):
            node = nodes[i]
            if node.reserved_for is None:
                avail = node.available
                for name, value in items:
                    if value > avail.get(name, 0):
                        break
                else:
                    if (not (node.taints or placement is not None) or node.admits(placement)) \
                            and (probe is None or probe.reason(node.attributes) is None):
                        self._cursor = i if self.binpacking else i + 1
                        return node
            i += 1
            if i == count:
                i = 0
        # full scan found nothing: the bound becomes exact
        exact: dict[str, int] = {}
        for node in nodes:
            if node.reserved_for is None:
                for name, value in node.available.items():
                    if value > exact.get(name, 0):
                        exact[name] = value
        self._bound = exact
        if probe is not None:
            failed.add(probe.key)
        elif shape:
            failed.add(shape)
        return None

    def find_capacity(self, ask: Mapping[str, int], placement: Placement | None = None,
                      probe: Probe | None = None) -> Node | None:
        """An unreserved usable node that admits the ask and whose capacity minus foreign
        occupation fits it (a reservation candidate). A full scan: callers use it rarely
        (once per ask)."""
        items = [(name, value) for name, value in ask.items() if value > 0]
        best = None
        best_free = 0
        for node in self._nodes:
            if node.reserved_for is not None:
                continue
            if (node.taints or placement is not None) and not node.admits(placement):
                continue
            if probe is not None and probe.reason(node.attributes) is not None:
                continue
            cap, occ = node.capacity, node.occupied
            for name, value in items:
                if value > cap.get(name, 0) - occ.get(name, 0):
                    break
            else:
                free = sum(node.available.values())
                if best is None or free > best_free:
                    best, best_free = node, free
        return best


# --- nodes -------------------------------------------------------------------------------------

def add(part: Partition, rm_id: str, request: NodeChange, *,
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
    part.capacity = resources.add(part.capacity, cap)
    part.emit(NODE, ADD, int(Detail.DETAILS_NONE), node_id, "", "", cap)
    if node.usable:
        part.index.add(node)
    part.version += 1
    return None


def update(part: Partition, request: NodeChange) -> str | None:
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
        part.capacity = resources.add(resources.sub(part.capacity, node.capacity), cap)
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


def _refresh_index(part: Partition, node: Node) -> None:
    if node.usable:
        part.index.add(node)
    else:
        part.index.remove(node)
        if node.reserved_for is not None:
            _unreserve_node(part, node)


def _placement_changed(part: Partition) -> None:
    """A node's labels or taints changed: asks that found no node, or no node to reserve,
    may find one now (both caches are cleared; the next cycle tries them again), and the
    inter-pod counts per topology value are counted again."""
    part.index.placement_changed()
    part.interpod.topology_changed()
    for app in part.apps.values():
        for ask in app.pending:
            ask.reported.discard("reserve")


def set_schedulable(part: Partition, node_id: str, schedulable: bool) -> str | None:
    """DRAIN_NODE / DRAIN_TO_SCHEDULABLE; None, or why not."""
    node = part.nodes.get(node_id)
    if node is None:
        return f"unknown node {node_id}"
    if node.schedulable != schedulable:
        node.schedulable = schedulable
        node.ver += 1
        part.emit(NODE, SET, int(Detail.NODE_SCHEDULABLE), node_id, "",
                  f"schedulable: {schedulable}")
        _refresh_index(part, node)
        part.version += 1
    return None


def remove(part: Partition, node_id: str, *, notify: bool = True) -> str | None:
    """DECOMISSION: the node's allocations go with it (the shim is told unless `notify` is
    False: the RM re-registered and knows)."""
    node = part.nodes.get(node_id)
    if node is None:
        return f"unknown node {node_id}"
    if node.reserved_for is not None:
        _unreserve_node(part, node)
    part.index.remove(node)
    for alloc in list(node.allocations.values()):
        app = part.apps.get(alloc.app_id)
        if app is not None and alloc.key in app.allocations:
            allocations.remove(part, app, alloc, int(Detail.ALLOC_NODEREMOVED),
                               termination="STOPPED_BY_RM" if notify else "",
                               message=f"node {node_id} removed", node_removed=True)
    del part.nodes[node_id]
    part.capacity = resources.sub(part.capacity, node.capacity)
    part.emit(NODE, REMOVE, int(Detail.NODE_DECOMISSION), node_id, "", "")
    part.version += 1
    return None


# --- reservations ------------------------------------------------------------------------------

def reserve(part: Partition, app: Application, ask: Ask, node: Node) -> None:
    """The node serves only this ask from now on (NODE / ADD / NODE_RESERVATION)."""
    node.reserved_for = (app.app_id, ask.key)
    node.ver += 1
    app.ver += 1
    ask.reserved_node = node.node_id
    part.reservations[ask.key] = (app, ask, node)
    part.emit(NODE, ADD, int(Detail.NODE_RESERVATION), node.node_id, ask.key,
              f"reserved for application {app.app_id}", ask.resource)
    part.version += 1


def unreserve(part: Partition, ask: Ask) -> None:
    """The ask's reservation, if any, ends; the node is free for others again."""
    entry = part.reservations.pop(ask.key, None)
    ask.reserved_node = None
    if entry is None:
        return
    node = entry[2]
    node.reserved_for = None
    node.ver += 1
    entry[0].ver += 1
    part.emit(NODE, REMOVE, int(Detail.NODE_RESERVATION), node.node_id, ask.key, "",
              ask.resource)
    if node.index_pos >= 0:
        part.index.freed(node)
    part.version += 1


def _unreserve_node(part: Partition, node: Node) -> None:
    if node.reserved_for is not None:
        app_id, key = node.reserved_for
        app = part.apps.get(app_id)
        ask = app.asks.get(key) if app else None
        if ask is not None:
            unreserve(part, ask)
        else:
            node.reserved_for = None
            node.ver += 1


# --- node attributes ---------------------------------------------------------------------------

def _taints(attrs: Mapping[str, str]) -> tuple[Taint, ...]:
    """The node's parsed taints; ValueError names the attribute."""
    try:
        return parse_taints(attrs.get(TAINTS_ATTRIBUTE))
    except ValueError as exc:
        raise ValueError(f"attributes.{TAINTS_ATTRIBUTE}: {exc}") from None
