"""Node placement: kube-scheduler's NodeAffinity and TaintToleration filters, on SI data.

An ask may carry `allocationTags["ykshm.io/placement"]` (its pod's nodeSelector, required node
affinity and tolerations) and a node the attribute `ykshm.io/taints` (its NoSchedule/NoExecute
taints); the encoding is in docs/CONTRACTS.md ("Node placement"). Both are parsed once, when the
ask or node arrives, into frozen values: choosing a node runs in the scheduling cycle's inner
loop and must not touch JSON. Parsing is strict where the Kubernetes API would have refused the
pod (a bad operator, values that do not suit it): `ValueError` names the offending field, and the
partition rejects the ask. Keys we do not know are ignored, as the contract says for preferred
affinity and the like.

A node admits an ask when every nodeSelector pair equals the node's label, one of the
nodeSelectorTerms matches (if the ask has any), and every taint of the node is tolerated. An ask
without placement tolerates no taint: that is `admits(None, ...)`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import orjson

PLACEMENT_TAG = "ykshm.io/placement"
TAINTS_ATTRIBUTE = "ykshm.io/taints"

LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
FIELD_OPERATORS = ("In", "NotIn")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
NODE_NAME_FIELD = "metadata.name"

_INT64 = re.compile(r"[+-]?[0-9]+")  # Go's strconv.ParseInt(s, 10, 64): no spaces, no "_"
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _int64(text: str) -> int | None:
    """The label value as kube-scheduler reads it for Gt/Lt, or None if it is no int64."""
    if not _INT64.fullmatch(text):
        return None
    value = int(text)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


# --- values ------------------------------------------------------------------------------------

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
        number = _int64(value) if value is not None else None
        if number is None:
            return False
        return number > self.bound if op == "Gt" else number < self.bound


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

    Part of the ask's shape, the key of the "failed" caches that are probed once per ask and
    cycle: the hash is computed once.
    """

    selector: tuple[tuple[str, str], ...] = ()
    terms: tuple[Term, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()
    _hash: int = dataclasses.field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.selector, self.terms, self.tolerations)))

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

def _load(text: Any, kind: type, what: str) -> Any:
    if not isinstance(text, str):
        raise ValueError(f"not a string but {type(text).__name__}")
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(doc, kind):
        raise ValueError(f"not a JSON {what}")
    return doc


def _string(obj: Mapping[str, Any], key: str, path: str, *, required: bool = False) -> str:
    value = obj.get(key)
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise ValueError(f"{path}.{key} is not a string")
    if required and not value:
        raise ValueError(f"{path}.{key} is missing or empty")
    return value


def _list(value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{path} is not a list")
    return value


def _object(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{path} is not an object")
    return value


def _values(req: Mapping[str, Any], path: str) -> list[str]:
    values = _list(req.get("values"), f"{path}.values")
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise ValueError(f"{path}.values[{i}] is not a string")
    return values


def _label_requirement(raw: Any, path: str) -> Requirement:
    req = _object(raw, path)
    key = _string(req, "key", path, required=True)
    op = _string(req, "operator", path)
    if op not in LABEL_OPERATORS:
        raise ValueError(f"{path}.operator {op!r} is not In, NotIn, Exists, DoesNotExist, "
                         f"Gt or Lt")
    values = _values(req, path)
    if op in ("In", "NotIn") and not values:
        raise ValueError(f"{path}.values must not be empty for {op}")
    if op in ("Exists", "DoesNotExist") and values:
        raise ValueError(f"{path}.values must be empty for {op}")
    if op in ("Gt", "Lt"):
        bound = _int64(values[0]) if len(values) == 1 else None
        if bound is None:
            raise ValueError(f"{path}.values must be a single integer for {op}, not {values}")
        return Requirement(key, op, bound=bound)
    return Requirement(key, op, frozenset(values))


def _field_requirement(raw: Any, path: str) -> Requirement:
    req = _object(raw, path)
    key = _string(req, "key", path)
    if key != NODE_NAME_FIELD:
        raise ValueError(f"{path}.key {key!r} is not {NODE_NAME_FIELD}")
    op = _string(req, "operator", path)
    if op not in FIELD_OPERATORS:
        raise ValueError(f"{path}.operator {op!r} is not In or NotIn")
    values = _values(req, path)
    if len(values) != 1:
        raise ValueError(f"{path}.values must hold exactly one node name, not {values}")
    return Requirement(key, op, frozenset(values))


def _term(raw: Any, path: str) -> Term:
    term = _object(raw, path)
    exprs = _list(term.get("matchExpressions"), f"{path}.matchExpressions")
    fields = _list(term.get("matchFields"), f"{path}.matchFields")
    return Term(tuple(_label_requirement(r, f"{path}.matchExpressions[{i}]")
                      for i, r in enumerate(exprs)),
                tuple(_field_requirement(r, f"{path}.matchFields[{i}]")
                      for i, r in enumerate(fields)))


def _effect(obj: Mapping[str, Any], path: str, *, required: bool) -> str:
    effect = _string(obj, "effect", path, required=required)
    if effect and effect not in TAINT_EFFECTS:
        raise ValueError(f"{path}.effect {effect!r} is not NoSchedule, PreferNoSchedule or "
                         f"NoExecute")
    return effect


def _toleration(raw: Any, path: str) -> Toleration:
    tol = _object(raw, path)
    key = _string(tol, "key", path)
    op = _string(tol, "operator", path) or "Equal"
    if op not in ("Equal", "Exists"):
        raise ValueError(f"{path}.operator {op!r} is not Equal or Exists")
    value = _string(tol, "value", path)
    if op == "Exists" and value:
        raise ValueError(f"{path}.value must be empty for Exists")
    if op == "Equal" and not key:
        raise ValueError(f"{path}.key must be set for Equal (an empty key needs Exists)")
    return Toleration(key, op, value, _effect(tol, path, required=False))


def _selector(raw: Any) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    selector = _object(raw, "nodeSelector")
    for key, value in selector.items():
        if not isinstance(value, str):
            raise ValueError(f"nodeSelector[{key!r}] is not a string")
    return tuple(sorted(selector.items()))


def parse_placement(text: Any) -> Placement:
    """The `ykshm.io/placement` tag of an ask; ValueError names what is malformed."""
    doc = _load(text, dict, "object")
    raw_terms = doc.get("nodeSelectorTerms")
    terms = None if raw_terms is None else tuple(
        _term(t, f"nodeSelectorTerms[{i}]")
        for i, t in enumerate(_list(raw_terms, "nodeSelectorTerms")))
    tolerations = tuple(_toleration(t, f"tolerations[{i}]")
                        for i, t in enumerate(_list(doc.get("tolerations"), "tolerations")))
    return Placement(_selector(doc.get("nodeSelector")), terms, tolerations)


def parse_taints(text: Any) -> tuple[Taint, ...]:
    """The `ykshm.io/taints` attribute of a node (None = untainted). PreferNoSchedule taints
    are dropped: the filter ignores them."""
    if text is None:
        return ()
    taints = []
    for i, raw in enumerate(_load(text, list, "list")):
        path = f"[{i}]"
        taint = _object(raw, path)
        effect = _effect(taint, path, required=True)
        if effect != "PreferNoSchedule":
            taints.append(Taint(_string(taint, "key", path, required=True),
                                _string(taint, "value", path), effect))
    return tuple(taints)
