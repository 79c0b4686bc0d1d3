"""YuniKorn's placement rules (engine.placement): the research notes' vectors, filters, rule
errors, dynamic queue creation and removal, config errors, and a fuzz of the rule parser."""

from __future__ import annotations

import pytest
from engine_helpers import Harness
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config import ConfigError, parse_config
from engine.placement import NO_MATCH, parse_rules
from shm.events import EventChangeDetail as D
from shm.events import EventChangeType as C
from shm.events import EventRecordType as T


def config(rules: list, queues: list) -> dict:
    return {"partitions": [{"name": "default", "placementrules": rules,
                            "queues": [{"name": "root", "queues": queues}]}]}


FORCE = [{"name": "provided", "create": False}, {"name": "tag", "value": "namespace", "create": True}]
FORCE_QUEUES = [{"name": "provided"}, {"name": "acldeny"}, {"name": "parent", "parent": True}]


def queue_of(h: Harness, app_id: str) -> str | None:
    app = h.part.apps.get(app_id)
    return app.queue.path if app else None


def test_provided_then_tag_then_rejected_without_root_default():
    h = Harness(config(FORCE, FORCE_QUEUES))
    h.app("a1", queue="root.provided")
    h.app("a2", queue="unknown", tags={})
    h.app("a3", queue="unknown", tags={"namespace": "namespace"})
    assert queue_of(h, "a1") == "root.provided"
    assert h.state("a2") == "Rejected"
    assert h.part.terminated["a2"].rejected_message == f"failed to place application a2: {NO_MATCH}"
    assert queue_of(h, "a3") == "root.namespace"
    assert h.part.queues["root.namespace"].dynamic


def test_root_default_is_the_last_resort_and_the_force_tag_goes_to_recovery():
    h = Harness(config(FORCE, FORCE_QUEUES + [{"name": "default"}]))
    h.app("a1", queue="root.parent")  # a parent queue: no rule accepts it
    h.app("a2", queue="root.parent", tags={"application.create.force": "true"})
    assert queue_of(h, "a1") == "root.default"
    assert queue_of(h, "a2") == "root.@recovery@"


def test_user_rule_under_a_fixed_parent_and_dots_in_names():
    rules = [{"name": "user", "create": True, "parent": {"name": "fixed", "value": "testparent"}}]
    h = Harness(config(rules, [{"name": "testparent", "parent": True}]))
    h.app("a1", user="testchild")
    h.app("a2", user="test.user")
    assert queue_of(h, "a1") == "root.testparent.testchild"
    assert queue_of(h, "a2") == "root.testparent.test_dot_user"


def test_a_parent_rule_that_names_a_leaf_rejects_at_once():
    rules = [{"name": "user", "create": True, "parent": {"name": "fixed", "value": "leafq"}},
             {"name": "provided", "create": True}]
    h = Harness(config(rules, [{"name": "leafq"}]))
    h.app("a1", queue="root.other")
    assert h.state("a1") == "Rejected"
    assert "parent rule returned a leaf queue: root.leafq" in h.part.terminated["a1"].rejected_message


def test_filters_allow_deny_lists_regexp_and_groups():
    rules = [{"name": "fixed", "value": "admins", "create": True, "filter": {"type": "allow", "groups": ["wheel"]}},
             {"name": "user", "create": True, "filter": {"type": "deny", "users": ["^sys-.*"]}},
             {"name": "fixed", "value": "system", "create": True}]
    h = Harness(config(rules, []))
    h.app("a1", user="bob", groups=("staff", "wheel"))
    h.app("a2", user="carol")
    h.app("a3", user="sys-backup")
    assert [queue_of(h, a) for a in ("a1", "a2", "a3")] == ["root.admins", "root.carol", "root.system"]


def test_create_false_needs_an_existing_leaf_and_create_needs_a_parent_above():
    rules = [{"name": "provided"}, {"name": "provided", "create": True}]
    h = Harness(config(rules, [{"name": "team", "parent": True}, {"name": "leafy"}, {"name": "default"}]))
    h.app("a1", queue="root.team.new")  # second rule creates it
    h.app("a2", queue="root.leafy.below")  # under a leaf: cannot be made -> root.default
    assert queue_of(h, "a1") == "root.team.new"
    assert queue_of(h, "a2") == "root.default"


def test_dynamic_queues_are_created_level_by_level_and_removed_when_empty():
    rules = [{"name": "provided", "create": True}]
    h = Harness(config(rules, []))
    h.app("a", queue="root.x.y.z")
    assert queue_of(h, "a") == "root.x.y.z"
    assert not h.part.queues["root.x"].is_leaf and h.part.queues["root.x.y.z"].is_leaf
    h.remove_app("a")
    assert not any(p.startswith("root.x") for p in h.part.queues)
    dyn = [(e.change_type, e.object_id) for e in h.sink.events
           if e.type == T.QUEUE and e.detail == int(D.QUEUE_DYNAMIC)]
    assert dyn == [(C.ADD, "root.x"), (C.ADD, "root.x.y"), (C.ADD, "root.x.y.z"),
                   (C.REMOVE, "root.x.y.z"), (C.REMOVE, "root.x.y"), (C.REMOVE, "root.x")]


def test_the_snapshot_lists_the_rules_as_yunikorn_with_the_recovery_rule_last():
    from engine import snapshot

    rules = [{"name": "tag", "value": "namespace", "create": True,
              "parent": {"name": "fixed", "value": "root.tenants"},
              "filter": {"type": "deny", "groups": ["^guest"]}}]
    h = Harness(config(rules, [{"name": "tenants", "parent": True}]))
    doc = snapshot.build(h.sched)
    assert doc["placementRules"]["default"] == [
        {"name": "tag", "parameters": {"create": "true", "value": "namespace"},
         "parentRule": {"name": "fixed", "parameters": {"create": "false", "value": "root.tenants"}},
         "filter": {"type": "deny", "groupExp": "^guest"}},
        {"name": "recovery", "parameters": {"create": "true"}},
    ]
    implicit = {"partitions": [{"name": "default", "queues": [{"name": "root"}]}]}
    assert snapshot.build(Harness(implicit).sched)["placementRules"]["default"] == [
        {"name": "provided", "parameters": {"create": "false"}}, {"name": "recovery", "parameters": {"create": "true"}}]
    assert snapshot.build(Harness().sched)["placementRules"]["default"][0] == {
        "name": "tag", "parameters": {"create": "true", "value": "namespace"}}


@pytest.mark.parametrize(("rule", "key", "why"), [
    ({"name": "primarygroup"}, "placementrules[0].name", "unknown rule"),
    ({"name": "recovery"}, "placementrules[0].name", "implicit"),
    ({"name": "user", "filter": {"type": "Deny"}}, "placementrules[0].filter.type", "lower case"),
    ({"name": "fixed", "value": "root.a", "parent": {"name": "user"}}, "placementrules[0].value", "parent"),
    ({"name": "tag"}, "placementrules[0].value", "needs a value"),
    ({"name": "user", "filter": {"users": ["a(", "b"]}}, "placementrules[0].filter.users", "only entry"),
    ({"name": "user", "filter": {"users": ["a("]}}, "placementrules[0].filter.users", "regular expression"),
    ({"name": "user", "crate": True}, "placementrules[0].crate", "unknown key"),
])
def test_config_errors_name_the_key_and_the_value(rule, key, why):
    with pytest.raises(ConfigError) as err:
        parse_config(config([rule], []))
    assert err.value.key == f"partitions[0].{key}" and why in err.value.reason


VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8),
                   st.sampled_from(["provided", "user", "tag", "fixed", "Tag", "recovery", "allow", "deny",
                                    "Deny", "^a.*", "root.x", "a(", "namespace"]))
RULES = st.recursive(
    st.dictionaries(st.sampled_from(["name", "create", "value", "filter", "parent", "other"]), VALUES, max_size=5),
    lambda inner: st.one_of(
        st.dictionaries(st.sampled_from(["name", "create", "value", "parent", "filter"]), inner, max_size=5),
        st.lists(inner, max_size=3),
        st.fixed_dictionaries({"type": VALUES, "users": st.one_of(VALUES, st.lists(VALUES, max_size=3)),
                               "groups": st.lists(st.text(max_size=5), max_size=2)})),
    max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(raw=st.one_of(VALUES, st.lists(RULES, max_size=3)))
def test_the_rule_parser_only_raises_documented_errors(raw):
    try:
        rules = parse_rules("placementrules", raw)
    except ConfigError as exc:
        assert exc.key.startswith("placementrules") and exc.reason
        return
    for rule in rules:
        assert rule.to_dao()["name"] in ("provided", "user", "tag", "fixed")
