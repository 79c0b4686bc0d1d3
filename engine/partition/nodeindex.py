"""`NodeIndex`: the usable nodes, so that choosing a node for an ask costs a handful of checks.

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
placement, or whose placement selects no nodes by label (only tolerations or inter-pod terms),
pays one test of two attributes per untainted candidate. Inter-pod
affinity (`engine.partition.interpod`) comes as a `Probe`: a node must pass it too, and a
failure is remembered under the probe's key (the ask's shape, namespace and labels).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.objects import Node
    from engine.partition.interpod import Probe
    from engine.predicates import Placement


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
        if failed and (shape and shape in failed or probe is not None and probe.key in failed):
            return None
        nodes = self._nodes
        count = len(nodes)
        if not count:
            return None
        start = self._cursor
        if start >= count:
            start = 0
        items = [(name, value) for name, value in ask.items() if value > 0]
        selects = _selects(placement)
        i = start
        for _ in range(count):
            node = nodes[i]
            if node.reserved_for is None:
                avail = node.available
                for name, value in items:
                    if value > avail.get(name, 0):
                        break
                else:
                    if (not (node.taints or selects) or node.admits(placement)) \
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
        selects = _selects(placement)
        best = None
        best_free = 0
        for node in self._nodes:
            if node.reserved_for is not None:
                continue
            if (node.taints or selects) and not node.admits(placement):
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


def _selects(placement: Placement | None) -> bool:
    """Whether the placement picks nodes by their labels (a selector or affinity terms): if
    not, every untainted node admits it (its tolerations matter on tainted nodes only, its
    inter-pod terms are the probe's), and those are not asked."""
    return placement is not None and (bool(placement.selector) or placement.terms is not None)
