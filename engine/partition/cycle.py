"""The allocation cycle: choose an application, find a node for its asks, book what fits.

`schedule(part, deadline)` allocates until nothing more fits or the deadline passes. Each step
descends from root to a leaf choosing children by fair share (usage / guaranteed, then
configuration order), picks an application by the leaf's `application.sort.priority` (YuniKorn's
default, enabled: the highest priority among an app's pending asks first) and then its
`application.sort.policy` (fifo: submission order; fair: smallest share of the queue's
guaranteed, else the cluster), and tries its asks by priority then age. A leaf counts its
pending asks with a priority (`Queue.prioritized`): while there are none, fifo takes the first
app without scanning, and within one `schedule` call resumes where its last pick stopped
(`_Walk`: apps before it cannot become candidates again during the call). Queues are not
ordered by priority (YuniKorn does, by currentPriority).
Node choice is `engine.partition.nodeindex.NodeIndex` (no scan per ask). Reserved nodes are tried first.

Enforcement (`commit`) follows the user-group-usage seed: an application's first allocation
needs room for one more running application (`queues.room_for_running_app`, then the UGM's
maxapplications); then the queue maximum is checked up the hierarchy, and only then is the UGM
usage increased (it refuses, changing nothing, over a user/group limit). The seed increases first
and rolls back when the queue refuses; each blocked cycle then wrote an increase and a decrease
of usage that never existed into the ring (~60 USERGROUP events a second per blocked app).

Node placement (`engine.predicates`): wherever a node is chosen -- first fit, reservation,
placeholder replacement -- it must admit the ask (labels and taints). A placeholder whose node
does not admit the real ask is not replaced; the ask is scheduled like one without placeholder.

Inter-pod affinity (`engine.partition.interpod`): the same places also obey the ask's `Probe`
(its required pod affinity/anti-affinity terms, and running pods' anti-affinity terms that
match it). A real pod replacing a placeholder is judged as if the placeholder were gone. Asks
whose probe restricts their nodes are remembered as failed under `probe.key` (shape, namespace
and labels), others under their shape.

An ask that cannot be allocated is told why through a request event, once per ask and reason,
and may preempt (`engine.partition.preemption`): when no node has room for it, its queue's max
refuses it, or its reserved node does not free up.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from typing import TYPE_CHECKING

from engine.app_state import SCHEDULABLE_STATES
from engine.objects import Allocation, Application, Ask, Node, Queue
from engine.partition import allocations, apps, asks, preemption, queues, reservations
from engine.partition.interpod import Probe
from engine.predicates import rejection
from shm.events import EventChangeDetail as Detail
from si import requestevents, resources

if TYPE_CHECKING:
    from engine.partition.state import PartitionState


def schedule(part: PartitionState, deadline_ns: int) -> int:
    """Allocate what fits until nothing more does or the deadline passes; how many."""
    before = part.allocations_made
    if part.reservations:
        _try_reserved(part)
    if not part.root.pending_count or not len(part.index):
        return part.allocations_made - before
    walk = _Walk()
    failed: dict[str, set] = {}
    clock = part.clock
    root = part.root
    steps = 0
    app = None
    while True:
        # the app just tried again, without a walk from root, when the walk to it met no
        # competition (`_Walk.alone`) and it still has asks to try
        if app is None or not walk.alone or not _candidate(app, walk.skip):
            walk.alone = True
            app = _pick(root, walk)
            if app is None:
                break
            app_failed = failed.get(app.app_id)
            if app_failed is None:
                app_failed = failed[app.app_id] = set()
        if not _try_app(part, app, app_failed):
            walk.skip.add(app.app_id)
        steps += 1
        if not steps & 31 and clock() > deadline_ns:
            break
    return part.allocations_made - before


def app_priority(app: Application) -> int:
    """YuniKorn's askMaxPriority: the highest priority among the app's pending asks (they are
    kept in priority order), what `application.sort.priority` sorts a leaf's apps by."""
    pending = app.pending
    return pending[0].priority if pending else -(1 << 31)


@dataclasses.dataclass(slots=True)
class _Walk:
    """What one `schedule` call learnt about candidates: applications that found nothing
    (`skip`), queues without candidates (`exhausted`, by id) and, per fifo leaf (by id), its
    applications in submission order and the position of the first candidate. Within one call
    an application that is not a candidate never becomes one again (asks arrive between cycles,
    never during one; states only move away from schedulable here; `skip` only grows), so a
    fifo leaf resumes its scan there instead of passing every finished application again.

    `alone`: the last walk met no competition (one candidate child at every level, a fifo
    leaf). Then, as long as its application remains a candidate, the next walk would pick it
    again (no queue gains pending asks and no leaf priorities during a call), so it is not
    walked."""

    skip: set[str] = dataclasses.field(default_factory=set)
    exhausted: set[int] = dataclasses.field(default_factory=set)
    fifo: dict[int, tuple[list[Application], int]] = dataclasses.field(default_factory=dict)
    alone: bool = True


def _candidate(app: Application, skip: set[str]) -> bool:
    return bool(app.asks) and app.app_id not in skip and app.fsm.state in SCHEDULABLE_STATES


def _first_fifo(q: Queue, walk: _Walk) -> Application | None:
    """A fifo leaf's first candidate in submission order, from where the last scan stopped."""
    entry = walk.fifo.get(id(q))
    apps, start = entry if entry is not None else (list(q.apps.values()), 0)
    skip = walk.skip
    for i in range(start, len(apps)):
        app = apps[i]
        if _candidate(app, skip):
            walk.fifo[id(q)] = (apps, i)
            return app
    walk.fifo[id(q)] = (apps, len(apps))
    return None


def _pick(q: Queue, walk: _Walk) -> Application | None:
    """The next application to try under `q` (fair share between queues, sort policy in a
    leaf); queues found without candidates are remembered in `walk.exhausted`."""
    exhausted = walk.exhausted
    if q.is_leaf:
        by_priority = q.prioritized and q.properties.get("application.sort.priority") != "disabled"
        fair = q.properties.get("application.sort.policy") == "fair"
        if not (by_priority or fair):  # fifo: submission order
            app = _first_fifo(q, walk)
            if app is None:
                exhausted.add(id(q))
            return app
        walk.alone = False
        skip = walk.skip
        best, best_key = None, None
        for app in q.apps.values():
            if not _candidate(app, skip):
                continue
            first = -app_priority(app) if by_priority else 0
            key = (first, app.share, app.submit_time, app.seq) if fair else (first,)
            if best is None or key < best_key:
                best, best_key = app, key
        if best is not None:
            return best
        exhausted.add(id(q))
        return None
    children = [c for c in q.children.values() if c.pending_count and id(c) not in exhausted]
    if len(children) > 1:
        walk.alone = False
        children.sort(key=lambda c: (c.share, c.order))
    for child in children:
        app = _pick(child, walk)
        if app is not None:
            return app
    exhausted.add(id(q))
    return None


def _try_app(part: PartitionState, app: Application, failed: set) -> bool:
    """Try the app's asks in order; True once one was allocated (or a placeholder released,
    which changes what to pick next)."""
    if not app.counted_running and not can_run(part, app):
        return False
    q = app.queue
    index = part.index
    interpod = part.interpod
    for ask in app.pending:  # (`failed` tested before a look-up: hashing a shape costs)
        if ask.reserved_node is not None or failed and ask.shape in failed:
            continue
        probe = interpod.probe(ask) if ask.placement is not None or interpod.anti else None
        if probe is not None and failed and probe.key in failed:
            continue
        if ask.task_group and not ask.placeholder:
            replaced = _try_replace(part, app, ask)
            if replaced:
                return True
            if replaced is False:
                return True  # placeholder released (size mismatch): pick again
            if probe is not None:  # trying placeholders took them out and back: look again
                probe = interpod.probe(ask)
        node = index.find(ask.resource, ask.shape, ask.placement, probe)
        if node is None:
            failed.add(ask.shape if probe is None else probe.key)
            if not queues.fits(q, ask.resource):
                _report_queue(part, app, ask)
                _maybe_preempt(part, app, ask)
                continue
            if _maybe_preempt(part, app, ask):
                continue
            # one reservation per application; a node to reserve is looked for once
            # per ask (until a placement change or a lost reservation allows another try)
            if "reserve" not in ask.reported and \
                    not any(e[0] is app for e in part.reservations.values()):
                ask.reported.add("reserve")
                cand = index.find_capacity(ask.resource, ask.placement, probe)
                if cand is not None:
                    reservations.reserve(part, app, ask, cand)
                    continue
            if part.sink.requests_enabled and "nonode" not in ask.reported:
                _report(part, ask, "nonode", _no_node_message(part, ask, probe))
            continue
        why = commit(part, app, ask, node)
        if why is None:
            return True
        failed.add(ask.shape)
        if why == "queue":
            _report_queue(part, app, ask)
            _maybe_preempt(part, app, ask)
        elif why == "user" and part.sink.requests_enabled:
            reason = part.ugm.why_not(q.path, app.app_id, ask.resource, app.ugi)
            _report(part, ask, "user", requestevents.user_quota(ask.key, q.path,
                                                               reason or "limit reached"))
    return False


def _maybe_preempt(part: PartitionState, app: Application, ask: Ask) -> bool:
    """An ask that cannot be placed may free room by preemption (engine.partition.preemption)."""
    if not preemption.wanted(part, app, ask):
        return False
    started = time.perf_counter()
    try:
        return preemption.try_preempt(part, app, ask)
    finally:
        part.metrics.preemption.observe(time.perf_counter() - started)


def can_run(part: PartitionState, app: Application) -> bool:
    """Whether the app may start running: its queues' and the UGM's maxapplications."""
    if not queues.room_for_running_app(app.queue):
        return False
    return part.ugm.can_run_app(app.queue.path, app.app_id, app.ugi)


def commit(part: PartitionState, app: Application, ask: Ask, node: Node) -> str | None:
    """Book the ask on the node unless a limit refuses it (why not: "apps", "queue",
    "user"). An application's first allocation needs room for one more running
    application (whichever path found the node: first fit or reservation); then the queue
    maximum, then the UGM (whose increase changes nothing when it refuses): a refused ask
    leaves no usage event behind."""
    if not app.counted_running and not can_run(part, app):
        return "apps"
    res = ask.resource
    q = app.queue
    if not queues.fits(q, res):
        return "queue"
    if not part.ugm.increase(q.path, app.app_id, res, app.ugi):
        return "user"
    asks.take(part, app, ask)
    allocations.book(part, app, ask.key, res, node, placeholder=ask.placeholder,
                     task_group=ask.task_group, priority=ask.priority, tags=ask.tags,
                     preempt_self=ask.allow_preempt_self, placement=ask.placement,
                     meta=ask.meta, originator=ask.originator)
    apps.allocated(part, app, ask.key)
    if part.sink.requests_enabled:
        part.sink.request(ask.key, app.app_id, f"Successfully allocated on node {node.node_id}")
    return None


def _try_reserved(part: PartitionState) -> int:
    """Allocate reserved asks whose node now has room; drop reservations that can never
    succeed (the node no longer admits the ask, or shrank below it)."""
    made = 0
    for key, (app, ask, node) in list(part.reservations.items()):
        if key not in part.reservations or not node.usable:
            continue
        probe = part.interpod.probe(ask)
        if not node.admits(ask.placement) or \
                (probe is not None and probe.reason(node.attributes) is not None):
            # a label or taint changed, or pods came that keep it away: the node will not do
            reservations.unreserve(part, ask)
            ask.reported.discard("reserve")
        elif resources.fits(ask.resource, node.available):
            reservations.unreserve(part, ask)
            if commit(part, app, ask, node) is None:
                made += 1
        elif not resources.fits(ask.resource, resources.sub(node.capacity, node.occupied)):
            reservations.unreserve(part, ask)  # the node shrank: it can never hold the ask
            ask.reported.discard("reserve")
        else:  # a reserved node that does not free up may be freed by preemption
            _maybe_preempt(part, app, ask)
    return made


# --- gang placeholders -------------------------------------------------------------------------

def _usable_placeholder(part: PartitionState, app: Application, ask: Ask) -> Allocation | None:
    """The first placeholder of the ask's task group on a node that admits the ask (its
    labels and taints, and the inter-pod rules as if the placeholder were gone: the real pod
    takes its place, it does not join it)."""
    found = False
    for alloc in app.allocations.values():
        if alloc.placeholder and alloc.task_group == ask.task_group and not alloc.replacing:
            found = True
            node = part.nodes.get(alloc.node_id)
            if node is not None and node.admits(ask.placement) and \
                    _interpod_allows(part, ask, alloc, node):
                return alloc
    if found and part.sink.requests_enabled:
        _report(part, ask, "phnode",
                f"Task group '{ask.task_group}' in application '{app.app_id}': no "
                f"placeholder is on a node that admits request '{ask.key}'")
    return None


def _interpod_allows(part: PartitionState, ask: Ask, ph: Allocation, node: Node) -> bool:
    """Whether the inter-pod rules let the ask replace the placeholder on its node."""
    interpod = part.interpod
    interpod.released(ph, node)
    try:
        probe = interpod.probe(ask)
        return probe is None or probe.reason(node.attributes) is None
    finally:
        interpod.booked(ph, node)


def _try_replace(part: PartitionState, app: Application, ask: Ask) -> bool | None:
    """Gang: put a real ask in the place of a placeholder of its task group.
    True = replaced; False = size mismatch (placeholder released); None = no placeholder
    on a node that admits the ask (scheduled as an ask without placeholder)."""
    ph = _usable_placeholder(part, app, ask)
    if ph is None:
        return None
    if not resources.fits(ask.resource, ph.resource):
        _report(part, ask, "mismatch",
                f"Task group '{ask.task_group}' in application '{app.app_id}': "
                f"allocation resources '{resources.strip_zero(ask.resource)}' are not matching "
                f"placeholder '{resources.strip_zero(ph.resource)}' allocation with ID "
                f"'{ph.key}'")
        app.count_timedout(ask.task_group)
        allocations.remove(part, app, ph, int(Detail.ALLOC_TIMEOUT), termination="TIMEOUT",
                           message="placeholder size mismatch")
        apps.check_done(part, app)
        return False
    node = part.nodes[ph.node_id]
    ph.replacing = True
    allocations.remove(part, app, ph, int(Detail.ALLOC_REPLACED),
                       termination="PLACEHOLDER_REPLACED",
                       message=f"replaced by {ask.key}", replacing=True)
    # the gang's resources were already admitted as placeholders: track, never refuse
    part.ugm.increase(app.queue.path, app.app_id, ask.resource, app.ugi, force=True)
    asks.take(part, app, ask)
    allocations.book(part, app, ask.key, ask.resource, node, placeholder=False,
                     task_group=ask.task_group, priority=ask.priority, tags=ask.tags,
                     preempt_self=ask.allow_preempt_self, placement=ask.placement,
                     meta=ask.meta, originator=ask.originator)
    apps.allocated(part, app, ask.key)
    if part.sink.requests_enabled:  # a gang member is told where it went, like any other pod
        part.sink.request(ask.key, app.app_id, f"Successfully allocated on node {node.node_id}")
    app.count_replaced(ask.task_group)
    return True


# --- why an ask waits (request events) ---------------------------------------------------------

def _report(part: PartitionState, ask: Ask, reason: str, message: str) -> None:
    """A request event for the shim, once per ask and reason."""
    if reason in ask.reported:
        return
    ask.reported.add(reason)
    part.sink.request(ask.key, ask.app_id, message, ask.resource)


def _no_node_message(part: PartitionState, ask: Ask, probe: Probe | None) -> str:
    """Why no node took the ask, counted per reason like kube-scheduler's FailedScheduling
    ("0/3 nodes are available: 1 node(s) had untolerated taint {k: v}, 2 node(s) ..."), so
    `kubectl describe pod` tells a pending pod's user what to change. A scan of every node,
    once per ask."""
    reasons: Counter[str] = Counter(_node_rejection(node, ask, probe)
                                    for node in part.nodes.values())
    parts = ", ".join(f"{count} node(s) {why}" for why, count in sorted(reasons.items()))
    return requestevents.no_node(ask.key, len(part.nodes), parts)


def _node_rejection(node: Node, ask: Ask, probe: Probe | None) -> str:
    """kube-scheduler's order: node state, NodeAffinity/TaintToleration, resources, then
    InterPodAffinity."""
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
    if probe is not None:
        why = probe.reason(node.attributes)
        if why is not None:
            return why
    return "had room (it freed up meanwhile)"


def _report_queue(part: PartitionState, app: Application, ask: Ask) -> None:
    if part.sink.requests_enabled and "queue" not in ask.reported:
        _report(part, ask, "queue", requestevents.queue_quota(
            ask.key, app.queue.path, resources.strip_zero(ask.resource), queues.headroom(app.queue)))
