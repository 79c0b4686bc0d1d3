"""The informer store and the cache diff on relist."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kube.store import ADDED, DELETED, MODIFIED, Store, diff, object_key


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
