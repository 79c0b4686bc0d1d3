"""Node placement: kube-scheduler's NodeAffinity and TaintToleration filters, on SI data.

An ask may carry `allocationTags["ykshm.io/placement"]` (its pod's nodeSelector, required node
affinity, tolerations, and required inter-pod (anti-)affinity terms: `engine.podaffinity`) and
a node the attribute `ykshm.io/taints` (its NoSchedule/NoExecute taints); the encoding is in
docs/CONTRACTS.md ("Node placement", "Inter-pod affinity"). Both are parsed once, when the
ask or node arrives, into frozen values: choosing a node runs in the scheduling cycle's inner
loop and must not touch JSON. Parsing is strict where the Kubernetes API would have refused the
pod (a bad operator, values that do not suit it): `ValueError` names the offending field, and the
partition rejects the ask. Keys we do not know are ignored, as the contract says for preferred
affinity and the like. The shim builds the tag from a pod with the same validator
(`placement_doc`, given the pod's field paths), so each rule is written once.

A node admits an ask when every nodeSelector pair equals the node's label, one of the
nodeSelectorTerms matches (if the ask has any), and every taint of the node is tolerated. An ask
without placement tolerates no taint: that is `admits(None, ...)`.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from typing import Any

from engine.kubeschema import array as _list
from engine.kubeschema import load as _load
from engine.kubeschema import nonempty as _nonempty
from engine.kubeschema import obj as _object
from engine.kubeschema import one_of as _one_of
from engine.kubeschema import string as _string
from engine.podaffinity import PodTerm, terms_doc, terms_of

PLACEMENT_TAG = "ykshm.io/placement"
TAINTS_ATTRIBUTE = "ykshm.io/taints"

LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
FIELD_OPERATORS = ("In", "NotIn")
TOLERATION_OPERATORS = ("Equal", "Exists")
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
#
# One validator for both sides of SI: the engine checks an ask's tag with it, and the shim builds
# the tag from a pod spec with it (`placement_doc` with the pod's field paths), so a rule of the
# Kubernetes API is written once and an error names the field where the user wrote it.

@dataclasses.dataclass(frozen=True, slots=True)
class PlacementPaths:
    """Where each part of a placement was written, for error messages."""

    node_selector: str = "nodeSelector"
    terms: str = "nodeSelectorTerms"
    tolerations: str = "tolerations"
    pod_affinity: str = "podAffinity"
    pod_anti_affinity: str = "podAntiAffinity"


TAG_PATHS = PlacementPaths()


def placement_doc(node_selector: Any, terms: Any, tolerations: Any,
                  paths: PlacementPaths = TAG_PATHS, *, pod_affinity: Any = None,
                  pod_anti_affinity: Any = None) -> dict[str, Any]:
    """The canonical `ykshm.io/placement` document of a pod's nodeSelector, required
    nodeSelectorTerms (None: no required node affinity), tolerations and required inter-pod
    affinity and anti-affinity terms, checked by the Kubernetes API's rules (null counts as
    absent); {} when they constrain nothing. Only the fields the contract names are kept; every
    term has both lists, every toleration all four keys (operator defaults to Equal), every
    label selector both matchLabels and matchExpressions. ValueError "<path>: <why>".
    """
    doc: dict[str, Any] = {}
    selector = _node_selector(node_selector, paths.node_selector)
    if selector:
        doc["nodeSelector"] = selector
    if terms is not None:
        term_list = _list(terms, paths.terms)
        if not term_list:
            raise ValueError(f"{paths.terms}: must have at least one term")
        doc["nodeSelectorTerms"] = [_term(t, f"{paths.terms}[{i}]")
                                    for i, t in enumerate(term_list)]
    tolerations = [_toleration(t, f"{paths.tolerations}[{i}]")
                   for i, t in enumerate(_list(tolerations, paths.tolerations))]
    if tolerations:
        doc["tolerations"] = tolerations
    for key, raw, where in (("podAffinity", pod_affinity, paths.pod_affinity),
                            ("podAntiAffinity", pod_anti_affinity, paths.pod_anti_affinity)):
        pod_terms = terms_doc(raw, where)
        if pod_terms:
            doc[key] = pod_terms
    return doc


def parse_placement(text: Any) -> Placement:
    """The `ykshm.io/placement` tag of an ask; ValueError names what is malformed."""
    raw = _load(text, dict, "object")
    doc = placement_doc(raw.get("nodeSelector"), raw.get("nodeSelectorTerms"),
                        raw.get("tolerations"), pod_affinity=raw.get("podAffinity"),
                        pod_anti_affinity=raw.get("podAntiAffinity"))
    terms = doc.get("nodeSelectorTerms")
    return Placement(
        tuple(sorted(doc.get("nodeSelector", {}).items())),
        None if terms is None else tuple(
            Term(tuple(map(_requirement_of, t["matchExpressions"])),
                 tuple(map(_requirement_of, t["matchFields"]))) for t in terms),
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
    for i, raw in enumerate(_load(text, list, "list")):
        taint = _object(raw, f"[{i}]")
        key = _nonempty(_string(taint.get("key"), f"[{i}].key"), f"[{i}].key")
        effect = _one_of(_nonempty(_string(taint.get("effect"), f"[{i}].effect"), f"[{i}].effect"),
                         TAINT_EFFECTS, f"[{i}].effect")
        if effect != "PreferNoSchedule":
            taints.append(Taint(key, _string(taint.get("value"), f"[{i}].value"), effect))
    return tuple(taints)


def _requirement_of(req: Mapping[str, Any]) -> Requirement:
    """A checked requirement as a value; Gt/Lt keep their bound as an int."""
    op, values = req["operator"], req["values"]
    if op in ("Gt", "Lt"):
        return Requirement(req["key"], op, bound=int(values[0]))
    return Requirement(req["key"], op, frozenset(values))


def _node_selector(raw: Any, where: str) -> dict[str, str]:
    result = {}
    for key, value in _object(raw, where).items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"{where}: key {key!r} must be a non-empty string")
        result[key] = _string(value, f"{where}.{key}")
    return result


def _values(raw: Any, where: str) -> list[str]:
    return [_string(v, f"{where}[{i}]") for i, v in enumerate(_list(raw, where))]


def _check_values(op: str, values: list[str], where: str) -> None:
    """Kubernetes' rules for a node selector requirement's values, by operator."""
    if op in ("In", "NotIn") and not values:
        raise ValueError(f"{where}: must be non-empty when operator is {op}")
    if op in ("Exists", "DoesNotExist") and values:
        raise ValueError(f"{where}: must be empty when operator is {op}")
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            raise ValueError(f"{where}: must have exactly one value when operator is {op}")
        if _int64(values[0]) is None:
            raise ValueError(f"{where}[0]: {values[0]!r} is not an integer")


def _requirement(raw: Any, where: str) -> dict[str, Any]:
    req = _object(raw, where)
    key = _nonempty(_string(req.get("key"), f"{where}.key"), f"{where}.key")
    op = _one_of(_string(req.get("operator"), f"{where}.operator"), LABEL_OPERATORS,
                 f"{where}.operator")
    values = _values(req.get("values"), f"{where}.values")
    _check_values(op, values, f"{where}.values")
    return {"key": key, "operator": op, "values": values}


def _field_requirement(raw: Any, where: str) -> dict[str, Any]:
    """matchFields: only metadata.name, In/NotIn with one value (the apiserver's rule)."""
    req = _object(raw, where)
    key = _one_of(_string(req.get("key"), f"{where}.key"), (NODE_NAME_FIELD,), f"{where}.key")
    op = _one_of(_string(req.get("operator"), f"{where}.operator"), FIELD_OPERATORS,
                 f"{where}.operator")
    values = _values(req.get("values"), f"{where}.values")
    if len(values) != 1:
        raise ValueError(f"{where}.values: must have exactly one value for a field selector")
    return {"key": key, "operator": op, "values": values}


def _term(raw: Any, where: str) -> dict[str, Any]:
    term = _object(raw, where)
    exprs = _list(term.get("matchExpressions"), f"{where}.matchExpressions")
    fields = _list(term.get("matchFields"), f"{where}.matchFields")
    return {
        "matchExpressions": [_requirement(r, f"{where}.matchExpressions[{i}]")
                             for i, r in enumerate(exprs)],
        "matchFields": [_field_requirement(r, f"{where}.matchFields[{i}]")
                        for i, r in enumerate(fields)],
    }


def _toleration(raw: Any, where: str) -> dict[str, str]:
    tol = _object(raw, where)
    key = _string(tol.get("key"), f"{where}.key")
    op = _one_of(_string(tol.get("operator"), f"{where}.operator") or "Equal",
                 TOLERATION_OPERATORS, f"{where}.operator")
    value = _string(tol.get("value"), f"{where}.value")
    effect = _string(tol.get("effect"), f"{where}.effect")
    if effect:
        _one_of(effect, TAINT_EFFECTS, f"{where}.effect")
    if op == "Exists" and value:
        raise ValueError(f"{where}.value: must be empty when operator is Exists")
    if not key and op != "Exists":
        raise ValueError(f"{where}.operator: must be Exists when key is empty")
    if tol.get("tolerationSeconds") is not None and effect != "NoExecute":
        raise ValueError(f"{where}.effect: must be NoExecute when tolerationSeconds is set")
    return {"key": key, "operator": op, "value": value, "effect": effect}
