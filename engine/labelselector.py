"""Label selectors as values: the one evaluator of matchLabels and matchExpressions.

kube-scheduler evaluates two kinds: a nodeSelectorTerm's requirements (In, NotIn, Exists,
DoesNotExist, and Gt/Lt comparing a label as an int64) against a node's labels
(`engine.predicates`), and a metav1.LabelSelector (matchLabels pairs and In/NotIn/Exists/
DoesNotExist expressions) against a pod's labels (`engine.podaffinity`). Both are built from a
document `si.placement` has checked, so nothing here validates; the values are frozen and
hashable because they are part of an ask's shape.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from si.kubeschema import int64


@dataclasses.dataclass(frozen=True, slots=True)
class Requirement:
    """One matchExpressions / matchFields entry; `bound` is the integer of Gt and Lt."""

    key: str
    operator: str
    values: frozenset[str] = frozenset()
    bound: int = 0

    def test(self, value: str | None) -> bool:
        """Whether a label (or field) value satisfies this; None = the label is absent."""
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        number = int64(value) if value is not None else None
        if number is None:
            return False
        return number > self.bound if op == "Gt" else number < self.bound


@dataclasses.dataclass(frozen=True, slots=True)
class Selector:
    """A metav1.LabelSelector: every matchLabels pair and every expression hold; empty = all."""

    labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[Requirement, ...] = ()

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


def requirement_of(doc: Mapping[str, Any]) -> Requirement:
    """A checked requirement document as a value; Gt/Lt keep their bound as an int."""
    op, values = doc["operator"], doc["values"]
    if op in ("Gt", "Lt"):
        return Requirement(doc["key"], op, bound=int(values[0]))
    return Requirement(doc["key"], op, frozenset(values))


def selector_of(doc: Mapping[str, Any] | None) -> Selector | None:
    """A checked LabelSelector document as a value; None (no selector) stays None."""
    if doc is None:
        return None
    return Selector(tuple(sorted(doc["matchLabels"].items())),
                    tuple(map(requirement_of, doc["matchExpressions"])))
