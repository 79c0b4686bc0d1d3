"""Node placement: kube-scheduler's NodeAffinity and TaintToleration filters, on SI data.

An ask may carry `allocationTags["ykshm.io/placement"]` (its pod's nodeSelector, required node
affinity, tolerations, and required inter-pod (anti-)affinity terms: `engine.podaffinity`) and
a node the attribute `ykshm.io/taints` (its NoSchedule/NoExecute taints); the encoding is in
docs/CONTRACTS.md ("Node placement", "Inter-pod affinity"). Both are parsed once, when the
ask or node arrives, into frozen values: choosing a node runs in the scheduling cycle's inner
loop and must not touch JSON. The tag is checked by the validator the shim builds it with
(`si.placement.placement_doc`): `ValueError` names the offending field, and the partition
rejects the ask. Label requirements are evaluated by `engine.labelselector`.

A node admits an ask when every nodeSelector pair equals the node's label, one of the
nodeSelectorTerms matches (if the ask has any), and every taint of the node is tolerated. An ask
without placement tolerates no taint: that is `admits(None, ...)`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

from engine.labelselector import Requirement, requirement_of
from engine.podaffinity import PodTerm, terms_of
from si.kubeschema import load, nonempty, obj, one_of, string
from si.placement import TAINT_EFFECTS, placement_doc


# --- values ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class Term:
    """A nodeSelectorTerm: all its requirements must hold; with none it matches nothing."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        if not self.expressions and not self.fields:
            return False
        for req in self.expressions:
            if not req.test(labels.get(req.key)):
                return False
        for req in self.fields:
            if not req.test(name):
                return False
        return True


@dataclasses.dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclasses.dataclass(frozen=True, slots=True)
class Toleration:
    """`operator` is "Equal" or "Exists"; empty `key` (Exists only) and `effect` match all."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' Toleration.ToleratesTaint."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclasses.dataclass(frozen=True, slots=True)
class Placement:
    """An ask's node constraints. `terms` None = no required node affinity (any node).
    `affinity` / `anti_affinity`: the required inter-pod terms (`engine.podaffinity`), which
    the partition's inter-pod index evaluates (they depend on running pods, not on the node).

    Part of the ask's shape, the key of the "failed" caches that are probed once per ask and
    cycle: the hash is computed once.
    """

    selector: tuple[tuple[str, str], ...] = ()
    terms: tuple[Term, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()
    affinity: tuple[PodTerm, ...] = ()
    anti_affinity: tuple[PodTerm, ...] = ()
    _hash: int = dataclasses.field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.selector, self.terms, self.tolerations,
                                                self.affinity, self.anti_affinity)))

    def __hash__(self) -> int:
        return self._hash

    def admits(self, name: str, labels: Mapping[str, str], taints: tuple[Taint, ...]) -> bool:
        """NodeAffinity (selector and terms) and TaintToleration, for the node `name`."""
        return self.matches(name, labels) and self.untolerated(taints) is None

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        """NodeAffinity: the selector and (if any) one of the terms."""
        for key, value in self.selector:
            if labels.get(key) != value:
                return False
        terms = self.terms
        if terms is not None:
            for term in terms:
                if term.matches(name, labels):
                    break
            else:
                return False
        return True

    def untolerated(self, taints: tuple[Taint, ...]) -> Taint | None:
        """TaintToleration: the first taint no toleration tolerates, or None."""
        for taint in taints:
            if not any(tol.tolerates(taint) for tol in self.tolerations):
                return taint
        return None


def admits(placement: Placement | None, name: str, labels: Mapping[str, str],
           taints: tuple[Taint, ...]) -> bool:
    """Whether a node admits an ask; an ask without placement goes on untainted nodes only."""
    if placement is None:
        return not taints
    return placement.admits(name, labels, taints)


def rejection(placement: Placement | None, name: str, labels: Mapping[str, str],
              taints: tuple[Taint, ...]) -> str | None:
    """Why a node does not admit an ask, worded as kube-scheduler's FailedScheduling message
    words it (after "N node(s) "), or None if it admits it."""
    if placement is not None and not placement.matches(name, labels):
        return "didn't match Pod's node affinity/selector"
    taint = taints[0] if placement is None and taints else \
        placement.untolerated(taints) if placement is not None else None
    if taint is not None:
        return f"had untolerated taint {{{taint.key}: {taint.value}}}"
    return None


# --- parsing -----------------------------------------------------------------------------------

def parse_placement(text: Any) -> Placement:
    """The `ykshm.io/placement` tag of an ask; ValueError names what is malformed."""
    raw = load(text, dict, "object")
    doc = placement_doc(raw.get("nodeSelector"), raw.get("nodeSelectorTerms"),
                        raw.get("tolerations"), pod_affinity=raw.get("podAffinity"),
                        pod_anti_affinity=raw.get("podAntiAffinity"))
    terms = doc.get("nodeSelectorTerms")
    return Placement(
        tuple(sorted(doc.get("nodeSelector", {}).items())),
        None if terms is None else tuple(
            Term(tuple(map(requirement_of, t["matchExpressions"])),
                 tuple(map(requirement_of, t["matchFields"]))) for t in terms),
        tuple(Toleration(**t) for t in doc.get("tolerations", ())),
        terms_of(doc.get("podAffinity", [])), terms_of(doc.get("podAntiAffinity", [])))


def placement_of_tag(text: Any) -> Placement:
    """`parse_placement`, remembered per tag text: the pods of one workload share their tag,
    and a Placement is immutable (a malformed tag raises each time, it is not remembered)."""
    if not isinstance(text, str):
        return parse_placement(text)  # ValueError naming the type
    return _placement_of_text(text)


_placement_of_text = functools.lru_cache(maxsize=1024)(parse_placement)


def parse_taints(text: Any) -> tuple[Taint, ...]:
    """The `ykshm.io/taints` attribute of a node (None = untainted). PreferNoSchedule taints
    are dropped: the filter ignores them."""
    if text is None:
        return ()
    taints = []
    for i, raw in enumerate(load(text, list, "list")):
        taint = obj(raw, f"[{i}]")
        key = nonempty(string(taint.get("key"), f"[{i}].key"), f"[{i}].key")
        effect = one_of(nonempty(string(taint.get("effect"), f"[{i}].effect"), f"[{i}].effect"),
                        TAINT_EFFECTS, f"[{i}].effect")
        if effect != "PreferNoSchedule":
            taints.append(Taint(key, string(taint.get("value"), f"[{i}].value"), effect))
    return tuple(taints)
