"""engine.predicates: kube-scheduler's NodeAffinity and TaintToleration filters, and parsing."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.predicates import (Placement, Taint, Toleration, admits, parse_placement,
                               parse_taints)

NS = Taint("dedicated", "gpu", "NoSchedule")
NE = Taint("maintenance", "", "NoExecute")


def placement(**doc) -> Placement:
    return parse_placement(json.dumps(doc))


def expr(key, operator, *values) -> dict:
    out = {"key": key, "operator": operator}
    if values:
        out["values"] = list(values)
    return out


def terms(*term_list) -> Placement:
    return placement(nodeSelectorTerms=list(term_list))


def ok(p: Placement | None, labels=None, taints=(), name="node-1") -> bool:
    return admits(p, name, labels or {}, tuple(taints))


# --- NodeAffinity ------------------------------------------------------------------------------

@pytest.mark.parametrize("req, labels, expected", [
    (expr("zone", "In", "a", "b"), {"zone": "b"}, True),
    (expr("zone", "In", "a", "b"), {"zone": "c"}, False),
    (expr("zone", "In", "a"), {}, False),
    (expr("zone", "NotIn", "a"), {"zone": "b"}, True),
    (expr("zone", "NotIn", "a"), {}, True),  # absent counts as not in
    (expr("zone", "NotIn", "a", "b"), {"zone": "a"}, False),
    (expr("zone", "Exists"), {"zone": ""}, True),
    (expr("zone", "Exists"), {"other": "x"}, False),
    (expr("zone", "DoesNotExist"), {"other": "x"}, True),
    (expr("zone", "DoesNotExist"), {"zone": "a"}, False),
    (expr("cpus", "Gt", "4"), {"cpus": "5"}, True),
    (expr("cpus", "Gt", "4"), {"cpus": "4"}, False),
    (expr("cpus", "Gt", "-2"), {"cpus": "-1"}, True),
    (expr("cpus", "Gt", "4"), {"cpus": "+8"}, True),  # Go's ParseInt takes a sign
    (expr("cpus", "Gt", "4"), {}, False),
    (expr("cpus", "Gt", "4"), {"cpus": "many"}, False),
    (expr("cpus", "Gt", "4"), {"cpus": " 8"}, False),  # ParseInt takes no spaces
    (expr("cpus", "Gt", "4"), {"cpus": "1_000"}, False),  # nor underscores (Python would)
    (expr("cpus", "Gt", "4"), {"cpus": str(1 << 63)}, False),  # beyond int64
    (expr("cpus", "Lt", "4"), {"cpus": "3"}, True),
    (expr("cpus", "Lt", "4"), {"cpus": "4"}, False),
    (expr("cpus", "Lt", "4"), {"cpus": "3.5"}, False),
])
def test_every_operator(req, labels, expected):
    assert ok(terms({"matchExpressions": [req]}), labels) is expected


def test_terms_are_ored_and_requirements_anded():
    p = terms({"matchExpressions": [expr("zone", "In", "a"), expr("gpu", "Exists")]},
              {"matchExpressions": [expr("zone", "In", "b")]})
    assert ok(p, {"zone": "a", "gpu": "1"})
    assert not ok(p, {"zone": "a"})  # first term: one requirement fails
    assert ok(p, {"zone": "b"})  # second term alone
    assert not ok(p, {"zone": "c", "gpu": "1"})


def test_a_term_without_requirements_matches_nothing():
    assert not ok(terms({}), {"zone": "a"})
    assert not ok(terms({"matchExpressions": [], "matchFields": []}))
    # ...but does not stop another term from matching
    assert ok(terms({}, {"matchExpressions": [expr("zone", "Exists")]}), {"zone": "a"})


def test_no_terms_key_means_any_node_and_an_empty_list_is_refused():
    assert ok(placement(), {})
    with pytest.raises(ValueError) as info:        # the Kubernetes API refuses it too
        placement(nodeSelectorTerms=[])
    assert str(info.value) == "nodeSelectorTerms: must have at least one term"


def test_match_fields_on_the_node_name():
    into = terms({"matchFields": [expr("metadata.name", "In", "node-1")]})
    assert ok(into, name="node-1") and not ok(into, name="node-2")
    away = terms({"matchFields": [expr("metadata.name", "NotIn", "node-1")]})
    assert not ok(away, name="node-1") and ok(away, name="node-2")
    # fields and expressions of one term are ANDed; the field is not a label
    both = terms({"matchFields": [expr("metadata.name", "In", "node-1")],
                  "matchExpressions": [expr("zone", "In", "a")]})
    assert ok(both, {"zone": "a"}) and not ok(both, {"zone": "b"})
    assert not ok(into, {"metadata.name": "node-1"}, name="node-2")


def test_node_selector_needs_every_pair():
    p = placement(nodeSelector={"zone": "a", "disk": "ssd"})
    assert ok(p, {"zone": "a", "disk": "ssd", "extra": "x"})
    assert not ok(p, {"zone": "a"})
    assert not ok(p, {"zone": "a", "disk": "hdd"})


def test_selector_and_terms_must_both_match():
    p = placement(nodeSelector={"zone": "a"},
                  nodeSelectorTerms=[{"matchExpressions": [expr("gpu", "Exists")]}])
    assert ok(p, {"zone": "a", "gpu": "1"})
    assert not ok(p, {"zone": "b", "gpu": "1"})
    assert not ok(p, {"zone": "a"})


# --- TaintToleration ---------------------------------------------------------------------------

def tolerating(*tolerations) -> Placement:
    return placement(tolerations=list(tolerations))


def test_no_placement_tolerates_no_taint():
    assert ok(None)
    assert not ok(None, taints=[NS])
    assert not ok(placement(nodeSelector={"zone": "a"}), {"zone": "a"}, [NS])


@pytest.mark.parametrize("tol, taint, expected", [
    ({"operator": "Exists"}, NS, True),  # empty key + Exists: everything
    ({"operator": "Exists"}, NE, True),
    ({"key": "dedicated", "operator": "Exists"}, NS, True),
    ({"key": "other", "operator": "Exists"}, NS, False),
    ({"key": "dedicated", "operator": "Equal", "value": "gpu"}, NS, True),
    ({"key": "dedicated", "value": "gpu"}, NS, True),  # Equal is the default
    ({"key": "dedicated", "operator": "Equal", "value": "cpu"}, NS, False),
    ({"key": "dedicated", "operator": "Equal"}, NS, False),  # value "" != "gpu"
    ({"key": "maintenance", "operator": "Equal"}, NE, True),  # both values empty
    ({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}, NS, True),
    ({"key": "dedicated", "value": "gpu", "effect": "NoExecute"}, NS, False),
    ({"key": "dedicated", "value": "gpu", "effect": "PreferNoSchedule"}, NS, False),
    ({"operator": "Exists", "effect": "NoExecute"}, NE, True),
    ({"operator": "Exists", "effect": "NoExecute"}, NS, False),
    ({"key": "maintenance", "operator": "Exists", "effect": ""}, NE, True),
])
def test_toleration_of_a_taint(tol, taint, expected):
    assert ok(tolerating(tol), taints=[taint]) is expected


def test_every_taint_must_be_tolerated():
    p = tolerating({"key": "dedicated", "value": "gpu"})
    assert ok(p, taints=[NS])
    assert not ok(p, taints=[NS, NE])
    assert ok(tolerating({"key": "dedicated", "value": "gpu"}, {"key": "maintenance"}),
              taints=[NS, NE])


def test_tolerations_alone_do_not_restrict_untainted_nodes():
    assert ok(tolerating({"operator": "Exists"}), {"zone": "x"})


def test_prefer_no_schedule_taints_are_ignored():
    text = json.dumps([{"key": "soft", "value": "x", "effect": "PreferNoSchedule"},
                       {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
                       {"key": "maintenance", "effect": "NoExecute"}])
    assert parse_taints(text) == (NS, NE)
    assert parse_taints(json.dumps([{"key": "soft", "effect": "PreferNoSchedule"}])) == ()
    assert parse_taints("[]") == () and parse_taints(None) == ()


def test_toleration_semantics_directly():
    assert Toleration("", "Exists").tolerates(NE)
    assert not Toleration("dedicated", "Equal", "gpu", "NoExecute").tolerates(NS)


# --- parsing -----------------------------------------------------------------------------------

@pytest.mark.parametrize("text, message", [
    ("{", "not JSON"),
    ("[]", "not a JSON object"),
    ('"x"', "not a JSON object"),
    ('{"nodeSelector": ["a"]}', "nodeSelector: must be an object"),
    ('{"nodeSelector": {"a": 1}}', "nodeSelector.a: must be a string, got 1"),
    ('{"nodeSelectorTerms": {}}', "nodeSelectorTerms: must be a list"),
    ('{"nodeSelectorTerms": [1]}', "nodeSelectorTerms[0]: must be an object"),
    ('{"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "In", '
     '"values": ["x"]}, {"key": "b", "operator": "Foo"}]}]}',
     "nodeSelectorTerms[0].matchExpressions[1].operator: 'Foo' is not one of In, NotIn, Exists, "
     "DoesNotExist, Gt, Lt"),
    ('{"nodeSelectorTerms": [{"matchExpressions": [{"operator": "Exists"}]}]}',
     "nodeSelectorTerms[0].matchExpressions[0].key: must not be empty"),
    ('{"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "In"}]}]}',
     "nodeSelectorTerms[0].matchExpressions[0].values: must be non-empty when operator is In"),
    ('{"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "NotIn", '
     '"values": []}]}]}', "values: must be non-empty when operator is NotIn"),
    ('{"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Exists", '
     '"values": ["x"]}]}]}', "values: must be empty when operator is Exists"),
    ('{"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Gt", '
     '"values": ["1", "2"]}]}]}', "values: must have exactly one value when operator is Gt"),
    ('{"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Lt", '
     '"values": ["1.5"]}]}]}', "values[0]: '1.5' is not an integer"),
    ('{"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "In", '
     '"values": [1]}]}]}', "matchExpressions[0].values[0]: must be a string"),
    ('{"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.labels", "operator": "In", '
     '"values": ["n"]}]}]}', "nodeSelectorTerms[0].matchFields[0].key: 'metadata.labels' is not "
                             "one of metadata.name"),
    ('{"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "Exists"}]}]}',
     "matchFields[0].operator: 'Exists' is not one of In, NotIn"),
    ('{"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", '
     '"values": ["a", "b"]}]}]}', "values: must have exactly one value for a field selector"),
    ('{"tolerations": [{"operator": "Exists"}, {"key": "k", "operator": "Bigger"}]}',
     "tolerations[1].operator: 'Bigger' is not one of Equal, Exists"),
    ('{"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}',
     "tolerations[0].value: must be empty when operator is Exists"),
    ('{"tolerations": [{"value": "v"}]}', "tolerations[0].operator: must be Exists when key is empty"),
    ('{"tolerations": [{"key": "k", "effect": "Sometimes"}]}',
     "tolerations[0].effect: 'Sometimes' is not one of NoSchedule, PreferNoSchedule, NoExecute"),
])
def test_parse_errors_name_the_field(text, message):
    with pytest.raises(ValueError) as info:
        parse_placement(text)
    assert message in str(info.value)


def test_a_tag_that_is_no_string_is_an_error():
    with pytest.raises(ValueError, match="not a string"):
        parse_placement({"nodeSelector": {}})


@pytest.mark.parametrize("text, message", [
    ("nope", "not JSON"),
    ("{}", "not a JSON list"),
    ('[{"key": "k"}]', "[0].effect: must not be empty"),
    ('[{"key": "k", "effect": "NoWay"}]', "[0].effect: 'NoWay' is not one of NoSchedule"),
    ('[{"effect": "NoSchedule"}]', "[0].key: must not be empty"),
    ('[{"key": "k", "value": 3, "effect": "NoSchedule"}]', "[0].value: must be a string"),
])
def test_taint_parse_errors(text, message):
    with pytest.raises(ValueError) as info:
        parse_taints(text)
    assert message in str(info.value)


def test_unknown_keys_are_ignored():
    p = placement(nodeSelector={"a": "1"}, preferredAffinity=[{"weight": 1}],
                  tolerations=[{"key": "k", "operator": "Exists", "effect": "NoExecute",
                                "tolerationSeconds": 30}])
    assert p == placement(nodeSelector={"a": "1"},
                          tolerations=[{"key": "k", "operator": "Exists", "effect": "NoExecute"}])


def test_equal_placements_are_one_shape():
    a = placement(nodeSelector={"a": "1", "b": "2"}, tolerations=[{"operator": "Exists"}])
    b = placement(tolerations=[{"operator": "Exists"}], nodeSelector={"b": "2", "a": "1"})
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != placement(nodeSelector={"a": "1"})


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5)
                    | st.sampled_from(["In", "NotIn", "Exists", "Gt", "metadata.name", "NoSchedule",
                                       "key", "values", "operator", "1"]),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                        st.sampled_from(["nodeSelector", "nodeSelectorTerms", "tolerations",
                                         "matchExpressions", "matchFields", "key", "operator",
                                         "values", "value", "effect", "a"]), inner, max_size=4),
                    max_leaves=12)


@given(JSON)
def test_only_value_error_ever_escapes(doc):
    for parse in (parse_placement, parse_taints):
        try:
            result = parse(json.dumps(doc))
        except ValueError:
            continue
        hash(result)  # whatever parses is usable as part of a cache key
