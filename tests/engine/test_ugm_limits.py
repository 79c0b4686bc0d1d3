"""UGM limit configuration: validation (naming queue and field) and lookups; trackers directly."""

from __future__ import annotations

import pytest

from engine.ugm import GroupTracker, LimitConfig, QueueTracker, UserGroup, UserGroupManager, UserTracker
from test_ugm_helpers import Recorder


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ({"": []}, "queue '': invalid queue path"),
        ({"a.b": []}, "queue 'a.b': invalid queue path"),
        ({"root": {}}, "queue 'root': limits must be a list"),
        ({"root": ["x"]}, "queue 'root' limit #0: must be a mapping"),
        ({"root": [{"users": ["u"], "maxapplications": 1, "maxapps": 2}]}, "unknown field 'maxapps'"),
        ({"root": [{"maxapplications": 1}]}, "users/groups"),
        ({"root": [{"users": "u", "maxapplications": 1}]}, "users must be a list"),
        ({"root": [{"groups": [""], "maxapplications": 1}]}, "groups has an invalid name"),
        ({"root": [{"users": [" u"], "maxapplications": 1}]}, "users has an invalid name"),
        ({"root": [{"users": ["u"]}]}, "maxresources/maxapplications"),
        ({"root": [{"users": ["u"], "maxapplications": -1}]}, "maxapplications must be"),
        ({"root": [{"users": ["u"], "maxapplications": "2"}]}, "maxapplications must be"),
        ({"root": [{"users": ["u"], "maxresources": {"memory": "1Gi"}}]}, "maxresources.memory"),
        ({"root": [{"users": ["u"], "maxresources": {"memory": -1}}]}, "maxresources.memory"),
        ({"root": [{"users": ["u"], "maxresources": [1]}]}, "maxresources must be a mapping"),
        ({"root": [{"users": ["u"], "limit": 3, "maxapplications": 1}]}, "limit must be a string"),
        ({"root.a": [{"users": ["u"], "maxapplications": 1}, {"users": ["u"], "maxapplications": 2}]},
         "queue 'root.a' limit #1: users: duplicated user name 'u', already exists"),
        ({"root.a": [{"groups": ["*", "*"], "maxapplications": 1}]}, "groups: duplicated group name '*'"),
        # what YuniKorn's validator refuses (configvalidator.go checkLimit), in its words (R7)
        ({"root": [{"groups": ["*"], "maxapplications": 1}]},
         "groups: should not specify only one group limit that is using the wildcard. There must be"
         " at least one limit with a group name defined"),
        ({"root": [{"limit": "z", "users": ["u"], "maxresources": {"memory": 0}}]},
         "maxresources: MaxResources should be greater than zero in 'z' limit"),
        ({"root": [{"users": ["bad user"], "maxapplications": 1}]},
         "users: invalid limit user name 'bad user' in limit definition"),
        ({"root": [{"groups": ["a/b"], "maxapplications": 1}]},
         "groups: invalid limit group name 'a/b' in limit definition"),
        ({"root": [{"users": ["*"], "maxapplications": 1}, {"users": ["sue"], "maxapplications": 2}]},
         "limit #1: users: should not set no wildcard user sue after wildcard user limit"),
        ({"root": [{"groups": ["dev", "*"], "maxapplications": 1}, {"groups": ["ops"], "maxapplications": 2}]},
         "limit #1: groups: should not set no wildcard group ops after wildcard group limit"),
        ({"root": [{"limit": "n", "users": ["u"]}]},
         "invalid resource combination for limit n all resource limits are null"),
    ],
)
def test_invalid_limits_name_queue_and_field(config, needle):
    rec = Recorder()
    m = UserGroupManager("default", rec)
    m.update_limits({"root": [{"users": ["keep"], "maxapplications": 1}]})
    rec.take()
    before = m.limits
    with pytest.raises(ValueError, match=None) as info:
        m.update_limits(config)
    assert needle in str(info.value)
    if config and next(iter(config)) not in ("", "a.b"):
        assert repr(next(iter(config))) in str(info.value)
    assert m.limits is before and rec.events == []


def test_valid_limits_and_lookups():
    cfg = LimitConfig.parse({
        "root": [{"limit": "admins", "groups": ["admins"], "maxapplications": 1},
                 {"limit": "all", "users": ["*"], "groups": ["*"], "maxapplications": 10}],
        "root.a": [{"users": ["sue"], "groups": ["dev", "ops"], "maxresources": {"memory": 5, "vcore": 0}}],
        "root.b": None,
        "root.c": [],
    })
    assert sorted(cfg.queues()) == ["root", "root.a"]
    limit, explicit = cfg.user_limit("root.a", "sue")
    assert explicit and limit.max_resources == {"memory": 5, "vcore": 0} and limit.max_applications == 0
    assert cfg.user_limit("root.a", "bob") == (None, False)
    limit, explicit = cfg.user_limit("root", "sue")
    assert not explicit and limit.max_applications == 10 and limit.description == "all"
    assert cfg.group_limit("root.a", "dev").max_resources == {"memory": 5, "vcore": 0}
    assert cfg.group_limit("root.a", "other") is None
    assert cfg.group_limit("root", "other").max_applications == 10
    assert cfg.group_limit("root.zzz", "dev") is None
    assert cfg.select_group("root.a.x", ("ops", "dev")) == "dev"
    assert cfg.select_group("root.b", ("ops", "dev")) == "*"  # wildcard at root: the shared * group
    assert cfg.select_group("root.b", ()) is None


def test_limits_accept_missing_and_null_optional_fields():
    cfg = LimitConfig.parse({"root": [{"users": ["u"], "groups": None, "maxapplications": None,
                                       "maxresources": {"memory": 1}}]})
    assert cfg.user_limit("root", "u")[0].max_applications == 0


def test_queue_tracker_interface():
    qt = QueueTracker()
    assert qt.queue_name == "root" and qt.is_empty()
    qt.increase_resource("root.a.b", "app1", {"memory": 2})
    qt.increase_resource("root.a", "app2", {"memory": 1})
    assert qt.resource_usage == {"memory": 3} and qt.running_applications == {"app1", "app2"}
    assert qt.get("root.a.b").running_applications == {"app1"}
    assert qt.get("root.x") is None
    assert not qt.decrease_resource("root.a.b", "", {"memory": 2}, remove_app=False)
    assert qt.get("root.a.b") is not None  # app1 still running there
    assert not qt.decrease_resource("root.a.b", "app1", {}, remove_app=True)
    assert qt.get("root.a.b") is None and qt.get("root.a").running_applications == {"app2"}
    assert qt.decrease_resource("root.a", "app2", {"memory": 1}, remove_app=True)
    assert qt.is_empty() and qt.child_queues == {}
    with pytest.raises(ValueError):
        qt.increase_resource("root.a", "", {"memory": 1})
    with pytest.raises(ValueError):
        qt.decrease_resource("root.a", "", {"memory": 1}, remove_app=True)


def test_user_tracker_group_link_is_set_once():
    ut = UserTracker("u")
    gt = GroupTracker("g")
    assert not ut.has_group_for_app("a")
    assert ut.set_group_for_app("a", None)
    assert ut.has_group_for_app("a")  # a None link still counts
    assert not ut.set_group_for_app("a", gt)  # and cannot be replaced
    assert ut.group_for_app("a") is None
    assert ut.set_group_for_app("b", gt) and not ut.set_group_for_app("b", GroupTracker("h"))
    assert ut.group_for_app("b") is gt
    ut.increase_resource("root.q", "b", {"pods": 1})
    assert not ut.decrease_resource("root.q", "b", {"pods": 1}, remove_app=True)  # "a" still linked
    assert not ut.has_group_for_app("b")
    assert ut.decrease_resource("root.q", "a", {}, remove_app=True)


def test_group_tracker_applications():
    gt = GroupTracker("g")
    gt.increase_resource("root.q", "a", {"pods": 2})
    gt.increase_resource("root.q", "b", {"pods": 1})
    assert gt.applications == {"a", "b"}
    assert not gt.decrease_resource("root.q", "", {"pods": 1}, remove_app=False)  # usage only
    assert not gt.decrease_resource("root.q", "a", {"pods": 1}, remove_app=True)
    assert gt.applications == {"b"}
    assert gt.decrease_resource("root.q", "b", {"pods": 1}, remove_app=True)
    with pytest.raises(ValueError):
        GroupTracker("")
    with pytest.raises(ValueError):
        UserTracker("")


def test_facade_exports():
    import engine.ugm as ugm

    assert ugm.UserGroupManager is UserGroupManager and ugm.UserGroup is UserGroup
    for name in ugm.__all__:
        assert getattr(ugm, name) is not None
