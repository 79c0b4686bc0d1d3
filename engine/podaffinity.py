"""Inter-pod affinity terms: kube-scheduler's InterPodAffinity filter, as values.

A pod's required `podAffinity` / `podAntiAffinity` terms travel in its placement tag
(`engine.predicates`, docs/CONTRACTS.md "Inter-pod affinity"); its labels and namespace in the
tags the shim puts on every ask and existing allocation, by YuniKorn's shim's convention
(`si.tags`): `kubernetes.io/label/<key>` = value per pod label and
`kubernetes.io/meta/namespace`. An allocation keeps its ask's tags, so the labels of running pods are known to the engine.

A term as written (`PodTerm`) becomes, for one pod, an `AffinityTerm` whose namespaces are
explicit (none listed and no namespaceSelector = the pod's own namespace). A term matches a pod
when the pod's namespace is listed or selected, and its labels match the labelSelector (no
labelSelector matches no pod; an empty one matches every pod).

Namespace labels: the engine knows none except `kubernetes.io/metadata.name`, which every
namespace carries (its name); the validator (`si.placement.terms_doc`) refuses a
namespaceSelector on any other label. Selectors are evaluated by `engine.labelselector`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from engine.labelselector import Selector, selector_of
from si.tags import NAMESPACE_NAME_LABEL

NO_AFFINITY = "didn't match pod affinity rules"
NO_ANTI_AFFINITY = "didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "didn't satisfy existing pods anti-affinity rules"
"""kube-scheduler's InterPodAffinity reasons (after "N node(s) ")."""


# --- values ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class PodTerm:
    """A PodAffinityTerm as written. `selector` None matches no pod; `namespaces` empty and
    `namespace_selector` None mean the pod's own namespace.

    `resolve` remembers its answer per namespace (`_resolved`, not part of the value): a
    placement is parsed once per distinct tag, so the pods of a workload share their terms and
    every booking of one of them gets the same `AffinityTerm` back, not a new one to hash."""

    topology_key: str
    selector: Selector | None = None
    namespaces: tuple[str, ...] = ()
    namespace_selector: Selector | None = None
    _resolved: dict[str, AffinityTerm] = dataclasses.field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def resolve(self, namespace: str) -> AffinityTerm:
        """The term of a pod in `namespace` (kube-scheduler's newAffinityTerm)."""
        term = self._resolved.get(namespace)
        if term is None:
            names = self.namespaces
            if not names and self.namespace_selector is None:
                names = (namespace,)
            term = self._resolved[namespace] = AffinityTerm(
                self.topology_key, self.selector, frozenset(names), self.namespace_selector)
        return term


@dataclasses.dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A term of one pod: which pods it matches, and the topology it is counted in. Its hash
    is computed once (it keys the inter-pod index's dicts on every booking)."""

    topology_key: str
    selector: Selector | None
    namespaces: frozenset[str]
    namespace_selector: Selector | None
    _hash: int = dataclasses.field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.topology_key, self.selector,
                                                 self.namespaces, self.namespace_selector)))

    def __hash__(self) -> int:
        return self._hash

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """kube-scheduler's AffinityTerm.Matches (namespace labels: only the name label)."""
        selector = self.selector
        if selector is None:
            return False
        if namespace not in self.namespaces:
            ns_selector = self.namespace_selector
            if ns_selector is None or \
                    not ns_selector.matches({NAMESPACE_NAME_LABEL: namespace}):
                return False
        return selector.matches(labels)

    @property
    def hint(self) -> tuple[str, str] | None:
        return self.selector.hint if self.selector is not None else None


# --- from the checked document ------------------------------------------------------------------

def terms_of(docs: list[dict[str, Any]]) -> tuple[PodTerm, ...]:
    """Values of checked term documents (from `si.placement.terms_doc`)."""
    return tuple(PodTerm(d["topologyKey"], selector_of(d.get("labelSelector")),
                         tuple(d.get("namespaces", ())),
                         selector_of(d.get("namespaceSelector"))) for d in docs)
