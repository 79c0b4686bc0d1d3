"""Finalizers, ownerReferences and the garbage collector of a live `ykshm sim-cluster`, driven by
real kubectl: `kubectl delete --cascade=background|foreground|orphan` on owner chains
Job -> ProcessingElement -> Pod and Job -> ConfigMap (custom and built-in kinds mixed).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import trio
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simcluster import protobuf
from simcluster.api import Api
from simcluster.resources import BUCKETS, CONFIGMAPS, NAMESPACES
from simcluster.store import Store
from tests.simcluster.test_simcluster import kubectl
from tests.simcluster.test_simcluster_crd import cluster, next_events, ok  # noqa: F401 - `cluster` is a fixture

STREAMS = "/apis/streams.ibm.com/v1/namespaces"


def apply(cluster: str, home: Path, *docs: dict) -> None:
    path = home / "objects.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    ok(kubectl(cluster, home, "create", "-f", str(path)))


def get(cluster: str, home: Path, kind: str, name: str, ns: str = "default") -> dict | None:
    out = kubectl(cluster, home, "get", kind, name, *(("-n", ns) if ns else ()), "-o", "json")
    if out.returncode != 0:
        assert "NotFound" in out.stderr, out.stderr
        return None
    return json.loads(out.stdout)


def ref(obj: dict, block: bool = True, controller: bool = True) -> dict:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": controller, "blockOwnerDeletion": block}


def make_chain(cluster: str, home: Path, job: str, ns: str = "default", pod_finalizer: str | None = None) -> dict:
    """Job -> {PE -> Pod, ConfigMap}; returns the objects by kind."""
    if get(cluster, home, "namespace", ns, "") is None:
        ok(kubectl(cluster, home, "create", "namespace", ns))
    apply(cluster, home, {"apiVersion": "streams.ibm.com/v1", "kind": "Job",
                          "metadata": {"name": job, "namespace": ns}, "spec": {"bundle": {"name": "b.sab"}}})
    j = get(cluster, home, "stj", job, ns)
    assert j is not None
    apply(cluster, home,
          {"apiVersion": "streams.ibm.com/v1", "kind": "ProcessingElement",
           "metadata": {"name": f"{job}-0", "namespace": ns, "ownerReferences": [ref(j)]},
           "spec": {"jobName": job, "id": 0}},
          {"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": f"{job}-0-aadl", "namespace": ns, "ownerReferences": [ref(j)]},
           "data": {"aadl": "<aadl/>"}})
    pe = get(cluster, home, "stp", f"{job}-0", ns)
    assert pe is not None
    meta: dict = {"name": f"{job}-0-x7k2p", "namespace": ns, "ownerReferences": [ref(pe)]}
    if pod_finalizer:
        meta["finalizers"] = [pod_finalizer]
    apply(cluster, home, {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                          "spec": {"containers": [{"name": "pe", "image": "streams-runtime"}]}})
    return {"job": j, "pe": pe, "cm": get(cluster, home, "cm", f"{job}-0-aadl", ns),
            "pod": get(cluster, home, "pod", f"{job}-0-x7k2p", ns)}


CHAIN = (("stp", "{}-0"), ("cm", "{}-0-aadl"), ("pod", "{}-0-x7k2p"))


async def wait_gone(cluster: str, home: Path, job: str, ns: str = "default") -> None:
    with trio.fail_after(5):
        while any(get(cluster, home, kind, name.format(job), ns) is not None for kind, name in CHAIN):
            await trio.sleep(0.05)


# -- the three cascades -----------------------------------------------------------------------------

async def test_background_removes_the_owner_now_and_its_dependents_after(cluster: str, tmp_path: Path) -> None:
    make_chain(cluster, tmp_path, "bg")
    bystander = make_chain(cluster, tmp_path, "bystander")
    assert ok(kubectl(cluster, tmp_path, "delete", "stj", "bg", "--cascade=background", "--wait=false")) == \
        'job.streams.ibm.com "bg" deleted\n'
    assert get(cluster, tmp_path, "stj", "bg") is None
    await wait_gone(cluster, tmp_path, "bg")
    for kind, name in CHAIN:  # another job's objects are untouched
        obj = get(cluster, tmp_path, kind, name.format("bystander"))
        assert obj is not None and "deletionTimestamp" not in obj["metadata"]
    ok(kubectl(cluster, tmp_path, "delete", "stj", "bystander"))  # the default is background too
    await wait_gone(cluster, tmp_path, "bystander")
    assert bystander["job"]["metadata"]["uid"]


async def test_foreground_keeps_the_owner_until_blocking_dependents_are_gone(cluster: str, tmp_path: Path) -> None:
    chain = make_chain(cluster, tmp_path, "fg", pod_finalizer="test.ykshm.io/hold")
    async with httpx.AsyncClient(base_url=cluster, timeout=10) as client:
        async with client.stream("GET", f"{STREAMS}/default/streamsjobs",
                                 params={"watch": "1", "fieldSelector": "metadata.name=fg",
                                         "resourceVersion": chain["pod"]["metadata"]["resourceVersion"]}) as watch:
            lines = watch.aiter_lines()
            ok(kubectl(cluster, tmp_path, "delete", "stj", "fg", "--cascade=foreground", "--wait=false"))
            (modified,) = await next_events(lines, 1)
            assert modified["type"] == "MODIFIED"
            meta = modified["object"]["metadata"]
            assert meta["deletionTimestamp"] and meta["finalizers"] == ["foregroundDeletion"]
            assert meta["generation"] == 2
            with trio.fail_after(5):  # the pod's finalizer holds the pod, so the PE, so the job
                while True:
                    pe, pod = get(cluster, tmp_path, "stp", "fg-0"), get(cluster, tmp_path, "pod", "fg-0-x7k2p")
                    if get(cluster, tmp_path, "cm", "fg-0-aadl") is None and pe and "deletionTimestamp" in pe["metadata"] \
                            and pod and "deletionTimestamp" in pod["metadata"]:
                        break
                    await trio.sleep(0.05)
            assert pe["metadata"]["finalizers"] == ["foregroundDeletion"]
            assert pod["metadata"]["finalizers"] == ["test.ykshm.io/hold"]
            job = get(cluster, tmp_path, "stj", "fg")
            assert job is not None and job["metadata"]["finalizers"] == ["foregroundDeletion"]
            ok(kubectl(cluster, tmp_path, "patch", "pod", "fg-0-x7k2p", "--type=json",
                       "-p", '[{"op":"remove","path":"/metadata/finalizers"}]'))
            (deleted,) = await next_events(lines, 1)
            assert deleted["type"] == "DELETED" and deleted["object"]["metadata"]["name"] == "fg"
    await wait_gone(cluster, tmp_path, "fg")


async def test_foreground_does_not_wait_for_non_blocking_dependents(cluster: str, tmp_path: Path) -> None:
    job = make_chain(cluster, tmp_path, "nb")["job"]
    apply(cluster, tmp_path, {"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": "nb-loose", "ownerReferences": [ref(job, block=False, controller=False)],
                                           "finalizers": ["test.ykshm.io/hold"]}})
    ok(kubectl(cluster, tmp_path, "delete", "stj", "nb", "--cascade=foreground"))  # waits for the job to go
    assert get(cluster, tmp_path, "stj", "nb") is None
    loose = get(cluster, tmp_path, "cm", "nb-loose")
    assert loose is not None and loose["metadata"]["deletionTimestamp"]
    ok(kubectl(cluster, tmp_path, "patch", "cm", "nb-loose", "--type=merge", "-p", '{"metadata":{"finalizers":null}}'))
    assert get(cluster, tmp_path, "cm", "nb-loose") is None


async def test_orphan_removes_the_owner_and_keeps_dependents_without_its_reference(cluster: str, tmp_path: Path) -> None:
    chain = make_chain(cluster, tmp_path, "or")
    ok(kubectl(cluster, tmp_path, "delete", "stj", "or", "--cascade=orphan"))
    assert get(cluster, tmp_path, "stj", "or") is None
    pe, cm, pod = (get(cluster, tmp_path, k, n.format("or")) for k, n in CHAIN)
    assert pe is not None and cm is not None and pod is not None
    assert "ownerReferences" not in pe["metadata"] and "ownerReferences" not in cm["metadata"]
    assert "deletionTimestamp" not in pe["metadata"]
    assert pod["metadata"]["ownerReferences"] == [ref(chain["pe"])]  # the PE still owns its pod
    ok(kubectl(cluster, tmp_path, "delete", "stp", "or-0"))
    with trio.fail_after(5):
        while get(cluster, tmp_path, "pod", "or-0-x7k2p") is not None:
            await trio.sleep(0.05)
    assert get(cluster, tmp_path, "cm", "or-0-aadl") is not None


# -- owners and finalizers --------------------------------------------------------------------------

async def test_dependents_of_missing_owners_are_collected(cluster: str, tmp_path: Path) -> None:
    keeper = make_chain(cluster, tmp_path, "keeper")["job"]
    ghost = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ghost", "uid": "0000-gone"}}
    apply(cluster, tmp_path,
          {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "orphaned", "ownerReferences": [ref(ghost)]}},
          {"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "shared", "ownerReferences": [ref(ghost, controller=False), ref(keeper)]}})
    with trio.fail_after(5):
        while get(cluster, tmp_path, "cm", "orphaned") is not None:
            await trio.sleep(0.05)
        while True:
            shared = get(cluster, tmp_path, "cm", "shared")
            assert shared is not None  # a live owner keeps it
            if shared["metadata"]["ownerReferences"] == [ref(keeper)]:
                break  # and the reference to the missing owner is removed
            await trio.sleep(0.05)


async def test_finalizers_keep_an_object_until_an_update_empties_them(cluster: str) -> None:
    async with httpx.AsyncClient(base_url=cluster, timeout=10) as client:
        base = "/api/v1/namespaces/default/configmaps"
        r = await client.post(base, json={"metadata": {"name": "held", "finalizers": ["a.io/x", "b.io/y"]}})
        assert r.status_code == 201
        async with client.stream("GET", base, params={"watch": "1", "fieldSelector": "metadata.name=held",
                                                      "resourceVersion": r.json()["metadata"]["resourceVersion"]}) as w:
            lines = w.aiter_lines()
            r = await client.delete(f"{base}/held")
            assert r.status_code == 200 and r.json()["kind"] == "ConfigMap"  # the object, still there
            assert r.json()["metadata"]["deletionTimestamp"]
            (ev,) = await next_events(lines, 1)
            assert ev["type"] == "MODIFIED" and ev["object"]["metadata"]["deletionTimestamp"]
            merge = {"content-type": "application/merge-patch+json"}
            r = await client.patch(f"{base}/held", headers=merge,
                                   content=json.dumps({"metadata": {"finalizers": ["a.io/x", "b.io/y", "c.io/z"]}}))
            assert r.status_code == 422
            assert r.json()["details"]["causes"][0]["field"] == "metadata.finalizers"
            r = await client.patch(f"{base}/held", headers=merge, content=json.dumps({"metadata": {"finalizers": ["b.io/y"]}}))
            assert r.status_code == 200
            (ev,) = await next_events(lines, 1)
            assert ev["type"] == "MODIFIED" and ev["object"]["metadata"]["finalizers"] == ["b.io/y"]
            assert (await client.delete(f"{base}/held")).status_code == 200  # deleting again changes nothing
            r = await client.patch(f"{base}/held", headers=merge, content=json.dumps({"metadata": {"finalizers": []}}))
            assert r.status_code == 200
            (ev,) = await next_events(lines, 1)
            assert ev["type"] == "DELETED" and ev["object"]["metadata"]["deletionTimestamp"]
        assert (await client.get(f"{base}/held")).status_code == 404


async def test_propagation_policy_errors_and_orphan_dependents(cluster: str, tmp_path: Path) -> None:
    chain = make_chain(cluster, tmp_path, "legacy")
    async with httpx.AsyncClient(base_url=cluster, timeout=10) as client:
        r = await client.request("DELETE", f"{STREAMS}/default/streamsjobs/legacy",
                                 json={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Sideways"})
        assert r.status_code == 400 and 'Unsupported value: "Sideways"' in r.json()["message"]
        r = await client.request("DELETE", f"{STREAMS}/default/streamsjobs/legacy",
                                 json={"kind": "DeleteOptions", "apiVersion": "v1", "orphanDependents": True})
        assert r.status_code == 200
    with trio.fail_after(5):
        while get(cluster, tmp_path, "stj", "legacy") is not None:
            await trio.sleep(0.05)
    pe = get(cluster, tmp_path, "stp", "legacy-0")
    assert pe is not None and "ownerReferences" not in pe["metadata"]
    assert chain["pe"]["metadata"]["uid"] == pe["metadata"]["uid"]


async def test_namespace_deletion_takes_custom_resources(cluster: str, tmp_path: Path) -> None:
    make_chain(cluster, tmp_path, "nsjob", ns="doomed")
    ok(kubectl(cluster, tmp_path, "delete", "namespace", "doomed"))
    assert get(cluster, tmp_path, "stj", "nsjob", "doomed") is None
    await wait_gone(cluster, tmp_path, "nsjob", "doomed")


def test_protobuf_delete_options_carry_the_policy() -> None:
    def field(number: int, payload: bytes) -> bytes:
        return bytes([(number << 3) | 2, len(payload)]) + payload

    options = field(4, b"Foreground") + bytes([3 << 3, 1]) + field(5, b"All")
    body = protobuf.MAGIC + field(1, field(1, b"v1") + field(2, b"DeleteOptions")) + field(2, options)
    assert protobuf.decode_delete_options(body) == {"propagationPolicy": "Foreground", "orphanDependents": True,
                                                    "dryRun": ["All"]}


# -- the collector against a model, in process ------------------------------------------------------

@settings(max_examples=80, deadline=None)
@given(owners=st.lists(st.lists(st.integers(0, 30), max_size=3), min_size=1, max_size=12),
       target=st.integers(0, 11), policy=st.sampled_from(["Background", "Foreground", "Orphan"]))
async def test_collector_matches_the_model_on_random_owner_graphs(owners: list[list[int]], target: int,
                                                                  policy: str) -> None:
    """Objects 0..n-1, each owned by some earlier ones; delete one: Orphan removes it alone and its
    dependents forget it; Background and Foreground remove it and, transitively, every object all
    of whose owners are removed; survivors keep references to surviving owners only."""
    api = Api(Store(BUCKETS))
    api.create_object(NAMESPACES, "", {"metadata": {"name": "default"}})
    target %= len(owners)
    graph = [sorted({o % i for o in os}) if i else [] for i, os in enumerate(owners)]
    uids: list[str] = []
    for i, parents in enumerate(graph):
        refs = [{"apiVersion": "v1", "kind": "ConfigMap", "name": f"o{p}", "uid": uids[p], "blockOwnerDeletion": True}
                for p in parents]
        uids.append(api.create_object(CONFIGMAPS, "default",
                                      {"metadata": {"name": f"o{i}", "ownerReferences": refs}})["metadata"]["uid"])
    api.gc.process()
    api.delete_object(CONFIGMAPS, "default", f"o{target}", policy)
    for _ in range(100):
        api.gc.process()
        if api.gc.idle:
            break
    assert api.gc.idle
    removed = {target}
    if policy != "Orphan":
        for i, parents in enumerate(graph):
            if parents and all(p in removed for p in parents):
                removed.add(i)
    left = {int(o["metadata"]["name"][1:]): o for o in api.store.list("configmaps", "default")[0]
            if o["metadata"]["name"] != "kube-root-ca.crt"}  # every namespace has it
    assert set(left) == set(range(len(graph))) - removed
    for i, obj in left.items():
        assert "deletionTimestamp" not in obj["metadata"]
        kept = [r["name"] for r in obj["metadata"].get("ownerReferences") or []]
        assert kept == [f"o{p}" for p in graph[i] if p not in removed]
