"""Preemption as YuniKorn's core does it (objects/preemption.go, queue.go): an ask below its
queue's guarantee frees room by having lower-priority allocations of over-guarantee queues
released, all on one node, then reserves that node.

When (`wanted`)
---------------
The cycle asks when an ask cannot be placed: no node has room, or its queue's max refuses it.
The partition's `preemption.enabled` must be true, the ask's pod must allow it (SI
`allowPreemptOther`: `spec.preemptionPolicy` is not Never), its leaf's `preemption.policy` must
not be `disabled` (a parent's `disabled` is inherited), it must have waited its leaf's
`preemption.delay` (inherited from the nearest parent that sets it; 30 s) since it arrived, it
must not have preempted before, and it looks again at most every 15 s (`RETRY_NS`).

Whom (`find_victims`)
---------------------
- Fence: from the ask's leaf upward, the first queue with `preemption.policy: fence`, or whose
  usage plus the ask exceeds its max; else root. Victims come only from inside the fence.
- Priority: the ask's priority is carried up its path (a `priority.policy: fence` queue resets
  it to its `priority.offset`, any other adds its offset), then down into other subtrees (minus
  each queue's offset; a `priority.policy: fence` subtree is skipped when its offset is above the
  priority, else all of it qualifies). An allocation qualifies when its priority is at most the
  priority reached at its leaf.
- Skipped: the ask's own leaf, `disabled` leaves, leaves within their guarantee (the smallest
  guarantee on their path, when there is one), allocations already preempted or being replaced,
  allocations that share no resource name with the ask.
- Gate: the ask's queue must be below its guarantee -- adding the ask and taking away candidates
  must at some point leave every queue on its path within min(guarantee, max) (a leaf with no
  guarantee on its path never is): otherwise nothing is preempted.
- Order on a node: pods that allow preemption first (annotation
  `yunikorn.apache.org/allow-preemption: "false"` = last), then lower priority, then newest.
- A victim is taken only if, for every queue on its path and every resource of the queue's
  guarantee the victim holds, the queue keeps at least its guarantee (its own, and what it
  inherits from its parents'; the ask counted where it will run). YuniKorn checks only the
  victim's leaf, and lets a queue above its guarantee in one resource lose another below it;
  ykshm checks the whole path, resource by resource.
- Node: every usable node the ask's placement admits (labels, taints: `engine.predicates`, no
  callback to the shim) that is not reserved for another application's ask (the ask takes over
  a plain reservation of its own application's, never one an ask preempted for). Per node YuniKorn's two passes
  choose the victims that shrink the node's shortfall; the best node has the fewest victims,
  no `allow-preemption: false` pod among them if possible, then the smallest node ID. More
  victims (anywhere) are added while the ask's queue path is still above its guarantee.

What then (`preempt`)
---------------------
Each victim is marked preempted (its queues' `preempting` grows), gets a request event "Preempted
by ASK from application APP in QUEUE" (objectID = the victim, referenceID = its application) and
is released to its shim as PREEMPTED_BY_SCHEDULER with "preempting allocations to free up
resources to run ask: ASK". The allocation stays booked until the shim confirms the release
(then APP / REMOVE / ALLOC_PREEMPT, `engine.partition.allocations.release`). The ask reserves
the node when its queue has room for it now (else the queue's max still blocks it and the
normal cycle places it once the victims are gone).

Usage in the checks is `allocated - preempting`: victims already chosen count as gone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from engine.config import PREEMPTION_DELAY_NS, parse_duration_ns
from engine.objects import MIN_PRIORITY, Allocation, Application, Ask, Node, Queue
from engine.partition import queues, reservations
from si.protocol import TERMINATION_PREEMPTED

if TYPE_CHECKING:
    from engine.partition.state import PartitionState

RETRY_NS = 15 * 1_000_000_000
"""YuniKorn's preemptAttemptFrequency: an ask looks for victims at most this often."""

_NO_PREEMPT = 1 << 34  # YuniKorn's scoreNoPreempt: a victim that asked not to be one


# --- queue settings ----------------------------------------------------------------------------

def preemption_policy(q: Queue) -> str:
    """A queue's `preemption.policy`; only `disabled` is inherited from a parent (YuniKorn's
    filterParentProperty)."""
    own = q.properties.get("preemption.policy")
    if own is not None:
        return own
    for anc in q.ancestors():
        if anc.properties.get("preemption.policy") == "disabled":
            return "disabled"
    return "default"


def preemption_delay_ns(q: Queue) -> int:
    """A leaf's `preemption.delay`, inherited from the nearest queue that sets it (30 s)."""
    for anc in q.ancestors():
        value = anc.properties.get("preemption.delay")
        if value is not None:
            return parse_duration_ns("preemption.delay", value)
    return PREEMPTION_DELAY_NS


def _priority_policy(q: Queue) -> tuple[bool, int]:
    """(priority.policy is fence, priority.offset): a queue's own, never inherited."""
    return (q.properties.get("priority.policy") == "fence",
            int(q.properties.get("priority.offset", "0")))


MAX_PRIORITY = 2**31 - 1


def queue_priority(q: Queue, highest: int) -> int:
    """YuniKorn's priorityValueByPolicy: what a queue whose highest priority inside is
    `highest` shows as its currentPriority (fence: its offset; else highest + offset, clamped
    to int32; nothing inside: the minimum)."""
    if highest == MIN_PRIORITY:
        return highest
    is_fence, offset = _priority_policy(q)
    if is_fence:
        return offset
    return max(MIN_PRIORITY, min(MAX_PRIORITY, highest + offset))


# --- when --------------------------------------------------------------------------------------

def wanted(part: PartitionState, app: Application, ask: Ask) -> bool:
    """Whether the ask should look for victims now (see the module docstring); marks the look."""
    if not part.preemption_enabled or not ask.allow_preempt_other or ask.triggered_preemption:
        return False
    now = part.clock()
    checked = ask.preempt_checked_ns
    if checked is not None and now - checked < RETRY_NS:
        return False
    q = app.queue
    if q is None or preemption_policy(q) == "disabled":
        return False
    if now - ask.queued_ns < preemption_delay_ns(q):
        return False
    ask.preempt_checked_ns = now
    return True


# --- queue snapshots ---------------------------------------------------------------------------

def _min_permissive(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    """Per resource the smaller value; a name set in only one keeps that value."""
    out = dict(a)
    for name, value in b.items():
        mine = out.get(name)
        out[name] = value if mine is None or value < mine else mine
    return out


class Snap:
    """A queue as preemption sees it: usage (allocated - preempting), its effective guarantee
    (the smallest on its path) and min(guarantee, max) (max: the smallest on the path, root's =
    the partition's capacity). Changed freely while choosing; the queue itself never is."""

    __slots__ = ("queue", "parent", "used", "guaranteed", "absolute", "leaf", "path", "_max",
                 "keep")

    def __init__(self, queue: Queue, parent: Snap | None, capacity: Mapping[str, int]) -> None:
        self.queue = queue
        self.parent = parent
        self.leaf = queue.is_leaf
        used = dict(queue.allocated)
        for name, value in queue.preempting.items():
            used[name] = used.get(name, 0) - value
        self.used = used
        if parent is None:
            self.guaranteed = dict(queue.guaranteed)
            maximum = _min_permissive(capacity, queue.max)
        else:
            self.guaranteed = _min_permissive(parent.guaranteed, queue.guaranteed)
            maximum = _min_permissive(parent._max, queue.max)
        self._max = maximum
        self.absolute = _min_permissive(self.guaranteed, maximum)
        keep = dict(self.guaranteed)
        for name, value in queue.guaranteed.items():
            if value > keep.get(name, 0):
                keep[name] = value
        self.keep = keep
        """What a victim may not take this queue below: its own guarantee, and what it
        inherits from its parents' (YuniKorn's effective guarantee)."""
        self.path: list[Snap] = [self] + (parent.path if parent is not None else [])

    def within(self) -> bool:
        """YuniKorn's IsWithinGuaranteedResource: this queue and its parents use no more than
        min(guarantee, max); a leaf with no guarantee on its path never is."""
        for snap in self.path:
            if snap.leaf and not snap.guaranteed:
                return False
            absolute = snap.absolute
            for name, value in snap.used.items():
                if value > 0 and value > absolute.get(name, 0):
                    return False
        return True

    def shortfall(self) -> int:
        """How far this queue's path is above min(guarantee, max), summed (0 = within)."""
        total = 0
        for snap in self.path:
            absolute = snap.absolute
            for name, value in snap.used.items():
                over = value - absolute.get(name, 0)
                if over > 0:
                    total += over
        return total


def _add(path: list[Snap], res: Mapping[str, int], sign: int) -> None:
    for snap in path:
        used = snap.used
        for name, value in res.items():
            used[name] = used.get(name, 0) + sign * value


def _keeps_guarantee(path: list[Snap], res: Mapping[str, int]) -> bool:
    """After taking `res` away (already applied): every queue on the path still has at least
    its guarantee of each resource `res` holds."""
    for snap in path:
        guaranteed = snap.keep
        if not guaranteed:
            continue
        used = snap.used
        for name, value in res.items():
            if value > 0:
                g = guaranteed.get(name)
                if g is not None and used.get(name, 0) < g:
                    return False
    return True


# --- whom --------------------------------------------------------------------------------------

class Search:
    """One preemption decision for one ask: snapshots, candidates, and the choice."""

    def __init__(self, part: PartitionState, app: Application, ask: Ask) -> None:
        self.part = part
        self.app = app
        self.ask = ask
        self.snaps: dict[str, Snap] = {}
        self.candidates: list[Allocation] = []
        self.paths: dict[str, list[Snap]] = {}  # application -> its queue path's snapshots
        leaf = app.queue
        assert leaf is not None
        self.ask_snap = self._snap(leaf)
        self._collect(leaf)

    def _snap(self, q: Queue) -> Snap:
        snap = self.snaps.get(q.path)
        if snap is None:
            parent = self._snap(q.parent) if q.parent is not None else None
            snap = self.snaps[q.path] = Snap(q, parent, self.part.capacity)
        return snap

    def _collect(self, leaf: Queue) -> None:
        """The fence, the priorities, and every candidate inside the fence."""
        ask = self.ask
        priority = ask.priority
        priorities: dict[str, int] = {}
        fence = leaf
        for q in leaf.ancestors():
            is_fence, offset = _priority_policy(q)
            priority = offset if is_fence else priority + offset
            priorities[q.path] = priority
            fence = q
            if q.parent is None or q.properties.get("preemption.policy") == "fence" or \
                    _over_max(q, ask.resource):
                break
        self._walk(fence, priorities[fence.path], False, priorities, leaf)

    def _walk(self, q: Queue, priority: int, fenced: bool, priorities: dict[str, int],
              ask_leaf: Queue) -> None:
        if q is ask_leaf:
            return
        if q.is_leaf:
            self._leaf_candidates(q, priority, fenced)
            return
        for child in q.children.values():
            child_priority = priorities.get(child.path)
            child_fenced = fenced
            if child_priority is None:
                is_fence, offset = _priority_policy(child)
                if is_fence:
                    if offset > priority:
                        continue
                    child_fenced = True
                    child_priority = priority
                else:
                    child_priority = priority - offset
            self._walk(child, child_priority, child_fenced, priorities, ask_leaf)

    def _leaf_candidates(self, q: Queue, priority: int, fenced: bool) -> None:
        if preemption_policy(q) == "disabled" or not q.apps:
            return
        snap = self._snap(q)
        guaranteed = snap.guaranteed
        if guaranteed and all(snap.used.get(name, 0) <= value
                              for name, value in guaranteed.items()):
            return  # within its guarantee
        wanted_names = [name for name, value in self.ask.resource.items() if value > 0]
        candidates = self.candidates
        for app in q.apps.values():
            if not app.allocations:
                continue
            self.paths[app.app_id] = snap.path
            for alloc in app.allocations.values():
                if alloc.preempted or alloc.replacing:
                    continue
                if not fenced and alloc.priority > priority:
                    continue
                res = alloc.resource
                for name in wanted_names:
                    if res.get(name, 0) > 0:
                        candidates.append(alloc)
                        break

    # --- the gate ------------------------------------------------------------------------------

    def queue_can_be_satisfied(self) -> bool:
        """YuniKorn's checkPreemptionQueueGuarantees: with the ask added and the candidates
        taken away one by one, the ask's path gets within its guarantee at some point."""
        ask_path = self.ask_snap.path
        _add(ask_path, self.ask.resource, 1)
        taken: list[Allocation] = []
        try:
            if self.ask_snap.within():
                return True
            for alloc in self.candidates:
                _add(self.paths[alloc.app_id], alloc.resource, -1)
                taken.append(alloc)
                if self.ask_snap.within():
                    return True
            return False
        finally:
            for alloc in taken:
                _add(self.paths[alloc.app_id], alloc.resource, 1)
            _add(ask_path, self.ask.resource, -1)

    # --- the node ------------------------------------------------------------------------------

    def choose(self) -> tuple[Node, list[Allocation]] | None:
        """The node and the victims: YuniKorn's tryNodes + calculateAdditionalVictims."""
        ask = self.ask
        by_node: dict[str, list[Allocation]] = {}
        for alloc in self.candidates:
            by_node.setdefault(alloc.node_id, []).append(alloc)
        _add(self.ask_snap.path, ask.resource, 1)
        try:
            best = self._best_node(by_node)
            if best is None:
                return None
            node, victims = best[2], best[3]
            extra = self._additional(victims)
            if extra is None:
                return None
            victims = victims + extra
            return (node, victims) if victims else None
        finally:
            _add(self.ask_snap.path, ask.resource, -1)

    def _best_node(self, by_node: dict[str, list[Allocation]]
                   ) -> tuple[int, str, Node, list[Allocation]] | None:
        """The lowest (score, node ID): a node where the ask fits as it is scores 0 (its queue's
        max was what blocked it); else the fewest victims, a refusing victim only if needed.
        Nodes are tried in ID order, so the first with one willing victim ends the search."""
        ask = self.ask
        need, placement = ask.resource, ask.placement
        # inter-pod terms as the pods run now: a node whose pods the ask's (anti-)affinity
        # refuses is not used, even if a victim there would lift the refusal (conservative:
        # kube-scheduler simulates the eviction; we never place against a term)
        probe = self.part.interpod.probe(ask)
        usable = []
        for node in self.part.index:
            if not self._may_use(node):
                continue  # reserved for another's ask
            if (node.taints or placement is not None) and not node.admits(placement):
                continue  # the node predicates, evaluated here (no callback to the shim)
            if probe is not None and probe.reason(node.attributes) is not None:
                continue
            if _fits(need, node.available):
                usable.append(node)
        if usable:
            node = min(usable, key=lambda n: n.node_id)
            return 0, node.node_id, node, []
        best: tuple[int, str, Node, list[Allocation]] | None = None
        nodes_by_id = self.part.nodes
        for node_id in sorted(by_node):
            node = nodes_by_id.get(node_id)
            if node is None or node.index_pos < 0 or not self._may_use(node):
                continue
            if (node.taints or placement is not None) and not node.admits(placement):
                continue
            if probe is not None and probe.reason(node.attributes) is not None:
                continue
            found = self._on_node(node, by_node[node_id])
            if found is not None and (best is None or found[0] < best[0]):
                best = (found[0], node_id, node, found[1])
                if found[0] == 1:
                    break  # one victim that allows it: nothing can do better
        return best

    def _may_use(self, node: Node) -> bool:
        """Free, reserved for this ask, or held by a plain reservation of another ask of the
        same application (never by one that preempted for it: that room is on its way)."""
        holder = node.reserved_for
        if holder is None or holder[1] == self.ask.key:
            return True
        if holder[0] != self.app.app_id:
            return False
        other = self.app.asks.get(holder[1])
        return other is None or not other.triggered_preemption

    def _on_node(self, node: Node, allocs: list[Allocation]) -> tuple[int, list] | None:
        """(score, victims) for one node the ask does not fit as it is, or None: YuniKorn's
        calculateVictimsByNode (two passes)."""
        need = self.ask.resource
        free = dict(node.available)
        allocs = sorted(allocs, key=victim_order)
        room = dict(free)
        for alloc in allocs:
            for name, value in alloc.resource.items():
                room[name] = room.get(name, 0) + value
        if not _fits(need, room):
            return None
        paths = self.paths
        # first pass: which victims shrink the shortfall (head) and which do not (tail)
        head: list[Allocation] = []
        tail: list[Allocation] = []
        applied: list[Allocation] = []
        for alloc in allocs:
            path, res = paths[alloc.app_id], alloc.resource
            _add(path, res, -1)
            if not _keeps_guarantee(path, res):
                _add(path, res, 1)
                continue
            if _shrinks(need, free, res):
                head.append(alloc)
                applied.append(alloc)
                for name, value in res.items():
                    free[name] = free.get(name, 0) + value
            else:
                _add(path, res, 1)
                tail.append(alloc)
        for alloc in applied:
            _add(paths[alloc.app_id], alloc.resource, 1)
        # second pass: in that order, the victims that keep the guarantees, until the ask fits
        free = dict(node.available)
        results: list[Allocation] = []
        index = -1
        for alloc in head + tail:
            path, res = paths[alloc.app_id], alloc.resource
            _add(path, res, -1)
            if not _keeps_guarantee(path, res):
                _add(path, res, 1)
                continue
            for name, value in res.items():
                free[name] = free.get(name, 0) + value
            results.append(alloc)
            if index < 0 and _fits(need, free):
                index = len(results) - 1
                break
        for alloc in results:
            _add(paths[alloc.app_id], alloc.resource, 1)
        if index < 0:
            return None
        victims = results[:index + 1]
        score = index + 1
        if any(not v.allow_preempt_self for v in victims):
            score |= _NO_PREEMPT
        return score, victims

    def _additional(self, victims: list[Allocation]) -> list[Allocation] | None:
        """More victims (any node) while the ask's queue path is above its guarantee; None if
        it cannot get within."""
        paths = self.paths
        for alloc in victims:
            _add(paths[alloc.app_id], alloc.resource, -1)
        chosen = {alloc.key for alloc in victims}
        extra: list[Allocation] = []
        try:
            ask_snap = self.ask_snap
            if ask_snap.within():
                return extra  # the usual case: the node's victims were enough
            rest = sorted((a for a in self.candidates if a.key not in chosen), key=victim_order)
            for alloc in rest:
                if ask_snap.within():
                    break
                before = ask_snap.shortfall()
                path, res = paths[alloc.app_id], alloc.resource
                _add(path, res, -1)
                if _keeps_guarantee(path, res) and ask_snap.shortfall() < before:
                    extra.append(alloc)
                else:
                    _add(path, res, 1)
            return extra if ask_snap.within() else None
        finally:
            for alloc in victims + extra:
                _add(paths[alloc.app_id], alloc.resource, 1)


def victim_order(alloc: Allocation) -> tuple[bool, int, int]:
    """Pods that allow preemption first, then lower priority, then newest."""
    return (not alloc.allow_preempt_self, alloc.priority, -alloc.create_time)


def _fits(need: Mapping[str, int], free: Mapping[str, int]) -> bool:
    for name, value in need.items():
        if value > 0 and value > free.get(name, 0):
            return False
    return True


def _shrinks(need: Mapping[str, int], free: Mapping[str, int], res: Mapping[str, int]) -> bool:
    """Whether freeing `res` makes the node's shortfall for `need` smaller."""
    for name, value in need.items():
        if value > free.get(name, 0) and res.get(name, 0) > 0:
            return True
    return False


def _over_max(q: Queue, res: Mapping[str, int]) -> bool:
    """Whether the queue's usage plus `res` exceeds its own max (a fence, as in YuniKorn)."""
    if not q.max:
        return False
    used = q.allocated
    preempting = q.preempting
    for name, limit in q.max.items():
        if used.get(name, 0) - preempting.get(name, 0) + res.get(name, 0) > limit:
            return True
    return False


# --- what then ---------------------------------------------------------------------------------

def try_preempt(part: PartitionState, app: Application, ask: Ask) -> bool:
    """Look for victims for the ask and preempt them; whether it did."""
    search = Search(part, app, ask)
    if not search.candidates or not search.queue_can_be_satisfied():
        return False
    choice = search.choose()
    if choice is None:
        return False
    node, victims = choice
    preempt(part, app, ask, node, victims)
    return True


def preempt(part: PartitionState, app: Application, ask: Ask, node: Node,
            victims: list[Allocation]) -> None:
    """Release the victims to their shims and reserve the node (see the module docstring)."""
    queue_path = app.queue.path if app.queue is not None else ""
    message = f"preempting allocations to free up resources to run ask: {ask.key}"
    for victim in victims:
        victim_app = part.apps[victim.app_id]
        victim.preempted = True
        q = victim_app.queue
        while q is not None:
            qp = q.preempting
            for name, value in victim.resource.items():
                qp[name] = qp.get(name, 0) + value
            q = q.parent
        part.sink.request(victim.key, victim.app_id,
                          f"Preempted by {ask.key} from application {app.app_id} in {queue_path}",
                          victim.resource)
        part.out.alloc_released(victim_app.rm_id, victim, TERMINATION_PREEMPTED, message)
        victim_app.ver += 1
    ask.triggered_preemption = True
    part.preemptions += 1
    if queues.fits(app.queue, ask.resource):
        if ask.reserved_node is not None:
            reservations.unreserve(part, ask)
        holder = node.reserved_for
        if holder is not None:  # another ask of this application: it looks elsewhere
            other = app.asks.get(holder[1])
            if other is not None:
                reservations.unreserve(part, other)
                other.reported.discard("reserve")
        reservations.reserve(part, app, ask, node)
    part.version += 1
