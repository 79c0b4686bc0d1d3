"""User group manager: the seed's scenarios, limits, group selection, cleanup, events, REST shapes."""

from __future__ import annotations

import threading

import pytest

from engine.ugm import UserGroup, UserGroupManager
from shm.events import EventChangeDetail as D
from shm.events import EventChangeType as C
from shm.events import EventRecordType as T
from test_ugm_helpers import Event, Recorder, check_invariants, snapshot

GI = 1024**3


def make(limits=None):
    rec = Recorder()
    m = UserGroupManager("default", rec)
    if limits:
        m.update_limits(limits)
    rec.take()
    return m, rec


def res_event(change, detail, obj, path, delta):
    """A UG_*_RESOURCE event as YuniKorn emits it: referenceID the queue path, no message."""
    return Event(T.USERGROUP, change, detail, obj, path, "", delta)


# -- the seed's REST example ------------------------------------------------------------------


def test_seed_rest_example_exact_shapes():
    m, _ = make({"root.test": [{"groups": ["tester"], "maxapplications": 10}]})
    user = UserGroup("user1", ("tester",))
    half = {"memory": 6_000_000_000, "vcore": 6000}
    assert m.increase("root.default", "app1", half, user)
    assert m.increase("root.test", "app2", half, user)
    assert m.users_json() == [
        {
            "userName": "user1",
            "groups": {"app2": "tester"},
            "queues": {
                "queuePath": "root",
                "resourceUsage": {"memory": 12_000_000_000, "vcore": 12000},
                "runningApplications": ["app1", "app2"],
                "children": [
                    {
                        "queuePath": "root.default",
                        "resourceUsage": {"memory": 6_000_000_000, "vcore": 6000},
                        "runningApplications": ["app1"],
                    },
                    {
                        "queuePath": "root.test",
                        "resourceUsage": {"memory": 6_000_000_000, "vcore": 6000},
                        "runningApplications": ["app2"],
                    },
                ],
            },
        }
    ]
    assert m.groups_json() == [
        {
            "groupName": "tester",
            "applications": ["app2"],
            "queues": {
                "queuePath": "root",
                "resourceUsage": {"memory": 6_000_000_000, "vcore": 6000},
                "runningApplications": ["app2"],
                "children": [
                    {
                        "queuePath": "root.test",
                        "resourceUsage": {"memory": 6_000_000_000, "vcore": 6000},
                        "runningApplications": ["app2"],
                        "maxApplications": 10,
                    }
                ],
            },
        }
    ]
    assert m.user_json("user1") == m.users_json()[0]
    assert m.group_json("tester") == m.groups_json()[0]
    assert m.user_json("nobody") is None and m.group_json("nobody") is None
    assert m.user_usage("user1") == {"memory": 12_000_000_000, "vcore": 12000}
    assert m.user_usage("user1", "root.test") == half
    assert m.group_usage("tester") == half
    assert m.user_usage("nobody") == {} and m.group_usage("tester", "root.default") == {}


def test_json_limits_shown_where_they_apply():
    m, _ = make({
        "root": [{"users": ["*"], "maxresources": {"memory": 100, "vcore": 0}}],
        "root.a": [{"users": ["sue"], "maxapplications": 3}, {"groups": ["ops"], "maxapplications": 9},
                   {"groups": ["*"], "maxresources": {"pods": 5}}],
    })
    assert m.increase("root.a", "app1", {"memory": 10}, UserGroup("sue", ("dev",)))
    assert m.user_json("sue") == {
        "userName": "sue",
        "groups": {"app1": "*"},
        "queues": {
            "queuePath": "root",
            "resourceUsage": {"memory": 10},
            "runningApplications": ["app1"],
            "maxResources": {"memory": 100, "vcore": 0},
            "children": [
                {"queuePath": "root.a", "resourceUsage": {"memory": 10}, "runningApplications": ["app1"],
                 "maxApplications": 3},
            ],
        },
    }
    assert m.group_json("*")["queues"]["children"][0]["maxResources"] == {"pods": 5}
    assert "maxResources" not in m.group_json("*")["queues"]


def test_no_trackers_is_empty_lists():
    m, _ = make()
    assert m.users_json() == [] and m.groups_json() == []


# -- group selection --------------------------------------------------------------------------


def test_no_group_limits_means_no_group_tracking_and_link_is_final():
    m, rec = make()
    ugi = UserGroup("joe", ("dev", "test"))
    assert m.increase("root.a", "app1", {"memory": 1}, ugi)
    assert m.app_group("joe", "app1") is None and m.groups_json() == []
    assert "groups" not in m.user_json("joe")
    # A group limit appears later: the existing app's None link cannot be replaced ...
    m.update_limits({"root": [{"groups": ["dev"], "maxapplications": 5}]})
    assert m.increase("root.a", "app1", {"memory": 1}, ugi)
    assert m.app_group("joe", "app1") is None and m.group_names() == []
    # ... but a new app is linked.
    assert m.increase("root.a", "app2", {"memory": 1}, ugi)
    assert m.app_group("joe", "app2") == "dev"
    assert m.group_usage("dev") == {"memory": 1}


def test_group_selected_bottom_up():
    m, _ = make({
        "root": [{"groups": ["g1"], "maxapplications": 9}],
        "root.a": [{"groups": ["g2"], "maxapplications": 9}],
    })
    ugi = UserGroup("joe", ("g1", "g2"))
    assert m.increase("root.a.b", "deep", {"vcore": 1}, ugi)
    assert m.increase("root.c", "other", {"vcore": 1}, ugi)
    assert m.increase("root.a", "leaf", {"vcore": 1}, ugi)
    assert m.app_group("joe", "deep") == "g2"
    assert m.app_group("joe", "leaf") == "g2"
    assert m.app_group("joe", "other") == "g1"
    assert m.group_running_apps("g2") == {"deep", "leaf"}
    assert m.group_running_apps("g1") == {"other"}
    assert m.user_json("joe")["groups"] == {"deep": "g2", "leaf": "g2", "other": "g1"}


def test_group_selection_uses_config_order_not_user_group_order():
    m, _ = make({"root.x": [{"groups": ["g3"], "maxapplications": 9}, {"groups": ["g2", "g4"], "maxapplications": 9}]})
    assert m.increase("root.x", "a1", {"pods": 1}, UserGroup("u", ("g2", "g3")))
    assert m.increase("root.x", "a2", {"pods": 1}, UserGroup("u", ("g3", "g2")))
    assert m.app_group("u", "a1") == m.app_group("u", "a2") == "g3"
    assert m.increase("root.x", "a3", {"pods": 1}, UserGroup("v", ("g4", "g2")))
    assert m.app_group("v", "a3") == "g2"


def test_user_without_matching_group_is_not_group_tracked():
    m, _ = make({"root": [{"groups": ["dev"], "maxapplications": 1}]})
    assert m.increase("root.a", "a1", {"pods": 1}, UserGroup("u", ("ops",)))
    assert m.increase("root.a", "a2", {"pods": 1}, UserGroup("u", ()))
    assert m.group_names() == [] and m.app_group("u", "a1") is None


def test_wildcard_group_limit_is_tracked_against_the_shared_wildcard_group():
    m, _ = make({"root": [{"groups": ["other"], "maxapplications": 9}, {"groups": ["*"], "maxapplications": 2}]})
    assert m.increase("root.a", "a1", {"pods": 1}, UserGroup("u1", ("g5", "g6")))
    assert m.app_group("u1", "a1") == "*"
    assert m.increase("root.a", "a2", {"pods": 1}, UserGroup("u2", ("g6", "g5")))  # order does not matter
    assert m.app_group("u2", "a2") == "*"
    assert not m.can_run_app("root.a", "a3", UserGroup("u3", ("g7",)))  # the shared limit is reached
    assert not m.increase("root.a", "a3", {"pods": 1}, UserGroup("u3", ("g7",)))
    assert m.increase("root.a", "a4", {"pods": 1}, UserGroup("u4", ()))  # no group: nothing to limit
    assert m.group_names() == ["*"]
    assert m.group_json("*")["queues"]["maxApplications"] == 2


def test_explicit_group_match_beats_wildcard_at_same_queue():
    m, _ = make({"root": [{"groups": ["dev"], "maxapplications": 1}, {"groups": ["*"], "maxapplications": 5}]})
    assert m.increase("root", "a1", {"pods": 1}, UserGroup("u", ("misc", "dev")))
    assert m.app_group("u", "a1") == "dev"
    assert not m.increase("root", "a2", {"pods": 1}, UserGroup("u", ("misc", "dev")))
    assert m.increase("root", "a2", {"pods": 1}, UserGroup("u", ("misc",)))


def test_group_change_after_first_use():
    m, _ = make({"root": [{"groups": ["dev", "test"], "maxresources": {"memory": 100}}]})
    assert m.increase("root.q", "app1", {"memory": 10}, UserGroup("sue", ("dev",)))
    # Same app, groups changed: still counted against dev.
    assert m.increase("root.q", "app1", {"memory": 5}, UserGroup("sue", ("test",)))
    assert m.group_usage("dev") == {"memory": 15} and m.group_usage("test") == {}
    assert m.app_group("sue", "app1") == "dev"
    # A decrease follows the link, whatever groups it is given.
    assert m.decrease("root.q", "app1", {"memory": 3}, UserGroup("sue", ("test",)))
    assert m.group_usage("dev") == {"memory": 12}
    # A new app uses the current groups.
    assert m.increase("root.q", "app2", {"memory": 7}, UserGroup("sue", ("test",)))
    assert m.app_group("sue", "app2") == "test" and m.group_usage("test") == {"memory": 7}
    # After the app is removed and restarts, it is linked afresh.
    assert m.decrease("root.q", "app1", {"memory": 12}, UserGroup("sue", ()), remove_app=True)
    assert m.group_names() == ["test"]
    assert m.increase("root.q", "app1", {"memory": 1}, UserGroup("sue", ("test",)))
    assert m.app_group("sue", "app1") == "test"


# -- limits and precedence --------------------------------------------------------------------


def test_wildcard_user_limit_and_explicit_override():
    m, _ = make({"root.a": [{"users": ["vip"], "maxapplications": 3}, {"users": ["*"], "maxapplications": 1}]})
    for user in ("u1", "u2"):
        assert m.increase("root.a", f"{user}-1", {"pods": 1}, UserGroup(user))
        assert not m.can_run_app("root.a", f"{user}-2", UserGroup(user))
        assert not m.increase("root.a", f"{user}-2", {"pods": 1}, UserGroup(user))
    for i in range(3):
        assert m.increase("root.a", f"vip-{i}", {"pods": 1}, UserGroup("vip"))
    assert not m.increase("root.a", "vip-3", {"pods": 1}, UserGroup("vip"))
    # Another queue has no limit.
    assert m.increase("root.b", "u1-2", {"pods": 1}, UserGroup("u1"))


def test_explicit_user_limit_beats_group_limit_at_that_queue_only():
    m, _ = make({
        "root": [{"groups": ["dev"], "maxapplications": 3}],
        "root.a": [{"groups": ["dev"], "maxapplications": 1}, {"users": ["sue"], "maxapplications": 5}],
    })
    sue, bob = UserGroup("sue", ("dev",)), UserGroup("bob", ("dev",))
    assert m.increase("root.a", "bob1", {"pods": 1}, bob)
    assert not m.increase("root.a", "bob2", {"pods": 1}, bob)  # group limit at root.a
    assert m.why_not("root.a", "bob2", {"pods": 1}, bob) == "group dev queue root.a: running applications 1+1 > 1"
    assert m.increase("root.a", "sue1", {"pods": 1}, sue)  # explicit user limit at root.a wins
    assert m.increase("root.a", "sue2", {"pods": 1}, sue)
    # ... but the group limit at root still applies to sue (no explicit user limit there).
    assert not m.increase("root.a", "sue3", {"pods": 1}, sue)
    assert m.why_not("root.a", "sue3", {"pods": 1}, sue) == "group dev queue root: running applications 3+1 > 3"
    assert m.group_running_apps("dev", "root.a") == {"bob1", "sue1", "sue2"}


def test_user_limit_checked_before_group_limit():
    m, _ = make({"root": [{"users": ["*"], "maxresources": {"memory": 10}}, {"groups": ["g"], "maxresources": {"memory": 5}}]})
    ugi = UserGroup("u", ("g",))
    assert m.why_not("root", "a", {"memory": 11}, ugi) == "user u queue root: memory 0+11 > 10"
    assert m.why_not("root", "a", {"memory": 6}, ugi) == "group g queue root: memory 0+6 > 5"
    assert m.why_not("root", "a", {"memory": 5}, ugi) is None


def test_leaf_checked_before_parents():
    m, _ = make({"root": [{"users": ["u"], "maxresources": {"memory": 5}}],
                 "root.a": [{"users": ["u"], "maxresources": {"memory": 4}}]})
    assert m.why_not("root.a", "x", {"memory": 6}, UserGroup("u")) == "user u queue root.a: memory 0+6 > 4"


def test_resource_limit_semantics():
    m, _ = make({"root": [{"users": ["u"], "maxresources": {"memory": 10, "gpu": 0}}]})
    u = UserGroup("u")
    assert m.increase("root.a", "a", {"memory": 10, "vcore": 10**9}, u)  # vcore not limited
    assert not m.increase("root.a", "a", {"memory": 1}, u)
    assert not m.increase("root.a", "b", {"gpu": 1}, u)  # 0 is a real limit
    assert m.increase("root.a", "b", {"gpu": 0, "vcore": 1}, u)
    # Limit lowered under current usage: only increases of that resource are refused.
    m.update_limits({"root": [{"users": ["u"], "maxresources": {"memory": 5}}]})
    assert m.increase("root.a", "a", {"vcore": 1}, u)
    assert not m.increase("root.a", "a", {"memory": 1}, u)
    assert m.user_usage("u") == {"memory": 10, "vcore": 10**9 + 2}


def test_running_app_counts_across_hierarchy_and_can_run_app():
    m, _ = make({"root.a": [{"users": ["*"], "maxapplications": 2}], "root": [{"users": ["*"], "maxapplications": 3}]})
    u = UserGroup("u")
    assert m.increase("root.a.b", "app1", {"pods": 1}, u)
    assert m.increase("root.a.c", "app2", {"pods": 1}, u)
    assert m.increase("root.a.b", "app1", {"pods": 1}, u)  # already running: not counted again
    assert m.user_running_apps("u") == {"app1", "app2"}
    assert m.user_running_apps("u", "root.a") == {"app1", "app2"}
    assert m.user_running_apps("u", "root.a.b") == {"app1"}
    assert m.can_run_app("root.a.b", "app1", u)  # already running
    assert not m.can_run_app("root.a.x", "app3", u)  # root.a full
    assert m.can_run_app("root.d", "app3", u)
    assert m.increase("root.d", "app3", {}, u)  # an empty usage still starts the app
    assert m.user_running_apps("u", "root.d") == {"app3"}
    assert not m.can_run_app("root.e", "app4", u)  # root full
    assert m.decrease("root.a.c", "app2", {"pods": 1}, u, remove_app=True)
    assert m.user_running_apps("u") == {"app1", "app3"}
    assert m.can_run_app("root.a.x", "app4", u)


def test_can_run_app_for_an_untracked_user_and_group():
    m, _ = make({"root": [{"groups": ["g"], "maxapplications": 0, "maxresources": {"pods": 1}}]})
    assert m.can_run_app("root.a", "x", UserGroup("new", ("g",)))
    m.update_limits({"root": [{"groups": ["g"], "maxapplications": 1}]})
    assert m.increase("root.a", "x", {}, UserGroup("one", ("g",)))
    assert not m.can_run_app("root.a", "y", UserGroup("two", ("g",)))
    assert m.user_names() == ["one"]


# -- rollback ---------------------------------------------------------------------------------


def test_refused_increase_changes_nothing_user_side():
    m, rec = make({"root": [{"users": ["*"], "maxresources": {"memory": 10}}],
                   "root.a": [{"groups": ["g"], "maxresources": {"memory": 100}}]})
    u = UserGroup("u", ("g",))
    assert m.increase("root.a.b", "app1", {"memory": 8}, u)
    rec.take()
    before = snapshot(m)
    assert not m.increase("root.a.b", "app1", {"memory": 3}, u)  # root limit, leaf fine
    assert not m.increase("root.a.c", "app2", {"memory": 3}, u)  # new app: no link, no node
    assert snapshot(m) == before and rec.events == []
    assert not m.increase("root.a", "x", {"memory": 11}, UserGroup("fresh", ("g",)))
    assert snapshot(m) == before and m.user_names() == ["u"]
    check_invariants(m)


def test_refused_increase_changes_nothing_group_side():
    m, rec = make({"root.a": [{"groups": ["g"], "maxresources": {"memory": 10}, "maxapplications": 2}]})
    assert m.increase("root.a", "a1", {"memory": 6}, UserGroup("u1", ("g",)))
    rec.take()
    before = snapshot(m)
    # User u2 has no limit; group g would go over: neither u2's tracker nor g changes.
    assert not m.increase("root.a.b", "a2", {"memory": 5}, UserGroup("u2", ("g",)))
    assert snapshot(m) == before and rec.events == []
    assert m.user_names() == ["u1"] and m.app_group("u2", "a2") is None
    assert m.increase("root.a.b", "a2", {"memory": 4}, UserGroup("u2", ("g",)))
    assert m.group_usage("g") == {"memory": 10} and m.group_usage("g", "root.a.b") == {"memory": 4}
    assert not m.increase("root.a", "a3", {}, UserGroup("u3", ("g",)))  # maxapplications
    check_invariants(m)


# -- decrease and cleanup ---------------------------------------------------------------------


def test_decrease_cleanup_of_queues_and_trackers():
    m, _ = make({"root": [{"groups": ["g"], "maxapplications": 10}]})
    u = UserGroup("u", ("g",))
    assert m.increase("root.a.b", "app1", {"memory": 4}, u)
    assert m.increase("root.c", "app2", {"memory": 2}, u)
    # Usage to zero, app still running: the queue stays, the app is still listed, and the
    # quantity shows as 0 (YuniKorn's DAOMap keeps zero-valued entries)
    assert m.decrease("root.a.b", "app1", {"memory": 4}, u)
    leaf = m.user_json("u")["queues"]["children"][0]["children"][0]
    assert leaf == {"queuePath": "root.a.b", "resourceUsage": {"memory": 0},
                    "runningApplications": ["app1"]}
    assert m.decrease("root.a.b", "app1", {}, u, remove_app=True)
    assert [q["queuePath"] for q in m.user_json("u")["queues"]["children"]] == ["root.c"]
    assert [q["queuePath"] for q in m.group_json("g")["queues"]["children"]] == ["root.c"]
    assert m.group_json("g")["applications"] == ["app2"]
    assert m.user_json("u")["groups"] == {"app2": "g"}
    check_invariants(m)
    assert m.decrease("root.c", "app2", {"memory": 2}, u, remove_app=True)
    assert m.user_names() == [] and m.group_names() == []
    assert m.users_json() == [] and m.groups_json() == []


def test_group_tracker_shared_by_users_survives_one_user_leaving():
    m, _ = make({"root": [{"groups": ["g"], "maxapplications": 10}]})
    a, b = UserGroup("a", ("g",)), UserGroup("b", ("g",))
    assert m.increase("root.x", "a1", {"memory": 1}, a)
    assert m.increase("root.y", "b1", {"memory": 2}, b)
    assert m.decrease("root.x", "a1", {"memory": 1}, a, remove_app=True)
    assert m.user_names() == ["b"] and m.group_names() == ["g"]
    assert m.group_json("g")["queues"] == {
        "queuePath": "root", "resourceUsage": {"memory": 2}, "runningApplications": ["b1"],
        "maxApplications": 10,
        "children": [{"queuePath": "root.y", "resourceUsage": {"memory": 2}, "runningApplications": ["b1"]}],
    }


def test_decrease_unknown_user_and_over_decrease():
    m, _ = make()
    u = UserGroup("u")
    assert not m.decrease("root.a", "app", {"memory": 1}, u)
    assert m.increase("root.a", "app", {"memory": 3, "vcore": 1}, u)
    assert m.decrease("root.a.zzz", "app", {"memory": 1}, u)  # deeper than tracked: tracked levels only
    assert m.user_usage("u") == {"memory": 2, "vcore": 1}
    assert m.decrease("root.a", "app", {"memory": 100}, u)  # never below zero
    assert m.user_usage("u") == {"vcore": 1}
    assert m.decrease("root.a", "app", {"vcore": 1}, u, remove_app=True)
    assert m.user_names() == []


def test_decrease_that_empties_then_increase_keeps_usage():
    """The seed's race, sequentially: the increase after a cleanup must land in a live tracker."""
    m, _ = make({"root": [{"groups": ["g"], "maxapplications": 10}]})
    u = UserGroup("u", ("g",))
    assert m.increase("root.a", "app1", {"memory": 5}, u)
    assert m.decrease("root.a", "app1", {"memory": 5}, u, remove_app=True)
    assert m.user_names() == [] and m.group_names() == []
    assert m.increase("root.a", "app2", {"memory": 7}, u)
    assert m.user_usage("u") == {"memory": 7} and m.group_usage("g") == {"memory": 7}
    assert m.users_json()[0]["queues"]["resourceUsage"] == {"memory": 7}
    check_invariants(m)


def test_concurrent_increase_decrease_from_threads_loses_nothing():
    m, _ = make({"root": [{"groups": ["g"], "maxapplications": 1000}]})
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            ugi = UserGroup(f"u{n % 2}", ("g",))
            barrier.wait()
            for i in range(300):
                app = f"app-{n}-{i % 3}"
                assert m.increase(f"root.q{n % 3}", app, {"memory": 2}, ugi)
                m.decrease(f"root.q{n % 3}", app, {"memory": 2}, ugi, remove_app=(i % 2 == 1))
                assert m.increase(f"root.q{n % 3}", app, {"memory": 1}, ugi)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert m.user_usage("u0") == {"memory": 4 * 300} and m.user_usage("u1") == {"memory": 4 * 300}
    assert m.group_usage("g") == {"memory": 8 * 300}
    check_invariants(m)


def test_simultaneous_increase_and_decrease_order_independent():
    """An increase and a release of the same app commute when neither touches a limit."""
    ugi = UserGroup("u", ("g",))
    limits = {"root": [{"groups": ["g"], "maxresources": {"memory": 100}}]}
    results = []
    for order in ("inc-first", "dec-first"):
        m, _ = make(limits)
        assert m.increase("root.a", "app", {"memory": 10}, ugi)
        steps = [lambda: m.increase("root.a", "app", {"memory": 4}, ugi),
                 lambda: m.decrease("root.a", "app", {"memory": 3}, ugi)]
        for step in steps if order == "inc-first" else reversed(steps):
            assert step()
        results.append(snapshot(m))
    assert results[0] == results[1]


def test_clear_wipes_usage_keeps_limits():
    m, rec = make({"root": [{"users": ["*"], "maxapplications": 1}]})
    assert m.increase("root", "a", {"pods": 1}, UserGroup("u"))
    rec.take()
    m.clear()
    assert m.users_json() == [] and rec.events == []
    assert m.increase("root", "b", {"pods": 1}, UserGroup("u"))
    assert not m.increase("root", "c", {"pods": 1}, UserGroup("u"))


# -- events ------------------------------------------------------------------------------------


def test_events_for_increase_decrease_and_links():
    m, rec = make({"root": [{"groups": ["g"], "maxapplications": 5}]})
    u = UserGroup("u", ("g",))
    assert m.increase("root.a", "app1", {"memory": 5, "vcore": 0}, u)
    assert rec.take() == [
        Event(T.USERGROUP, C.SET, D.UG_APP_LINK, "g", "app1", "", None),
        res_event(C.ADD, D.UG_USER_RESOURCE, "u", "root.a", {"memory": 5}),
        res_event(C.ADD, D.UG_GROUP_RESOURCE, "g", "root.a", {"memory": 5}),
    ]
    assert m.increase("root.a", "app1", {"memory": 1}, u)
    assert [e.detail for e in rec.take()] == [D.UG_USER_RESOURCE, D.UG_GROUP_RESOURCE]
    assert m.increase("root.a", "app1", {}, u)
    assert rec.take() == []
    assert m.decrease("root.a", "app1", {"memory": 6}, u, remove_app=True)
    assert rec.take() == [
        res_event(C.REMOVE, D.UG_USER_RESOURCE, "u", "root.a", {"memory": 6}),
        res_event(C.REMOVE, D.UG_GROUP_RESOURCE, "g", "root.a", {"memory": 6}),
        Event(T.USERGROUP, C.REMOVE, D.UG_APP_LINK, "g", "app1", "", None),
    ]
    # No group: user events only, no link events.
    assert m.increase("root.a", "app2", {"memory": 1}, UserGroup("solo"))
    assert rec.take() == [res_event(C.ADD, D.UG_USER_RESOURCE, "solo", "root.a", {"memory": 1})]
    assert m.decrease("root.a", "app2", {"memory": 1}, UserGroup("solo"), remove_app=True)
    assert rec.take() == [res_event(C.REMOVE, D.UG_USER_RESOURCE, "solo", "root.a", {"memory": 1})]


def test_limit_events_set_and_remove_only_on_change():
    m, rec = make()
    config = {"root.a": [{"limit": "cap", "users": ["sue", "*"], "groups": ["dev"],
                          "maxresources": {"memory": 1024}, "maxapplications": 2}]}
    m.update_limits(config)
    desc = "limit 'cap' maxresources memory=1024 maxapplications 2"
    assert rec.take() == [
        Event(T.USERGROUP, C.SET, D.UG_USER_LIMIT, "*", "root.a", desc, {"memory": 1024}),
        Event(T.USERGROUP, C.SET, D.UG_USER_LIMIT, "sue", "root.a", desc, {"memory": 1024}),
        Event(T.USERGROUP, C.SET, D.UG_GROUP_LIMIT, "dev", "root.a", desc, {"memory": 1024}),
    ]
    m.update_limits(config)
    assert rec.take() == []
    m.update_limits({"root.a": [{"limit": "cap", "users": ["sue"], "maxapplications": 3}]})
    assert rec.take() == [
        Event(T.USERGROUP, C.REMOVE, D.UG_USER_LIMIT, "*", "root.a", "limit removed", None),
        Event(T.USERGROUP, C.SET, D.UG_USER_LIMIT, "sue", "root.a", "limit 'cap' maxapplications 3", None),
        Event(T.USERGROUP, C.REMOVE, D.UG_GROUP_LIMIT, "dev", "root.a", "limit removed", None),
    ]


def test_emit_is_called_outside_the_lock():
    seen = []

    def emit(*args, **kwargs):
        # A sink that reads the manager back (e.g. to publish a snapshot) must see the new state.
        seen.append(m.user_usage("u"))

    m = UserGroupManager("default", emit)
    assert m.increase("root", "a", {"memory": 1}, UserGroup("u"))
    assert seen == [{"memory": 1}]


# -- argument validation -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "app", "usage", "ugi"),
    [
        ("", "a", {}, UserGroup("u")),
        ("default", "a", {}, UserGroup("u")),
        ("root..a", "a", {}, UserGroup("u")),
        ("root.a", "", {}, UserGroup("u")),
        ("root.a", "a", {"memory": -1}, UserGroup("u")),
        ("root.a", "a", {"memory": True}, UserGroup("u")),
        ("root.a", "a", {"memory": 1.5}, UserGroup("u")),
        ("root.a", "a", {}, UserGroup("")),
    ],
)
def test_bad_arguments_raise_and_change_nothing(path, app, usage, ugi):
    m, rec = make()
    with pytest.raises(ValueError):
        m.increase(path, app, usage, ugi)
    with pytest.raises(ValueError):
        m.decrease(path, app, usage, ugi, remove_app=True)
    assert snapshot(m) == ({}, {}) and rec.events == []


def test_usergroup_groups_become_a_tuple():
    ugi = UserGroup("u", ["a", "b"])  # type: ignore[arg-type]
    assert ugi.groups == ("a", "b") and hash(ugi) == hash(UserGroup("u", ("a", "b")))


def test_forced_increase_tracks_existing_allocations_over_a_lowered_limit():
    """Recovery replays allocations that already exist: they are tracked even over a limit
    (a limit lowered across an engine restart), while new usage on top is still refused."""
    m, rec = make({"root.a": [{"limit": "small", "users": ["alice"], "maxresources": {"memory": GI}}]})
    ugi = UserGroup("alice", ())
    assert m.increase("root.a", "app-1", {"memory": 2 * GI}, ugi) is False
    assert m.user_usage("alice") == {}
    assert m.increase("root.a", "app-1", {"memory": 2 * GI}, ugi, force=True) is True
    assert m.user_usage("alice", "root.a") == {"memory": 2 * GI}
    assert [e.detail for e in rec.take()] == [D.UG_USER_RESOURCE]
    assert m.increase("root.a", "app-1", {"memory": 1}, ugi) is False
    assert m.user_usage("alice", "root.a") == {"memory": 2 * GI}
