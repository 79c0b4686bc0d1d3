"""Pure pieces of the sim-cluster, without HTTP: store and watch rules, selectors, patches, tables."""

from __future__ import annotations

import pytest
import trio

from simcluster import objects, tables
from simcluster.errors import BadRequest, Expired, Invalid
from simcluster.patch import apply_patch, json_patch, merge_patch, strategic_merge
from simcluster.resources import BUCKETS, NODES, PODS
from simcluster.selectors import parse_field_selector, parse_label_selector
from simcluster.store import Store


def obj(name: str, ns: str = "default", **labels: str) -> dict:
    return {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {}, "status": {"phase": "Pending"}}


def test_label_selectors() -> None:
    m = parse_label_selector("app=web,tier!=db,env in (a, b),!legacy,owner")
    assert m is not None
    assert m(obj("x", app="web", env="a", owner="me"))
    assert not m(obj("x", app="web", env="c", owner="me"))
    assert not m(obj("x", app="web", env="a", owner="me", legacy="1"))
    assert not m(obj("x", app="web", env="a"))
    assert parse_label_selector("") is None
    with pytest.raises(BadRequest):
        parse_label_selector("bad key!=x")


def test_field_selectors() -> None:
    m = parse_field_selector("status.phase!=Succeeded,metadata.name==x", PODS.field_labels, "Pod")
    assert m is not None and m(obj("x")) and not m(obj("y"))
    with pytest.raises(BadRequest, match="field label not supported: spec.nope"):
        parse_field_selector("spec.nope=1", PODS.field_labels, "Pod")


async def test_store_versions_history_and_watch_rules() -> None:
    store = Store(BUCKETS, history_size=3)
    store.create("pods", obj("a"))
    store.create("pods", obj("b", app="x"))
    assert store.rv == 2
    initial, w = store.watch("pods", "default", parse_label_selector("app=x"), None, None)
    assert [c.obj["metadata"]["name"] for c in initial] == ["b"]  # synthetic ADDED of current matches
    new_a = obj("a", app="x")
    store.replace("pods", new_a)  # a enters the selector: ADDED
    last = store.delete("pods", "default", "b")  # DELETED with the last state
    assert last["metadata"]["resourceVersion"] == "4" and last["metadata"]["labels"] == {"app": "x"}
    seen = [w.receive.receive_nowait() for _ in range(2)]
    assert [(c.type, c.obj["metadata"]["name"]) for c in seen] == [("ADDED", "a"), ("DELETED", "b")]
    store.create("pods", obj("c"))
    store.create("pods", obj("d"))  # history now holds rv 4..6 only
    with pytest.raises(Expired, match=r"too old resource version: 2 \(3\)"):
        store.watch("pods", None, None, None, 2)
    replay, _ = store.watch("pods", None, None, None, 3)
    assert [c.rv for c in replay] == [4, 5, 6]
    items, last_key, remaining = store.list("pods", limit=1)
    assert [i["metadata"]["name"] for i in items] == ["a"] and last_key == ("default", "a") and remaining == 2


async def test_slow_watcher_is_closed() -> None:
    store = Store(BUCKETS, queue_size=2)
    _, w = store.watch("pods", None, None, None, None)
    for name in "abc":
        store.create("pods", obj(name))
    assert w.overflowed
    assert w.receive.receive_nowait().obj["metadata"]["name"] == "a"
    w.receive.receive_nowait()
    with pytest.raises(trio.EndOfChannel):
        w.receive.receive_nowait()


def test_strategic_merge_merges_conditions_by_type() -> None:
    target = {"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]},
              "metadata": {"finalizers": ["a"]}}
    patch = {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"},
                                       {"type": "Ready", "$patch": "delete"}]},
             "metadata": {"finalizers": ["b", "a"]}}
    out = strategic_merge(target, patch)
    assert out["status"]["conditions"] == [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    assert out["metadata"]["finalizers"] == ["a", "b"]
    assert merge_patch(target, patch)["status"]["conditions"] == patch["status"]["conditions"]  # merge replaces lists
    assert target["status"]["conditions"][0]["type"] == "Ready"  # arguments are not mutated


def test_strategic_merge_replaces_node_taints() -> None:
    """As kubectl taint sends it: the whole new list (NodeSpec.taints has no patch strategy)."""
    a = {"key": "a", "value": "1", "effect": "NoSchedule"}
    target = {"spec": {"taints": [a, {"key": "b", "value": "2", "effect": "NoSchedule"}]}}
    assert strategic_merge(target, {"spec": {"taints": [a]}}) == {"spec": {"taints": [a]}}
    both = [{**a, "effect": "NoExecute"}, a]
    assert strategic_merge({"spec": {"taints": [a]}}, {"spec": {"taints": both}}) == {
        "spec": {"taints": both}}


def test_json_patch() -> None:
    doc = {"a": {"b": [1, 2]}}
    out = json_patch(doc, [{"op": "add", "path": "/a/b/-", "value": 3}, {"op": "replace", "path": "/a/b/0", "value": 0},
                           {"op": "test", "path": "/a/b/1", "value": 2}, {"op": "remove", "path": "/a/b/1"},
                           {"op": "copy", "from": "/a/b", "path": "/c"}])
    assert out == {"a": {"b": [0, 3]}, "c": [0, 3]} and doc == {"a": {"b": [1, 2]}}
    with pytest.raises(Invalid):
        json_patch(doc, [{"op": "test", "path": "/a/b/0", "value": 9}])
    with pytest.raises(Exception, match="server-side apply"):
        apply_patch("application/apply-patch+yaml", doc, {})


def test_json_patch_errors_are_the_apiservers() -> None:
    """A patch that does not decode is a 400; one that does not apply a 422 naming the path (and
    never echoing the document)."""
    doc = {"a": {"b": [1, 2]}, "secret": "s3"}
    with pytest.raises(BadRequest):
        json_patch(doc, [{"op": "add", "path": "a", "value": 1}])
    with pytest.raises(BadRequest):
        json_patch(doc, [{"path": "/a"}])
    for ops in ([{"op": "replace", "path": "/x", "value": 1}], [{"op": "add", "path": "/q/r", "value": 1}],
                [{"op": "add", "path": "/a/b/9", "value": 1}]):
        with pytest.raises(Invalid) as info:
            json_patch(doc, ops)
        assert ops[0]["path"] in info.value.message and "s3" not in info.value.message


def test_pod_validation_names_every_bad_field() -> None:
    body = {"metadata": {"name": "Bad_Name"}, "spec": {"containers": [
        {"name": "c", "image": "i", "resources": {"requests": {"cpu": "2", "memory": "x1"}, "limits": {"cpu": "1"}}},
        {"name": "c"}]}}
    with pytest.raises(Invalid) as info:
        objects.prepare_create(PODS, body, "default")
    fields = [c["field"] for c in info.value.details["causes"]]
    assert fields == ["metadata.name", "spec.containers[0].resources.requests[memory]",
                      "spec.containers[0].resources.requests", "spec.containers[1].name", "spec.containers[1].image"]


def test_pod_defaults() -> None:
    pod = objects.prepare_create(PODS, {"metadata": {"generateName": "p-", "uid": "mine"}, "spec": {"containers": [
        {"name": "c", "image": "i", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}}, "ns1")
    assert pod["metadata"]["name"].startswith("p-") and len(pod["metadata"]["name"]) == 7
    assert pod["metadata"]["uid"] != "mine" and pod["metadata"]["namespace"] == "ns1"
    assert pod["status"] == {"phase": "Pending", "qosClass": "Guaranteed"}
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert pod["spec"]["schedulerName"] == "default-scheduler"
    node = objects.prepare_create(NODES, {"metadata": {"name": "n1"}}, "", "8", "32Gi")
    assert node["status"]["allocatable"]["cpu"] == "8" and "namespace" not in node["metadata"]


@pytest.mark.parametrize("seconds,text", [(5, "5s"), (119, "119s"), (125, "2m5s"), (600, "10m"), (3 * 3600, "3h"),
                                          (3 * 3600 + 600, "3h10m"), (9 * 3600, "9h"), (50 * 3600, "2d2h"),
                                          (400 * 86400, "400d"), (800 * 86400, "2y70d")])
def test_human_duration(seconds: int, text: str) -> None:
    assert tables.human_duration(seconds) == text
