"""Inter-pod affinity terms: kube-scheduler's InterPodAffinity filter, as values.

A pod's required `podAffinity` / `podAntiAffinity` terms travel in its placement tag
(`engine.predicates`, docs/CONTRACTS.md "Inter-pod affinity"); its labels and namespace in the
tags the shim puts on every ask and existing allocation, by YuniKorn's shim's convention:
`kubernetes.io/label/<key>` = value per pod label and `kubernetes.io/meta/namespace`. An
allocation keeps its ask's tags, so the labels of running pods are known to the engine.

A term as written (`PodTerm`) becomes, for one pod, an `AffinityTerm` whose namespaces are
explicit (none listed and no namespaceSelector = the pod's own namespace). A term matches a pod
when the pod's namespace is listed or selected, and its labels match the labelSelector (no
labelSelector matches no pod; an empty one matches every pod).

Namespace labels: the engine knows none except `kubernetes.io/metadata.name`, which every
namespace carries (its name). A namespaceSelector on any other label is refused (ValueError
naming the field): evaluating it against unknown labels would silently match nothing, and an
anti-affinity term that matches nothing is one that is not enforced.

Parsing is strict where the apiserver would refuse the pod (label keys and values, operators,
values that do not suit them, an empty topologyKey, bad namespace names). `matchLabelKeys` /
`mismatchLabelKeys` are not read (the apiserver merges them into labelSelector at creation).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from engine.kubeschema import array, label_key, label_value, namespace_name, obj, one_of, string

SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
LABEL_TAG_PREFIX = "kubernetes.io/label/"
NAMESPACE_TAG = "kubernetes.io/meta/namespace"
DEFAULT_NAMESPACE = "default"

NO_AFFINITY = "didn't match pod affinity rules"
NO_ANTI_AFFINITY = "didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "didn't satisfy existing pods anti-affinity rules"
"""kube-scheduler's InterPodAffinity reasons (after "N node(s) ")."""


# --- values ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class Expression:
    """A label selector requirement: In, NotIn, Exists or DoesNotExist."""

    key: str
    operator: str
    values: frozenset[str] = frozenset()

    def test(self, value: str | None) -> bool:
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        return value is None


@dataclasses.dataclass(frozen=True, slots=True)
class Selector:
    """A metav1.LabelSelector: every matchLabels pair and every expression hold; empty = all."""

    labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[Expression, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.labels:
            if labels.get(key) != value:
                return False
        for expr in self.expressions:
            if not expr.test(labels.get(expr.key)):
                return False
        return True

    @property
    def hint(self) -> tuple[str, str] | None:
        """A label pair every matching pod carries, if the selector names one: indexes look
        up only the terms a pod's labels can match."""
        if self.labels:
            return self.labels[0]
        for expr in self.expressions:
            if expr.operator == "In" and len(expr.values) == 1:
                return (expr.key, next(iter(expr.values)))
        return None


@dataclasses.dataclass(frozen=True, slots=True)
class PodTerm:
    """A PodAffinityTerm as written. `selector` None matches no pod; `namespaces` empty and
    `namespace_selector` None mean the pod's own namespace."""

    topology_key: str
    selector: Selector | None = None
    namespaces: tuple[str, ...] = ()
    namespace_selector: Selector | None = None

    def resolve(self, namespace: str) -> AffinityTerm:
        """The term of a pod in `namespace` (kube-scheduler's newAffinityTerm)."""
        names = self.namespaces
        if not names and self.namespace_selector is None:
            names = (namespace,)
        return AffinityTerm(self.topology_key, self.selector, frozenset(names),
                            self.namespace_selector)


@dataclasses.dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A term of one pod: which pods it matches, and the topology it is counted in."""

    topology_key: str
    selector: Selector | None
    namespaces: frozenset[str]
    namespace_selector: Selector | None

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


def pod_meta(tags: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """The namespace and labels of an ask's or allocation's pod, from its tags."""
    prefix = LABEL_TAG_PREFIX
    cut = len(prefix)
    labels = {key[cut:]: value for key, value in tags.items() if key.startswith(prefix)}
    return tags.get(NAMESPACE_TAG) or DEFAULT_NAMESPACE, labels


def label_tags(labels: Mapping[str, str]) -> dict[str, str]:
    """The tags that carry a pod's labels (the inverse of `pod_meta`'s labels)."""
    return {LABEL_TAG_PREFIX + key: value for key, value in labels.items()}


# --- parsing -----------------------------------------------------------------------------------

def terms_doc(raw: Any, where: str) -> list[dict[str, Any]]:
    """The canonical documents of a list of PodAffinityTerm, checked by the API's rules."""
    return [_term_doc(t, f"{where}[{i}]") for i, t in enumerate(array(raw, where))]


def terms_of(docs: list[dict[str, Any]]) -> tuple[PodTerm, ...]:
    """Values of checked term documents (from `terms_doc`)."""
    return tuple(PodTerm(d["topologyKey"], _selector_of(d.get("labelSelector")),
                         tuple(d.get("namespaces", ())),
                         _selector_of(d.get("namespaceSelector"))) for d in docs)


def _term_doc(raw: Any, where: str) -> dict[str, Any]:
    term = obj(raw, where)
    doc: dict[str, Any] = {"topologyKey": label_key(term.get("topologyKey"),
                                                    f"{where}.topologyKey")}
    if term.get("labelSelector") is not None:
        doc["labelSelector"] = _selector_doc(term["labelSelector"], f"{where}.labelSelector")
    namespaces = [namespace_name(n, f"{where}.namespaces[{i}]")
                  for i, n in enumerate(array(term.get("namespaces"), f"{where}.namespaces"))]
    if namespaces:
        doc["namespaces"] = namespaces
    if term.get("namespaceSelector") is not None:
        where_ns = f"{where}.namespaceSelector"
        selector = _selector_doc(term["namespaceSelector"], where_ns)
        keys = set(selector["matchLabels"]) | {e["key"] for e in selector["matchExpressions"]}
        if keys - {NAMESPACE_NAME_LABEL}:
            raise ValueError(f"{where_ns}: only the label {NAMESPACE_NAME_LABEL} can be selected "
                             f"(the scheduler knows no other namespace label), got "
                             f"{sorted(keys - {NAMESPACE_NAME_LABEL})}")
        doc["namespaceSelector"] = selector
    return doc


def _selector_doc(raw: Any, where: str) -> dict[str, Any]:
    selector = obj(raw, where)
    match_labels = {}
    for key, value in obj(selector.get("matchLabels"), f"{where}.matchLabels").items():
        match_labels[label_key(key, f"{where}.matchLabels")] = \
            label_value(value, f"{where}.matchLabels.{key}")
    expressions = [_expression_doc(e, f"{where}.matchExpressions[{i}]") for i, e in
                   enumerate(array(selector.get("matchExpressions"), f"{where}.matchExpressions"))]
    return {"matchLabels": match_labels, "matchExpressions": expressions}


def _expression_doc(raw: Any, where: str) -> dict[str, Any]:
    expr = obj(raw, where)
    key = label_key(expr.get("key"), f"{where}.key")
    op = one_of(string(expr.get("operator"), f"{where}.operator"), SELECTOR_OPERATORS,
                f"{where}.operator")
    values = [label_value(v, f"{where}.values[{i}]")
              for i, v in enumerate(array(expr.get("values"), f"{where}.values"))]
    if op in ("In", "NotIn") and not values:
        raise ValueError(f"{where}.values: must be non-empty when operator is {op}")
    if op in ("Exists", "DoesNotExist") and values:
        raise ValueError(f"{where}.values: must be empty when operator is {op}")
    return {"key": key, "operator": op, "values": values}


def _selector_of(doc: Mapping[str, Any] | None) -> Selector | None:
    if doc is None:
        return None
    return Selector(tuple(sorted(doc["matchLabels"].items())),
                    tuple(Expression(e["key"], e["operator"], frozenset(e["values"]))
                          for e in doc["matchExpressions"]))
