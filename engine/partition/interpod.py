"""Inter-pod affinity: kube-scheduler's InterPodAffinity filter over the running allocations.

kube-scheduler's rules (its PreFilter counts, then Filter per node, in this order), with the
pods being our allocations (placeholders included; pods of other schedulers are unknown to the
engine):

- affinity: running pods that match ALL the incoming pod's affinity terms are counted per
  topology value of each term's key; a node passes when it has every term's key and each value
  counts at least one such pod. A node lacking a key fails. Exception (the first pod of a
  group): when no such pod runs on any node that has one of the keys, and the incoming pod
  matches all its own terms, any node with all the keys passes ("didn't match pod affinity
  rules");
- anti-affinity: a node fails when, for one of the incoming pod's anti-affinity terms, a pod
  matching that term runs in the node's topology domain ("didn't match pod anti-affinity
  rules"). A node lacking the key passes that term.
- existing pods' anti-affinity: a running pod with a required anti-affinity term that matches
  the incoming pod forbids every node with the same value of the term's topologyKey as the
  running pod's node ("didn't satisfy existing pods anti-affinity rules").

Counting without scans
----------------------
A `Tracker` counts the running allocations that match a set of terms, per node and per topology
value of each term's key. A pending ask with terms holds trackers from the moment it arrives
(one for its affinity terms, one per anti-affinity term), shared by every ask with the same
terms and reference-counted: a tracker is filled by one scan of the allocations when the first
such ask arrives, then kept up to date as allocations are booked and removed (only trackers
whose selector's hint label the allocation carries are tested), and dropped with the last ask.
The registry keeps one tracker per anti-affinity term of running pods, counting where the pods
having it run; which registry terms match a pod is looked up by the pod's namespace and labels
(hint index) and remembered until a term enters or leaves the registry (replicas share their
labels). So a node check is a few dict look-ups, and pods without terms cost nothing while no
running pod has anti-affinity terms (`probe` returns None).

A probe's `key` (the ask's shape, namespace and labels) keys the "failed" caches for asks whose
nodes these rules restrict: two asks of one shape but other labels may not fit the same nodes.
A change of what the trackers or the registry count calls `loosened` (the partition's node index
forgets what failed), and so does a tracker's creation: while no ask held its terms, failures
recorded under them were told of no change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from engine.podaffinity import EXISTING_ANTI_AFFINITY, NO_AFFINITY, NO_ANTI_AFFINITY, AffinityTerm
from si.tags import pod_meta

if TYPE_CHECKING:
    from engine.objects import Allocation, Ask, Node


_FORBIDDEN_CACHE_SIZE = 4096


def _bump(counter: dict[str, int], key: str, delta: int) -> None:
    value = counter.get(key, 0) + delta
    if value:
        counter[key] = value
    else:
        counter.pop(key, None)


def meta_of(obj: Ask | Allocation) -> tuple[str, dict[str, str]]:
    """An ask's or allocation's namespace and labels, read from its tags once."""
    meta = obj.meta
    if meta is None:
        meta = obj.meta = pod_meta(obj.tags)
    return meta


class Tracker:
    """Running allocations matching every one of `terms`: per node, and per value of each
    term's topology key (on nodes that have the key)."""

    __slots__ = ("terms", "keys", "per_node", "by_key", "refs", "hint")

    def __init__(self, terms: tuple[AffinityTerm, ...]) -> None:
        self.terms = terms
        self.keys = tuple(sorted({t.topology_key for t in terms}))
        self.per_node: dict[str, int] = {}
        self.by_key: dict[str, dict[str, int]] = {k: {} for k in self.keys}
        self.refs = 0
        self.hint = next((t.hint for t in terms if t.hint is not None), None)

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        for term in self.terms:
            if not term.matches(namespace, labels):
                return False
        return True

    def add(self, node: Node, delta: int) -> None:
        _bump(self.per_node, node.node_id, delta)
        attrs = node.attributes
        for key in self.keys:
            value = attrs.get(key)
            if value is not None:
                _bump(self.by_key[key], value, delta)

    def rebuild(self, nodes: Mapping[str, Node]) -> None:
        """Node labels changed: count the topology values again from the per-node counts."""
        self.by_key = {k: {} for k in self.keys}
        for node_id, count in self.per_node.items():
            node = nodes.get(node_id)
            if node is not None:
                for key in self.keys:
                    value = node.attributes.get(key)
                    if value is not None:
                        _bump(self.by_key[key], value, count)

    @property
    def empty(self) -> bool:
        """No matching pod on a node that has one of the keys (kube's len(counts) == 0)."""
        return not any(self.by_key.values())


class AskTerms:
    """The trackers a pending ask holds, and whether it matches its own affinity terms."""

    __slots__ = ("affinity", "anti", "self_match")

    def __init__(self, affinity: Tracker | None, anti: tuple[Tracker, ...],
                 self_match: bool) -> None:
        self.affinity = affinity
        self.anti = anti
        self.self_match = self_match


class Probe:
    """The inter-pod rules for one ask as they stand: `reason(attributes)` says why a node
    with these labels fails them (kube-scheduler's words), or None. `forbidden`: the registry's
    trackers of running pods' anti-affinity terms that match the ask's pod."""

    __slots__ = ("key", "forbidden", "affinity", "first", "anti")

    def __init__(self, key: tuple, forbidden: tuple[Tracker, ...],
                 terms: AskTerms | None) -> None:
        self.key = key
        self.forbidden = forbidden
        self.affinity = terms.affinity if terms is not None else None
        self.first = self.affinity is not None and terms.self_match and self.affinity.empty
        self.anti = terms.anti if terms is not None else ()

    def reason(self, attrs: Mapping[str, str]) -> str | None:
        """kube-scheduler's order: affinity, anti-affinity, existing pods' anti-affinity."""
        affinity = self.affinity
        if affinity is not None:
            exist = True
            for key in affinity.keys:
                value = attrs.get(key)
                if value is None:
                    return NO_AFFINITY
                if not affinity.by_key[key].get(value):
                    exist = False
            if not exist and not self.first:
                return NO_AFFINITY
        for tracker in self.anti:
            key = tracker.keys[0]
            value = attrs.get(key)
            if value is not None and tracker.by_key[key].get(value):
                return NO_ANTI_AFFINITY
        for tracker in self.forbidden:
            key = tracker.keys[0]
            value = attrs.get(key)
            if value is not None and tracker.by_key[key].get(value):
                return EXISTING_ANTI_AFFINITY
        return None


class InterPodIndex:
    """The trackers of pending asks' terms and the registry of running pods' anti-affinity
    terms, over the partition's nodes (see the module docstring). Callers on hot paths test
    `trackers` and `anti` (both empty: nothing to do) before calling in."""

    __slots__ = ("_nodes", "_loosened", "trackers", "_hinted", "_unhinted", "anti", "_anti_hinted",
                 "_anti_unhinted", "_forbidden_cache")

    def __init__(self, nodes: Mapping[str, Node],
                 loosened: Callable[[], None] = lambda: None) -> None:
        self._nodes = nodes
        self._loosened = loosened
        self.trackers: dict[tuple[AffinityTerm, ...], Tracker] = {}
        self._hinted: dict[tuple[str, str], set[Tracker]] = {}
        self._unhinted: set[Tracker] = set()
        # the registry: a running pod's anti-affinity term -> where pods with it run
        self.anti: dict[AffinityTerm, Tracker] = {}
        self._anti_hinted: dict[tuple[str, str], set[Tracker]] = {}
        self._anti_unhinted: set[Tracker] = set()
        self._forbidden_cache: dict[tuple[str, tuple], tuple[Tracker, ...]] = {}

    # --- running allocations -------------------------------------------------------------------

    def booked(self, alloc: Allocation, node: Node) -> bool:
        """An allocation runs on the node; True if anything counted changed (and `loosened`
        was called: a pod with affinity to it may find a node now)."""
        return self._count(alloc, node, 1)

    def released(self, alloc: Allocation, node: Node) -> bool:
        """An allocation left the node; True if anything counted changed (and `loosened`
        was called: a pod it kept away may find a node now)."""
        return self._count(alloc, node, -1)

    def _count(self, alloc: Allocation, node: Node, delta: int) -> bool:
        placement = alloc.placement
        anti = placement.anti_affinity if placement is not None else ()
        if not self.trackers and not anti:
            return False
        namespace, labels = meta_of(alloc)
        changed = False
        for tracker in self._candidates(labels, self._hinted, self._unhinted):
            if tracker.matches(namespace, labels):
                tracker.add(node, delta)
                changed = True
        for term in anti:
            self._register(term.resolve(namespace), node, delta)
            changed = True
        if changed:
            self._loosened()
        return changed

    def _register(self, term: AffinityTerm, node: Node, delta: int) -> None:
        entry = self.anti.get(term)
        if entry is None:
            entry = self.anti[term] = Tracker((term,))
            _index(entry, self._anti_hinted, self._anti_unhinted)
            self._forbidden_cache.clear()  # a term more: which pods it forbids is new
        entry.add(node, delta)
        if not entry.per_node:
            del self.anti[term]
            _unindex(entry, self._anti_hinted, self._anti_unhinted)
            self._forbidden_cache.clear()

    def topology_changed(self) -> None:
        """A node's labels changed: topology values are counted again."""
        for tracker in (*self.trackers.values(), *self.anti.values()):
            tracker.rebuild(self._nodes)

    # --- pending asks --------------------------------------------------------------------------

    def track(self, ask: Ask) -> None:
        """A pending ask with terms arrived (or got new ones): it holds its trackers from now
        on, so they are filled once and kept up to date, not rebuilt per ask."""
        placement = ask.placement
        if placement is not None and (placement.affinity or placement.anti_affinity):
            self._acquire(ask)

    def probe(self, ask: Ask) -> Probe | None:
        """The rules that restrict where the ask may go, or None when nothing does."""
        placement = ask.placement
        has_terms = placement is not None and (placement.affinity or placement.anti_affinity)
        if not has_terms and not self.anti:
            return None
        key = ask.pod_shape
        if key is None:
            namespace, labels = meta_of(ask)
            key = ask.pod_shape = (ask.shape, namespace, tuple(sorted(labels.items())))
        forbidden = self._forbidden(key[1], key[2]) if self.anti else ()
        if not has_terms and not forbidden:
            return None
        return Probe(key, forbidden, self._acquire(ask) if has_terms else None)

    def forget(self, ask: Ask) -> None:
        """The ask left (allocated, removed) or its terms changed: its trackers are let go."""
        ask.pod_shape = None
        terms = ask.interpod
        if terms is None:
            return
        ask.interpod = None
        for tracker in (terms.affinity, *terms.anti):
            if tracker is not None:
                tracker.refs -= 1
                if not tracker.refs:
                    del self.trackers[tracker.terms]
                    _unindex(tracker, self._hinted, self._unhinted)

    def _acquire(self, ask: Ask) -> AskTerms:
        terms = ask.interpod
        if terms is None:
            placement = ask.placement
            namespace, labels = meta_of(ask)
            affinity = tuple(t.resolve(namespace) for t in placement.affinity)
            terms = ask.interpod = AskTerms(
                self._tracker(affinity) if affinity else None,
                tuple(self._tracker((t.resolve(namespace),)) for t in placement.anti_affinity),
                all(t.matches(namespace, labels) for t in affinity))
        return terms

    def _tracker(self, terms: tuple[AffinityTerm, ...]) -> Tracker:
        tracker = self.trackers.get(terms)
        if tracker is None:
            tracker = self.trackers[terms] = Tracker(terms)
            _index(tracker, self._hinted, self._unhinted)
            # while no ask held these terms, nothing told the failures recorded under them
            # that the pods they count came or went
            self._loosened()
            for node in self._nodes.values():
                for alloc in node.allocations.values():
                    namespace, labels = meta_of(alloc)
                    if tracker.matches(namespace, labels):
                        tracker.add(node, 1)
        tracker.refs += 1
        return tracker

    def _forbidden(self, namespace: str,
                   labels: tuple[tuple[str, str], ...]) -> tuple[Tracker, ...]:
        """The registry entries whose term matches a pod with this namespace and these
        labels; remembered until a term enters or leaves the registry (the entries' counts
        are live; the replicas of one workload share their labels: found once for all)."""
        cache = self._forbidden_cache
        found = cache.get((namespace, labels))
        if found is None:
            if len(cache) >= _FORBIDDEN_CACHE_SIZE:
                cache.clear()  # pods with labels of their own (StatefulSets): keep it bounded
            as_dict = dict(labels)
            found = cache[(namespace, labels)] = tuple(
                entry for entry in self._candidates(as_dict, self._anti_hinted,
                                                    self._anti_unhinted)
                if entry.terms[0].matches(namespace, as_dict))
        return found

    @staticmethod
    def _candidates(labels: Mapping[str, str], hinted: Mapping[tuple[str, str], set],
                    unhinted: set) -> Iterable:
        """What a pod with these labels may match: the unhinted, and those whose hint pair
        the pod carries."""
        yield from unhinted
        if hinted:
            for pair in labels.items():
                found = hinted.get(pair)
                if found:
                    yield from found


def _index(item: Tracker, hinted: dict, unhinted: set) -> None:
    hint = item.hint
    if hint is None:
        unhinted.add(item)
    else:
        hinted.setdefault(hint, set()).add(item)


def _unindex(item: Tracker, hinted: dict, unhinted: set) -> None:
    hint = item.hint
    if hint is None:
        unhinted.discard(item)
    else:
        group = hinted.get(hint)
        if group is not None:
            group.discard(item)
            if not group:
                del hinted[hint]
