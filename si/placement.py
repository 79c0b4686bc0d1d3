"""The placement tag's document: a pod's node and inter-pod constraints, checked by the
Kubernetes API's rules, one validator for both sides of the SI.

The shim builds an ask's `ykshm.io/placement` tag from a pod with `placement_doc`, given the pod's
field paths (`PlacementPaths`), so an error names the field where the user wrote it; the engine
checks a received tag with the same function (default paths: the tag's own keys) before it turns
the document into values (`engine.predicates`, `engine.podaffinity`). Strict where the apiserver
would have refused the pod (a bad operator, values that do not suit it, label keys and values,
an empty topologyKey, bad namespace names): `ValueError("<path>: <why>")`. Keys the contract
does not name are dropped (preferred affinity and the like). The encoding is in docs/CONTRACTS.md
("Node placement", "Inter-pod affinity").

Namespace labels: the engine knows none except `kubernetes.io/metadata.name`, which every
namespace carries (its name). A namespaceSelector on any other label is refused: evaluating it
against unknown labels would silently match nothing, and an anti-affinity term that matches
nothing is one that is not enforced. `matchLabelKeys` / `mismatchLabelKeys` are not read (the
apiserver merges them into labelSelector at creation).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from si.kubeschema import (array, int64, label_key, label_value, namespace_name, nonempty, obj,
                           one_of, string)
from si.tags import NAMESPACE_NAME_LABEL

LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
"""A nodeSelectorTerm's matchExpressions operators."""
FIELD_OPERATORS = ("In", "NotIn")
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
"""A metav1.LabelSelector's operators (inter-pod terms)."""
TOLERATION_OPERATORS = ("Equal", "Exists")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
NODE_NAME_FIELD = "metadata.name"


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
        term_list = array(terms, paths.terms)
        if not term_list:
            raise ValueError(f"{paths.terms}: must have at least one term")
        doc["nodeSelectorTerms"] = [_term(t, f"{paths.terms}[{i}]")
                                    for i, t in enumerate(term_list)]
    tolerations = [_toleration(t, f"{paths.tolerations}[{i}]")
                   for i, t in enumerate(array(tolerations, paths.tolerations))]
    if tolerations:
        doc["tolerations"] = tolerations
    for key, raw, where in (("podAffinity", pod_affinity, paths.pod_affinity),
                            ("podAntiAffinity", pod_anti_affinity, paths.pod_anti_affinity)):
        pod_terms = terms_doc(raw, where)
        if pod_terms:
            doc[key] = pod_terms
    return doc


# --- node affinity and tolerations -------------------------------------------------------------

def _node_selector(raw: Any, where: str) -> dict[str, str]:
    result = {}
    for key, value in obj(raw, where).items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"{where}: key {key!r} must be a non-empty string")
        result[key] = string(value, f"{where}.{key}")
    return result


def _values(raw: Any, where: str) -> list[str]:
    return [string(v, f"{where}[{i}]") for i, v in enumerate(array(raw, where))]


def _check_values(op: str, values: list[str], where: str) -> None:
    """Kubernetes' rules for a node selector requirement's values, by operator."""
    if op in ("In", "NotIn") and not values:
        raise ValueError(f"{where}: must be non-empty when operator is {op}")
    if op in ("Exists", "DoesNotExist") and values:
        raise ValueError(f"{where}: must be empty when operator is {op}")
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            raise ValueError(f"{where}: must have exactly one value when operator is {op}")
        if int64(values[0]) is None:
            raise ValueError(f"{where}[0]: {values[0]!r} is not an integer")


def _requirement(raw: Any, where: str) -> dict[str, Any]:
    req = obj(raw, where)
    key = nonempty(string(req.get("key"), f"{where}.key"), f"{where}.key")
    op = one_of(string(req.get("operator"), f"{where}.operator"), LABEL_OPERATORS,
                 f"{where}.operator")
    values = _values(req.get("values"), f"{where}.values")
    _check_values(op, values, f"{where}.values")
    return {"key": key, "operator": op, "values": values}


def _field_requirement(raw: Any, where: str) -> dict[str, Any]:
    """matchFields: only metadata.name, In/NotIn with one value (the apiserver's rule)."""
    req = obj(raw, where)
    key = one_of(string(req.get("key"), f"{where}.key"), (NODE_NAME_FIELD,), f"{where}.key")
    op = one_of(string(req.get("operator"), f"{where}.operator"), FIELD_OPERATORS,
                 f"{where}.operator")
    values = _values(req.get("values"), f"{where}.values")
    if len(values) != 1:
        raise ValueError(f"{where}.values: must have exactly one value for a field selector")
    return {"key": key, "operator": op, "values": values}


def _term(raw: Any, where: str) -> dict[str, Any]:
    term = obj(raw, where)
    exprs = array(term.get("matchExpressions"), f"{where}.matchExpressions")
    fields = array(term.get("matchFields"), f"{where}.matchFields")
    return {
        "matchExpressions": [_requirement(r, f"{where}.matchExpressions[{i}]")
                             for i, r in enumerate(exprs)],
        "matchFields": [_field_requirement(r, f"{where}.matchFields[{i}]")
                        for i, r in enumerate(fields)],
    }


def _toleration(raw: Any, where: str) -> dict[str, str]:
    tol = obj(raw, where)
    key = string(tol.get("key"), f"{where}.key")
    op = one_of(string(tol.get("operator"), f"{where}.operator") or "Equal",
                 TOLERATION_OPERATORS, f"{where}.operator")
    value = string(tol.get("value"), f"{where}.value")
    effect = string(tol.get("effect"), f"{where}.effect")
    if effect:
        one_of(effect, TAINT_EFFECTS, f"{where}.effect")
    if op == "Exists" and value:
        raise ValueError(f"{where}.value: must be empty when operator is Exists")
    if not key and op != "Exists":
        raise ValueError(f"{where}.operator: must be Exists when key is empty")
    if tol.get("tolerationSeconds") is not None and effect != "NoExecute":
        raise ValueError(f"{where}.effect: must be NoExecute when tolerationSeconds is set")
    return {"key": key, "operator": op, "value": value, "effect": effect}


# --- inter-pod terms ---------------------------------------------------------------------------

def terms_doc(raw: Any, where: str) -> list[dict[str, Any]]:
    """The canonical documents of a list of PodAffinityTerm, checked by the API's rules."""
    return [_term_doc(t, f"{where}[{i}]") for i, t in enumerate(array(raw, where))]


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
