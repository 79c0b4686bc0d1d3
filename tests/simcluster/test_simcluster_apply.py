"""Server-side apply's pure parts: field sets and their FieldsV1 form, apply merges, conflicts and
removals, Update managers (`simcluster.fieldsets`, `apply`)."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simcluster import apply, fieldsets
from simcluster.resources import CONFIGMAPS, PODS

KEYS = st.text("abcdef", min_size=1, max_size=3)
DATA = st.dictionaries(KEYS, st.text("xyz", max_size=2), max_size=6)


def cm(data: dict[str, str], labels: dict[str, str] | None = None) -> dict:
    meta: dict = {"name": "c", "namespace": "ns"}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def applied(live: dict | None, cfg: dict, manager: str, force: bool = False) -> dict:
    mgr = apply.Manager(manager, "Apply", "v1")
    if live is None:
        return apply.created(CONFIGMAPS, cfg, mgr)
    return apply.apply(CONFIGMAPS, live, cfg, mgr, force)


def data_paths(data: dict[str, str]) -> set:
    """What a manager of `data` owns: each key, or the empty map itself."""
    return {("f:data", "f:" + k) for k in data} or {("f:data",)}


def owners(obj: dict) -> dict[str, set]:
    return {e["manager"]: fieldsets.from_fields_v1(e["fieldsV1"]) for e in obj["metadata"].get("managedFields", [])}


@given(DATA, DATA)
def test_fields_v1_round_trip(data: dict[str, str], labels: dict[str, str]) -> None:
    paths = set(fieldsets.leaves(cm(data, labels), fieldsets.for_resource(CONFIGMAPS)))
    assert fieldsets.from_fields_v1(fieldsets.to_fields_v1(paths)) == paths


@given(DATA, DATA, st.booleans())
def test_fields_v1_in_one_walk_is_the_set_of_leaves(data: dict[str, str], labels: dict[str, str], pod: bool) -> None:
    if pod:
        obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": labels},
               "spec": {"containers": [{"name": k, "image": v, "ports": [{"containerPort": 80}]}
                                       for k, v in data.items()], "tolerations": [{"key": "k"}]}}
        t = fieldsets.for_resource(PODS)
    else:
        obj, t = cm(data, labels), fieldsets.for_resource(CONFIGMAPS)
    assert fieldsets.fields_v1(obj, t) == fieldsets.to_fields_v1(fieldsets.leaves(obj, t))


def test_pod_fields_follow_the_schema() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "uid": "u", "labels": {"a": "b"}},
           "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80, "protocol": "TCP"}]}],
                    "tolerations": [{"key": "k"}]}, "status": {"phase": "Running"}}
    tree = fieldsets.to_fields_v1(fieldsets.leaves(pod, fieldsets.for_resource(PODS)))
    assert tree == {"f:metadata": {"f:labels": {"f:a": {}}},
                    "f:spec": {"f:containers": {'k:{"name":"c"}': {
                        ".": {}, "f:image": {}, "f:name": {},
                        "f:ports": {'k:{"containerPort":80,"protocol":"TCP"}': {
                            ".": {}, "f:containerPort": {}, "f:protocol": {}}}}},
                        "f:tolerations": {}}}  # tolerations: atomic (no list type in the schema)
    status = fieldsets.leaves(pod, fieldsets.for_resource(PODS), "status")
    assert list(status) == [("f:status", "f:phase")]


@given(DATA, DATA)
def test_apply_is_idempotent_and_owns_exactly_its_config(first: dict[str, str], second: dict[str, str]) -> None:
    live = applied(None, cm(first), "m")
    again = applied(live, cm(second), "m")
    assert again["data"] == second  # what it owned and left out is gone
    twice = applied(again, cm(second), "m")
    assert twice["data"] == second
    assert owners(twice) == {"m": data_paths(second)}


@given(DATA, DATA, st.booleans())
def test_conflicts_are_exactly_the_differing_values(mine: dict[str, str], theirs: dict[str, str], force: bool) -> None:
    live = applied(None, cm(mine), "a")
    differing = sorted(k for k in theirs if k in mine and mine[k] != theirs[k])
    if differing and not force:
        with pytest.raises(apply.ApplyConflict) as err:
            applied(live, cm(theirs), "b")
        causes = err.value.status()["details"]["causes"]
        assert [c["field"] for c in causes] == [f".data.{k}" for k in differing]
        assert all(c["message"] == 'conflict with "a" using v1' for c in causes)
        assert err.value.code == 409
        return
    out = applied(live, cm(theirs), "b", force=force)
    assert out["data"] == {**mine, **theirs}
    got = owners(out)
    assert got["b"] == data_paths(theirs)
    kept_by_a = {("f:data", "f:" + k) for k in mine if k not in differing} or (
        {("f:data",)} if not mine else set())
    assert got.get("a", set()) == kept_by_a


def test_an_update_takes_the_fields_it_changes() -> None:
    live = applied(None, cm({"x": "1", "y": "2"}, {"team": "a"}), "applier")
    new = copy.deepcopy(live)
    new["data"]["x"] = "9"
    del new["data"]["y"]
    new["data"]["z"] = "3"
    apply.track_update(CONFIGMAPS, live, new, apply.Manager("editor", "Update", "v1"))
    got = owners(new)
    assert got["applier"] == {("f:metadata", "f:labels", "f:team")}
    assert got["editor"] == {("f:data", "f:x"), ("f:data", "f:z")}
    # `managedFields: [{}]` clears them
    cleared = copy.deepcopy(new)
    cleared["metadata"]["managedFields"] = [{}]
    apply.track_update(CONFIGMAPS, new, cleared, apply.Manager("editor", "Update", "v1"))
    assert "managedFields" not in cleared["metadata"]


def test_containers_merge_by_name_and_a_dropped_container_goes() -> None:
    mgr = apply.Manager("m", "Apply", "v1")
    two = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}}
    live = apply.created(PODS, two, mgr)
    live["spec"]["containers"][0]["imagePullPolicy"] = "IfNotPresent"  # a default nobody applied
    one = copy.deepcopy(two)
    one["spec"]["containers"] = [{"name": "a", "image": "2"}]
    out = apply.apply(PODS, live, one, mgr, False)
    assert out["spec"]["containers"] == [{"name": "a", "image": "2", "imagePullPolicy": "IfNotPresent"}]
    assert live["spec"]["containers"][1] == {"name": "b", "image": "1"}  # the live object is untouched


def test_apply_needs_a_field_manager_and_a_matching_body() -> None:
    with pytest.raises(apply.Invalid) as err:
        apply.apply_manager(CONFIGMAPS, "")
    assert err.value.code == 422 and "fieldManager" in str(err.value)
    with pytest.raises(apply.BadRequest, match="kind must be set"):
        apply.decode_config(b"apiVersion: v1\nmetadata: {name: c}\n", CONFIGMAPS, "c")
    with pytest.raises(apply.BadRequest, match=r"does not match the name on the URL \(c\)"):
        apply.decode_config(b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: d}\n", CONFIGMAPS, "c")
