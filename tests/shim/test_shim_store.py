"""The informer store and the cache diff on relist."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kube.store import ADDED, DELETED, MODIFIED, Store, diff, object_key, stub


def obj(name, rv, ns="ns", **extra):
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": str(rv)}, **extra}


def test_keys():
    assert object_key(obj("a", 1)) == "ns/a"
    assert object_key({"metadata": {"name": "node1"}}) == "node1"


def test_relist_diff_deletes_updates_adds():
    s = Store()
    assert s.replace([obj("a", 1), obj("b", 2), obj("c", 3)], "3") == [
        (ADDED, obj("a", 1)), (ADDED, obj("b", 2)), (ADDED, obj("c", 3))]
    assert s.synced and s.resource_version == "3"
    events = s.replace([obj("a", 1), obj("b", 9), obj("d", 10)], "10")
    assert events == [(MODIFIED, obj("b", 9)), (ADDED, obj("d", 10)), (DELETED, obj("c", 3))]
    assert sorted(s.items) == ["ns/a", "ns/b", "ns/d"] and s.resource_version == "10"


def test_apply_watch_events_and_bookmarks():
    s = Store()
    s.replace([], "1")
    assert s.apply("ADDED", obj("a", 2)) == (ADDED, obj("a", 2))
    assert s.apply("MODIFIED", obj("b", 3)) == (ADDED, obj("b", 3))   # unknown -> added
    assert s.apply("MODIFIED", obj("a", 4)) == (MODIFIED, obj("a", 4))
    assert s.apply("BOOKMARK", {"metadata": {"resourceVersion": "7"}}) is None
    assert s.resource_version == "7"
    assert s.apply("DELETED", obj("a", 8)) == (DELETED, obj("a", 8))
    assert s.apply("DELETED", obj("zz", 9)) is None
    assert list(s.items) == ["ns/b"] and s.resource_version == "9"


def big(name, rv, uid):
    """A pod with what the real API server sends beside its key: spec, status, managedFields."""
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": str(rv),
                         "labels": {"app": "a"}, "managedFields": [{"manager": "kubectl"}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}, "status": {"phase": "Running"}}


def test_a_stub_store_keeps_keys_uids_and_versions_and_passes_whole_objects_on():
    """The shim's stores (`remember=stub`): events carry the whole object, the cache only what a
    relist needs, so 10,000 pods do not stay in the shim's memory twice."""
    s = Store(remember=stub)
    s.replace([big("a", 1, "u-a"), big("b", 2, "u-b")], "2")
    assert s.apply("MODIFIED", big("a", 3, "u-a")) == (MODIFIED, big("a", 3, "u-a"))
    assert s.items["ns/a"] == {"metadata": {"name": "a", "namespace": "ns", "uid": "u-a",
                                            "resourceVersion": "3"}}
    # a relist: a unchanged (same rv: no event), b gone (DELETED with its key and uid), c new
    events = s.replace([big("a", 3, "u-a"), big("c", 4, "u-c")], "4")
    assert events == [(ADDED, big("c", 4, "u-c")),
                      (DELETED, {"metadata": {"name": "b", "namespace": "ns", "uid": "u-b",
                                              "resourceVersion": "2"}})]
    assert events[0][1]["spec"]["nodeName"] == "n1"      # the consumer still gets the whole pod


def test_diff_without_resource_versions_compares_content():
    old = {"x": {"metadata": {"name": "x"}, "v": 1}}
    assert diff(old, [{"metadata": {"name": "x"}, "v": 1}]) == []
    assert diff(old, [{"metadata": {"name": "x"}, "v": 2}]) == [
        (MODIFIED, {"metadata": {"name": "x"}, "v": 2})]


names = st.sampled_from([f"o{i}" for i in range(8)])


@given(st.dictionaries(names, st.integers(1, 5)), st.dictionaries(names, st.integers(1, 5)))
def test_applying_the_diff_reproduces_the_relist(before, after):
    s = Store()
    s.replace([obj(n, rv) for n, rv in before.items()], "1")
    mirror = {k: v for k, v in s.items.items()}
    for etype, o in s.replace([obj(n, rv) for n, rv in after.items()], "2"):
        if etype == DELETED:
            del mirror[object_key(o)]
        else:
            assert (etype == ADDED) == (object_key(o) not in mirror)
            mirror[object_key(o)] = o
    assert mirror == s.items
