"""`ykshm sim-cluster` as a real subprocess: the list/watch protocol, binding, kubelet, errors, kubectl.

Each fixture starts `python -m tools.cli sim-cluster --port 0 ...`, reads the
`sim-cluster listening on http://127.0.0.1:P` line, and stops the process by pid afterwards.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trio

ROOT = Path(__file__).resolve().parents[2]
BINDING = {"apiVersion": "v1", "kind": "Binding", "target": {"kind": "Node"}}


def start_cluster(*flags: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tools.cli", "sim-cluster", "--port", "0", *flags],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("sim-cluster listening on "):
        proc.kill()
        _, err = proc.communicate(timeout=5)
        raise AssertionError(f"sim-cluster did not start: {line!r} {err!r}")
    return proc, line.split()[-1]


def raw_exchange(url: str, raw: bytes) -> bytes:
    """Send `raw` bytes to sim-cluster at `url`, half-close, and return everything it answers."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as s:
        s.sendall(raw)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def stop_cluster(proc: subprocess.Popen[str]) -> int:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
    if proc.stdout:
        proc.stdout.close()
    if proc.stderr:
        proc.stderr.close()
    return proc.returncode


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    proc, url = start_cluster("--nodes", "4", "--kubelet-delay", "0.1", "--bookmark-interval", "0.5")
    try:
        yield url
    finally:
        stop_cluster(proc)


@pytest.fixture
def small_history() -> Iterator[str]:
    proc, url = start_cluster("--watch-history", "5")
    try:
        yield url
    finally:
        stop_cluster(proc)


def pod(name: str, **annotations: str) -> dict:
    meta: dict = {"name": name, "labels": {"app": name.split("-")[0]}}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"schedulerName": "yunikorn", "restartPolicy": "Never",
                     "containers": [{"name": "c", "image": "pause",
                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}


def assert_status(body: dict, code: int, reason: str) -> None:
    assert body["kind"] == "Status" and body["apiVersion"] == "v1"
    assert body["metadata"] == {} and body["status"] == "Failure"
    assert body["code"] == code and body["reason"] == reason
    assert isinstance(body["message"], str) and body["message"]


async def make_namespace(client: httpx.AsyncClient, name: str) -> None:
    r = await client.post("/api/v1/namespaces", json={"metadata": {"name": name}})
    assert r.status_code == 201, r.text


async def read_events(response: httpx.Response, count: int, timeout: float = 5.0) -> list[dict]:
    events = []
    with trio.fail_after(timeout):
        async for line in response.aiter_lines():
            if line.strip():
                events.append(json.loads(line))
                if len(events) == count:
                    break
    return events


# -- list ------------------------------------------------------------------------------------------

async def test_list_paging_with_continue(cluster: str) -> None:
    async with httpx.AsyncClient(base_url=cluster) as client:
        await make_namespace(client, "paging")
        for i in range(7):
            r = await client.post("/api/v1/namespaces/paging/pods", json=pod(f"p-{i}"))
            assert r.status_code == 201
        names, token, rvs = [], None, set()
        while True:
            params = {"limit": "3", **({"continue": token} if token else {})}
            r = await client.get("/api/v1/namespaces/paging/pods", params=params)
            assert r.status_code == 200
            body = r.json()
            assert body["kind"] == "PodList"
            rvs.add(body["metadata"]["resourceVersion"])
            names += [p["metadata"]["name"] for p in body["items"]]
            token = body["metadata"].get("continue")
            if not token:
                break
            assert body["metadata"]["remainingItemCount"] == 7 - len(names)
        assert names == [f"p-{i}" for i in range(7)]
        assert len(rvs) == 1  # every page reports the first page's resourceVersion
        r = await client.get("/api/v1/pods", params={"fieldSelector": "metadata.namespace=paging,metadata.name!=p-0",
                                                     "labelSelector": "app=p"})
        assert len(r.json()["items"]) == 6
        r = await client.get("/api/v1/pods", params={"labelSelector": "app in (p, q),app notin (z)"})
        assert {p["metadata"]["name"] for p in r.json()["items"]} >= {f"p-{i}" for i in range(7)}
        r = await client.get("/api/v1/pods", params={"fieldSelector": "spec.bogus=1"})
        assert r.status_code == 400
        assert_status(r.json(), 400, "BadRequest")


async def test_field_selector_node_and_scheduler(cluster: str) -> None:
    async with httpx.AsyncClient(base_url=cluster) as client:
        await make_namespace(client, "fsel")
        for i in range(3):
            await client.post("/api/v1/namespaces/fsel/pods", json=pod(f"f-{i}"))
        r = await client.post("/api/v1/namespaces/fsel/pods/f-1/binding",
                              json={**BINDING, "metadata": {"name": "f-1"}, "target": {"kind": "Node", "name": "node-0002"}})
        assert r.status_code == 201
        r = await client.get("/api/v1/namespaces/fsel/pods", params={"fieldSelector": "spec.nodeName=node-0002"})
        assert [p["metadata"]["name"] for p in r.json()["items"]] == ["f-1"]
        r = await client.get("/api/v1/namespaces/fsel/pods",
                             params={"fieldSelector": "spec.schedulerName=yunikorn,spec.nodeName="})
        assert [p["metadata"]["name"] for p in r.json()["items"]] == ["f-0", "f-2"]
        r = await client.get("/api/v1/namespaces/fsel/pods", params={"fieldSelector": "status.phase==Pending"})
        assert {p["metadata"]["name"] for p in r.json()["items"]} >= {"f-0", "f-2"}


# -- watch -----------------------------------------------------------------------------------------

async def test_watch_added_modified_deleted(cluster: str) -> None:
    async with httpx.AsyncClient(base_url=cluster, timeout=10) as client:
        await make_namespace(client, "watching")
        r = await client.get("/api/v1/namespaces/watching/pods")
        rv = r.json()["metadata"]["resourceVersion"]
        params = {"watch": "1", "resourceVersion": rv, "timeoutSeconds": "10"}
        async with client.stream("GET", "/api/v1/namespaces/watching/pods", params=params) as stream:
            assert stream.status_code == 200
            r = await client.post("/api/v1/namespaces/watching/pods", json=pod("w-1"))
            assert r.status_code == 201
            r = await client.patch("/api/v1/namespaces/watching/pods/w-1", json={"metadata": {"labels": {"x": "y"}}},
                                   headers={"Content-Type": "application/merge-patch+json"})
            assert r.status_code == 200 and r.json()["metadata"]["labels"] == {"app": "w", "x": "y"}
            r = await client.delete("/api/v1/namespaces/watching/pods/w-1")
            assert r.status_code == 200
            events = await read_events(stream, 3)
        assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]
        rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
        assert rvs == sorted(rvs) and rvs[0] > int(rv)
        assert events[2]["object"]["metadata"]["labels"] == {"app": "w", "x": "y"}  # the last state
        assert events[2]["object"]["metadata"]["uid"] == events[0]["object"]["metadata"]["uid"]

        # resuming from the ADDED event's version replays what came after, in order
        params = {"watch": "true", "resourceVersion": str(rvs[0]), "timeoutSeconds": "5"}
        async with client.stream("GET", "/api/v1/namespaces/watching/pods", params=params) as stream:
            replay = await read_events(stream, 2)
        assert [e["type"] for e in replay] == ["MODIFIED", "DELETED"]


async def test_watch_from_zero_sends_synthetic_added_and_selector_transitions(cluster: str) -> None:
    async with httpx.AsyncClient(base_url=cluster, timeout=10) as client:
        await make_namespace(client, "trans")
        await client.post("/api/v1/namespaces/trans/pods", json=pod("t-0"))
        params = {"watch": "1", "resourceVersion": "0", "labelSelector": "tier=gold", "timeoutSeconds": "10"}
        async with client.stream("GET", "/api/v1/namespaces/trans/pods", params=params) as stream:
            await client.post("/api/v1/namespaces/trans/pods", json={**pod("t-1"), "metadata": {
                "name": "t-1", "labels": {"tier": "gold"}}})
            # t-0 enters the selector (ADDED), then leaves it (DELETED) while still existing
            await client.patch("/api/v1/namespaces/trans/pods/t-0", json={"metadata": {"labels": {"tier": "gold"}}},
                               headers={"Content-Type": "application/strategic-merge-patch+json"})
            await client.patch("/api/v1/namespaces/trans/pods/t-0", json={"metadata": {"labels": {"tier": None}}},
                               headers={"Content-Type": "application/merge-patch+json"})
            events = await read_events(stream, 3)
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
            ("ADDED", "t-1"), ("ADDED", "t-0"), ("DELETED", "t-0")]


async def test_bookmarks(cluster: str) -> None:
    async with httpx.AsyncClient(base_url=cluster, timeout=10) as client:
        params = {"watch": "1", "resourceVersion": "0", "allowWatchBookmarks": "true", "timeoutSeconds": "10",
                  "fieldSelector": "metadata.name=nothing-here"}
        async with client.stream("GET", "/api/v1/pods", params=params) as stream:
            events = await read_events(stream, 2, timeout=4)
    assert [e["type"] for e in events] == ["BOOKMARK", "BOOKMARK"]
    obj = events[0]["object"]
    assert obj["kind"] == "Pod" and obj["apiVersion"] == "v1"
    assert int(obj["metadata"]["resourceVersion"]) > 0


async def test_watch_timeout_ends_stream(cluster: str) -> None:
    async with httpx.AsyncClient(base_url=cluster, timeout=10) as client:
        with trio.fail_after(5):
            async with client.stream("GET", "/api/v1/nodes", params={"watch": "1", "timeoutSeconds": "1"}) as s:
                lines = [line async for line in s.aiter_lines() if line]
    assert len(lines) == 4 and all(json.loads(x)["type"] == "ADDED" for x in lines)


async def test_watch_too_old_resource_version_is_410(small_history: str) -> None:
    async with httpx.AsyncClient(base_url=small_history, timeout=10) as client:
        for i in range(10):
            r = await client.post("/api/v1/namespaces/default/configmaps",
                                  json={"metadata": {"name": f"cm-{i}"}, "data": {"k": str(i)}})
            assert r.status_code == 201
        async with client.stream("GET", "/api/v1/configmaps", params={"watch": "1", "resourceVersion": "2"}) as s:
            assert s.status_code == 200
            with trio.fail_after(5):
                lines = [line async for line in s.aiter_lines() if line]
        assert len(lines) == 1
        event = json.loads(lines[0])
        assert event["type"] == "ERROR"
        status = event["object"]
        assert_status(status, 410, "Expired")
        assert status["message"].startswith("too old resource version: 2 (")
        # a continue token from before the history is Expired too
        r = await client.get("/api/v1/namespaces/default/configmaps", params={"limit": "2"})
        token = r.json()["metadata"]["continue"]
        for i in range(10, 20):
            await client.post("/api/v1/namespaces/default/configmaps", json={"metadata": {"name": f"cm-{i}"}})
        r = await client.get("/api/v1/namespaces/default/configmaps", params={"limit": "2", "continue": token})
        assert r.status_code == 410
        assert_status(r.json(), 410, "Expired")
        # a resourceVersion from the future (a restarted sim-cluster): 504 Timeout after 3 s, as the cacher
        with trio.fail_after(6):
            r = await client.get("/api/v1/configmaps", params={"watch": "1", "resourceVersion": "999999"})
        assert r.status_code == 504
        assert_status(r.json(), 504, "Timeout")
        assert r.json()["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"


# -- binding and kubelet -----------------------------------------------------------------------------

async def test_binding_then_conflict_and_kubelet_lifecycle(cluster: str) -> None:
    async with httpx.AsyncClient(base_url=cluster, timeout=10) as client:
        await make_namespace(client, "bind")
        r = await client.post("/api/v1/namespaces/bind/pods", json=pod("b-1", **{"ykshm.io/run-seconds": "0.5"}))
        assert r.status_code == 201 and r.json()["status"]["phase"] == "Pending"
        binding = {**BINDING, "metadata": {"name": "b-1"}, "target": {"kind": "Node", "name": "node-0001"}}
        r = await client.post("/api/v1/namespaces/bind/pods/b-1/binding", json=binding)
        assert r.status_code == 201
        assert r.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
        r = await client.post("/api/v1/namespaces/bind/pods/b-1/binding", json=binding)
        assert r.status_code == 409
        assert_status(r.json(), 409, "Conflict")
        assert "already assigned to node" in r.json()["message"]
        r = await client.post("/api/v1/namespaces/bind/pods/nope/binding", json={**binding, "metadata": {"name": "nope"}})
        assert r.status_code == 404

        phases = []
        with trio.fail_after(5):
            while True:
                p = (await client.get("/api/v1/namespaces/bind/pods/b-1")).json()
                phase = p["status"]["phase"]
                if not phases or phases[-1] != phase:
                    phases.append(phase)
                if phase == "Running":
                    assert p["spec"]["nodeName"] == "node-0001"
                    assert p["status"]["podIP"] and p["status"]["startTime"]
                    assert {c["type"]: c["status"] for c in p["status"]["conditions"]}["Ready"] == "True"
                if phase == "Succeeded":
                    break
                await trio.sleep(0.05)
        assert phases == ["Pending", "Running", "Succeeded"]


async def test_status_subresource_and_update_conflict(cluster: str) -> None:
    async with httpx.AsyncClient(base_url=cluster, timeout=10) as client:
        await make_namespace(client, "upd")
        created = (await client.post("/api/v1/namespaces/upd/pods", json=pod("u-1"))).json()
        # a status patch through the subresource; the main resource ignores status
        r = await client.patch("/api/v1/namespaces/upd/pods/u-1/status",
                               json={"status": {"conditions": [{"type": "PodScheduled", "status": "False",
                                                                "reason": "Unschedulable"}]}},
                               headers={"Content-Type": "application/strategic-merge-patch+json"})
        assert r.status_code == 200 and r.json()["status"]["conditions"][0]["reason"] == "Unschedulable"
        r = await client.get("/api/v1/namespaces/upd/pods/u-1/status")
        assert r.status_code == 200 and r.json()["status"]["phase"] == "Pending"
        stale = dict(created)
        stale["metadata"] = {**created["metadata"], "labels": {"v": "2"}}
        r = await client.put("/api/v1/namespaces/upd/pods/u-1", json=stale)
        assert r.status_code == 409
        assert_status(r.json(), 409, "Conflict")
        current = (await client.get("/api/v1/namespaces/upd/pods/u-1")).json()
        current["metadata"]["labels"] = {"v": "2"}
        r = await client.put("/api/v1/namespaces/upd/pods/u-1", json=current)
        assert r.status_code == 200 and r.json()["metadata"]["labels"] == {"v": "2"}
        r = await client.patch("/api/v1/namespaces/upd/pods/u-1",
                               json=[{"op": "add", "path": "/metadata/labels/w", "value": "3"}],
                               headers={"Content-Type": "application/json-patch+json"})
        assert r.status_code == 200 and r.json()["metadata"]["labels"] == {"v": "2", "w": "3"}
        r = await client.post("/api/v1/namespaces/upd/pods", json=pod("u-1"))
        assert r.status_code == 409
        assert_status(r.json(), 409, "AlreadyExists")
        r = await client.post("/api/v1/namespaces/upd/pods", json={**pod("x"), "metadata": {"generateName": "gen-"}})
        assert r.status_code == 201 and r.json()["metadata"]["name"].startswith("gen-")


async def test_events_both_apis(cluster: str) -> None:
    async with httpx.AsyncClient(base_url=cluster, timeout=10) as client:
        ev = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e1"},
              "eventTime": "2026-01-01T00:00:00.000000Z", "reason": "Scheduled", "note": "placed", "type": "Normal",
              "action": "Binding", "reportingController": "yunikorn", "reportingInstance": "yk-1",
              "regarding": {"kind": "Pod", "namespace": "default", "name": "p"}}
        r = await client.post("/apis/events.k8s.io/v1/namespaces/default/events", json=ev)
        assert r.status_code == 201, r.text
        assert r.json()["note"] == "placed"
        core = (await client.get("/api/v1/namespaces/default/events/e1")).json()
        assert core["message"] == "placed" and core["involvedObject"]["name"] == "p"
        r = await client.get("/apis/events.k8s.io/v1/events", params={"fieldSelector": "regarding.name=p"})
        assert [e["metadata"]["name"] for e in r.json()["items"]] == ["e1"]


# -- errors ---------------------------------------------------------------------------------------

async def test_errors_are_well_formed_status(cluster: str) -> None:
    async with httpx.AsyncClient(base_url=cluster, timeout=10) as client:
        r = await client.post("/api/v1/namespaces/default/pods", content=b"{not json",
                              headers={"Content-Type": "application/json"})
        assert r.status_code == 400
        assert_status(r.json(), 400, "BadRequest")

        bad = pod("q-1")
        bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
        r = await client.post("/api/v1/namespaces/default/pods", json=bad)
        assert r.status_code == 422
        body = r.json()
        assert_status(body, 422, "Invalid")
        assert "spec.containers[0].resources.requests[cpu]" in body["message"]
        assert body["details"]["causes"][0]["field"] == "spec.containers[0].resources.requests[cpu]"

        r = await client.post("/api/v1/namespaces/default/pods", json={"metadata": {"name": "nc"}, "spec": {}})
        assert r.status_code == 422 and "spec.containers" in r.json()["message"]
        r = await client.post("/api/v1/namespaces/default/pods", json={"metadata": {}, "spec": pod("a")["spec"]})
        assert r.status_code == 422 and "metadata.name" in r.json()["message"]
        r = await client.post("/api/v1/nodes", json={"metadata": {"name": "n"}, "status": {"capacity": {"memory": "-1"}}})
        assert r.status_code == 422 and "status.capacity[memory]" in r.json()["message"]
        r = await client.post("/api/v1/namespaces/default/pods", json={"kind": "Node", "metadata": {"name": "k"}})
        assert r.status_code == 400

        for path in ("/api/v1/widgets", "/apis/nope.io/v1/things", "/api/v2/pods", "/api/v1/namespaces/default/pods/zz"):
            r = await client.get(path)
            assert r.status_code == 404, path
            assert_status(r.json(), 404, "NotFound")
        r = await client.post("/api/v1/namespaces/missing/pods", json=pod("m"))
        assert r.status_code == 404 and r.json()["message"] == 'namespaces "missing" not found'
        r = await client.put("/api/v1/namespaces/default/pods", json=pod("m"))
        assert r.status_code == 405
        assert_status(r.json(), 405, "MethodNotAllowed")
        r = await client.delete("/api/v1/namespaces/default")
        assert r.status_code == 403
        assert_status(r.json(), 403, "Forbidden")


async def test_discovery_documents(cluster: str) -> None:
    async with httpx.AsyncClient(base_url=cluster, timeout=10) as client:
        assert (await client.get("/api")).json()["versions"] == ["v1"]
        groups = (await client.get("/apis")).json()
        assert groups["kind"] == "APIGroupList" and groups["groups"][0]["name"] == "events.k8s.io"
        core = (await client.get("/api/v1")).json()
        names = {r["name"] for r in core["resources"]}
        assert {"pods", "pods/binding", "pods/status", "nodes", "namespaces", "configmaps", "events"} <= names
        assert (await client.get("/version")).json()["major"] == "1"
        root = (await client.get("/openapi/v3")).json()
        url = root["paths"]["api/v1"]["serverRelativeURL"]
        doc = (await client.get(url)).json()
        patch = doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
        assert any(p["name"] == "fieldValidation" for p in patch["parameters"])
        assert (await client.get("/openapi/v2")).json()["swagger"] == "2.0"


# -- kubectl --------------------------------------------------------------------------------------

def kubectl(cluster: str, home: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "KUBECONFIG": "/dev/null"}
    return subprocess.run(["kubectl", "--server", cluster, *args], env=env, input=stdin, capture_output=True,
                          text=True, timeout=30)


def test_kubectl_defaults(cluster: str, tmp_path: Path) -> None:
    out = kubectl(cluster, tmp_path, "get", "nodes")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[:5] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert "node-0003" in out.stdout and "Ready" in out.stdout

    manifest = tmp_path / "pod.yaml"
    manifest.write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  name: kubectl-pod\nspec:\n  containers:\n"
                        "  - name: c\n    image: nginx\n    resources:\n      requests: {cpu: 250m, memory: 64Mi}\n")
    out = kubectl(cluster, tmp_path, "create", "-f", str(manifest))  # default --validate=strict
    assert out.returncode == 0, out.stderr
    assert "pod/kubectl-pod created" in out.stdout

    out = kubectl(cluster, tmp_path, "get", "pods", "-o", "json")
    assert out.returncode == 0, out.stderr
    items = json.loads(out.stdout)["items"]
    assert [p["metadata"]["name"] for p in items if p["metadata"]["name"] == "kubectl-pod"] == ["kubectl-pod"]

    out = kubectl(cluster, tmp_path, "get", "pods", "-A", "-o", "wide")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[:4] == ["NAMESPACE", "NAME", "READY", "STATUS"]
    assert "kubectl-pod" in out.stdout

    out = kubectl(cluster, tmp_path, "cordon", "node-0003")
    assert out.returncode == 0, out.stderr
    assert "SchedulingDisabled" in kubectl(cluster, tmp_path, "get", "node", "node-0003").stdout

    out = kubectl(cluster, tmp_path, "delete", "pod", "kubectl-pod")
    assert out.returncode == 0, out.stderr
    assert 'pod "kubectl-pod" deleted' in out.stdout
    out = kubectl(cluster, tmp_path, "get", "pod", "kubectl-pod")
    assert out.returncode != 0 and "NotFound" in out.stderr


def test_kubectl_create_invalid_reports_field(cluster: str, tmp_path: Path) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad-pod\nspec:\n  containers:\n"
                        "  - name: c\n    image: nginx\n    resources:\n      limits: {memory: 12zz}\n")
    out = kubectl(cluster, tmp_path, "create", "-f", str(manifest))
    assert out.returncode != 0
    assert "resources.limits[memory]" in out.stderr


def test_kubectl_get_watch(cluster: str, tmp_path: Path) -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "KUBECONFIG": "/dev/null"}
    proc = subprocess.Popen(["kubectl", "--server", cluster, "get", "pods", "-n", "kw", "-w"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with httpx.Client(base_url=cluster) as client:
            assert client.post("/api/v1/namespaces", json={"metadata": {"name": "kw"}}).status_code == 201
            time.sleep(1.0)
            assert client.post("/api/v1/namespaces/kw/pods", json=pod("kw-1")).status_code == 201
            assert client.post("/api/v1/namespaces/kw/pods/kw-1/binding", json={
                **BINDING, "metadata": {"name": "kw-1"}, "target": {"kind": "Node", "name": "node-0000"}}).status_code == 201
            time.sleep(1.5)
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
    lines = [line.split() for line in out.splitlines() if line.strip()]
    assert lines[0][:3] == ["NAME", "READY", "STATUS"]
    assert ["kw-1", "0/1", "Pending"] == lines[1][:3]
    assert any(line[:3] == ["kw-1", "1/1", "Running"] for line in lines[2:])


# -- CLI ------------------------------------------------------------------------------------------

def test_port_in_use_is_one_line_error(cluster: str) -> None:
    port = cluster.rsplit(":", 1)[1]
    out = subprocess.run([sys.executable, "-m", "tools.cli", "sim-cluster", "--port", port], cwd=ROOT,
                         capture_output=True, text=True, timeout=20)
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("ykshm sim-cluster: error: cannot listen on")


def test_bad_flags_and_workload(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "tools.cli", "sim-cluster", "--bind", "0.0.0.0"], cwd=ROOT,
                         capture_output=True, text=True, timeout=20)
    assert out.returncode == 2 and "loopback" in out.stderr
    wl = tmp_path / "wl.yaml"
    wl.write_text("- {name: a, pods: 2, cpu: nonsense}\n")
    out = subprocess.run([sys.executable, "-m", "tools.cli", "sim-cluster", "--workload", str(wl)], cwd=ROOT,
                         capture_output=True, text=True, timeout=20)
    assert out.returncode == 2 and "cpu" in out.stderr and out.stderr.count("\n") == 1


async def test_workload_file_creates_yunikorn_pods(tmp_path: Path) -> None:
    wl = tmp_path / "wl.yaml"
    wl.write_text("- {name: app-a, queue: root.dev, user: alice, groups: [dev], pods: 3, cpu: 200m, memory: 128Mi,"
                  " runSeconds: 30}\n- {name: app-b, pods: 2, startAfter: 0.3}\n")
    proc, url = start_cluster("--workload", str(wl), "--nodes", "1")
    try:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            with trio.fail_after(5):
                while True:
                    items = (await client.get("/api/v1/pods", params={"labelSelector": "applicationId"})).json()["items"]
                    if len(items) == 5:
                        break
                    await trio.sleep(0.1)
        a0 = next(p for p in items if p["metadata"]["name"] == "app-a-0000")
        assert a0["spec"]["schedulerName"] == "yunikorn"
        assert a0["metadata"]["labels"]["queue"] == "root.dev"
        assert json.loads(a0["metadata"]["annotations"]["yunikorn.apache.org/user.info"]) == {
            "user": "alice", "groups": ["dev"]}
        assert a0["metadata"]["annotations"]["ykshm.io/run-seconds"] == "30"
    finally:
        assert stop_cluster(proc) == 0


async def test_field_validation_strict_and_warn(cluster: str) -> None:
    async with httpx.AsyncClient(base_url=cluster, timeout=10) as client:
        body = pod("fv-1")
        body["spec"]["containers"][0]["colour"] = "blue"
        r = await client.post("/api/v1/namespaces/default/pods", params={"fieldValidation": "Strict"}, json=body)
        assert r.status_code == 400
        assert_status(r.json(), 400, "BadRequest")
        assert 'unknown field "spec.containers[0].colour"' in r.json()["message"]
        r = await client.post("/api/v1/namespaces/default/pods", json=body)  # Warn is the default
        assert r.status_code == 201
        assert r.headers["warning"] == '299 - "unknown field \\"spec.containers[0].colour\\""'


async def test_event_expiry(tmp_path: Path) -> None:
    proc, url = start_cluster("--event-ttl", "1")
    try:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            r = await client.post("/api/v1/namespaces/default/events", json={
                "metadata": {"name": "old"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
                "reason": "Test", "message": "m", "type": "Normal"})
            assert r.status_code == 201
            with trio.fail_after(8):
                while (await client.get("/api/v1/namespaces/default/events/old")).status_code == 200:
                    await trio.sleep(0.2)
    finally:
        stop_cluster(proc)


async def test_abrupt_clients_do_not_hurt_the_server(cluster: str) -> None:
    host, port = cluster.removeprefix("http://").split(":")
    # garbage instead of HTTP
    sock = await trio.open_tcp_stream(host, int(port))
    await sock.send_all(b"NOT HTTP AT ALL\r\n\r\n")
    with trio.fail_after(5):
        reply = await sock.receive_some(1024)
    assert reply.startswith(b"HTTP/1.1 400")
    await sock.aclose()
    # a watcher that vanishes while events are flowing
    async with httpx.AsyncClient(base_url=cluster, timeout=10) as client:
        await make_namespace(client, "abrupt")
        raw = await trio.open_tcp_stream(host, int(port))
        await raw.send_all(b"GET /api/v1/namespaces/abrupt/configmaps?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n")
        await raw.receive_some(100)
        for i in range(200):
            r = await client.post("/api/v1/namespaces/abrupt/configmaps", json={"metadata": {"name": f"c{i}"},
                                                                               "data": {"k": "v" * 2000}})
            assert r.status_code == 201
            if i == 50:
                raw.socket.close()
        r = await client.get("/api/v1/namespaces/abrupt/configmaps", params={"limit": "1"})
        # 201 configmaps: the 200 made here and the namespace's kube-root-ca.crt
        assert r.status_code == 200 and r.json()["metadata"]["remainingItemCount"] == 200
        # a request the handler cannot parse is a Status, never a crash
        r = await client.get("/api/v1/pods", params={"limit": "-3"})
        assert r.status_code == 400
        assert_status(r.json(), 400, "BadRequest")
        r = await client.get("/api/v1/pods", params={"watch": "1", "resourceVersion": "abc"})
        assert r.status_code == 400


def test_kubectl_typed_protobuf_writes(cluster: str, tmp_path: Path) -> None:
    # `create namespace/configmap` and `drain` use kubectl's typed (protobuf) client
    for args in (("create", "namespace", "typed"), ("create", "configmap", "cfg", "-n", "typed", "--from-literal=a=b"),
                 ("run", "tp", "-n", "typed", "--image=x", '--overrides={"spec":{"nodeName":"node-0002"}}'),
                 ("drain", "node-0002", "--force", "--timeout=10s"), ("uncordon", "node-0002")):
        out = kubectl(cluster, tmp_path, *args)
        assert out.returncode == 0, (args, out.stderr)
    out = kubectl(cluster, tmp_path, "get", "configmap", "cfg", "-n", "typed", "-o", "json")
    assert json.loads(out.stdout)["data"] == {"a": "b"}
    out = kubectl(cluster, tmp_path, "get", "pods", "-n", "typed", "-o", "json")
    assert json.loads(out.stdout)["items"] == []  # drained
    with httpx.Client(base_url=cluster) as client:
        r = client.post("/api/v1/namespaces/typed/pods", content=b"k8s\x00\x0a\x08\x0a\x02v1\x12\x02Po",
                        headers={"Content-Type": "application/vnd.kubernetes.protobuf"})
        assert r.status_code == 415
        assert_status(r.json(), 415, "UnsupportedMediaType")


async def test_delete_options_and_collection(cluster: str) -> None:
    async with httpx.AsyncClient(base_url=cluster, timeout=10) as client:
        await make_namespace(client, "del")
        for i in range(3):
            await client.post("/api/v1/namespaces/del/pods", json=pod(f"d-{i}"))
        r = await client.delete("/api/v1/namespaces/del/pods/d-0", params={"propagationPolicy": "Sideways"})
        assert r.status_code == 400
        r = await client.request("DELETE", "/api/v1/namespaces/del/pods/d-0",
                                 json={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 30,
                                       "propagationPolicy": "Background"})
        assert r.status_code == 200 and r.json()["metadata"]["name"] == "d-0"  # immediate, last state returned
        uid = (await client.get("/api/v1/namespaces/del/pods/d-1")).json()["metadata"]["uid"]
        r = await client.request("DELETE", "/api/v1/namespaces/del/pods/d-1", json={"preconditions": {"uid": "other"}})
        assert r.status_code == 409
        r = await client.request("DELETE", "/api/v1/namespaces/del/pods/d-1", json={"preconditions": {"uid": uid}})
        assert r.status_code == 200
        r = await client.delete("/api/v1/namespaces/del/pods", params={"labelSelector": "app=d"})
        assert r.status_code == 200 and [p["metadata"]["name"] for p in r.json()["items"]] == ["d-2"]
        r = await client.delete("/api/v1/namespaces/del")
        assert r.status_code == 200
        assert (await client.get("/api/v1/namespaces/del")).status_code == 404


def test_kubectl_apply_twice_with_a_changed_image(cluster: str, tmp_path: Path) -> None:
    """Issue 11 item 1: field names are checked on the object after a strategic-merge patch, so
    kubectl's `$setElementOrder/containers` directive is no "unknown field"."""
    out = kubectl(cluster, tmp_path, "run", "applied", "--image=nginx:1", "--dry-run=client", "-o", "yaml")
    assert out.returncode == 0, out.stderr
    first = kubectl(cluster, tmp_path, "apply", "-f", "-", stdin=out.stdout)
    assert first.returncode == 0, first.stderr
    second = kubectl(cluster, tmp_path, "apply", "-f", "-", stdin=out.stdout.replace("nginx:1", "nginx:2"))
    assert second.returncode == 0, second.stderr
    assert "pod/applied configured" in second.stdout and "unknown field" not in second.stderr
    got = kubectl(cluster, tmp_path, "get", "pod", "applied", "-o", "jsonpath={.spec.containers[0].image}")
    assert got.stdout == "nginx:2"
    image = kubectl(cluster, tmp_path, "set", "image", "pod/applied", "applied=nginx:3")
    assert image.returncode == 0 and "Warning" not in image.stderr, image.stderr
    kubectl(cluster, tmp_path, "delete", "pod", "applied")


def test_kubectl_create_a_list_file_with_default_validation(cluster: str, tmp_path: Path) -> None:
    """Issue 11 item 2: /openapi/v2's protobuf Content-Type is one Go's MIME parser accepts, so
    `kind: List` files (what `kubectl get -o yaml` writes) are validated and created."""
    listing = {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"listed-{i}"}, "data": {"k": str(i)}}
        for i in range(2)]}
    out = kubectl(cluster, tmp_path, "create", "-f", "-", stdin=json.dumps(listing))
    assert out.returncode == 0, out.stderr
    assert "configmap/listed-0 created" in out.stdout and "configmap/listed-1 created" in out.stdout


def test_delete_answers_a_status_except_for_pods(cluster: str) -> None:
    """Issue 11 item 6: the registry answers DELETE with a Status for every kind but pods."""
    with httpx.Client(base_url=cluster, timeout=10) as client:
        made = client.post("/api/v1/namespaces/default/configmaps",
                           json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gone"}})
        assert made.status_code == 201, made.text
        body = client.delete("/api/v1/namespaces/default/configmaps/gone").json()
        assert body["kind"] == "Status" and body["status"] == "Success"
        assert body["details"] == {"name": "gone", "kind": "configmaps", "uid": made.json()["metadata"]["uid"]}
        made = client.post("/api/v1/namespaces/default/pods", json=pod("stay"))
        assert client.delete("/api/v1/namespaces/default/pods/stay").json()["kind"] == "Pod"


def test_status_lines_carry_the_reason_phrase(cluster: str) -> None:
    """Issue 11 item 7: `HTTP/1.1 200 OK`, as Go's net/http writes it (some clients print it)."""
    host, port = cluster.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert sock.recv(4096).split(b"\r\n", 1)[0] == b"HTTP/1.1 200 OK"
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"GET /api/v1/namespaces/default/pods/nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert sock.recv(4096).split(b"\r\n", 1)[0] == b"HTTP/1.1 404 Not Found"


def test_send_initial_events_needs_resource_version_match(cluster: str) -> None:
    """Issue 11 item 7: as the apiserver's ListOptions validation, a 422 naming the field."""
    r = httpx.get(cluster + "/api/v1/pods?watch=true&sendInitialEvents=true&allowWatchBookmarks=true", timeout=10)
    assert r.status_code == 422
    body = r.json()
    assert body["reason"] == "Invalid" and body["details"]["causes"][0]["field"] == "resourceVersionMatch"
    assert "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan" in body["message"]


def test_send_initial_events_with_not_older_than_streams_the_current_objects(cluster: str) -> None:
    url = (cluster + "/api/v1/nodes?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
           "&allowWatchBookmarks=true&timeoutSeconds=1")
    with httpx.stream("GET", url, timeout=10) as r:
        assert r.status_code == 200
        kinds = [json.loads(line)["type"] for line in r.iter_lines() if line]
    nodes = httpx.get(cluster + "/api/v1/nodes", timeout=10).json()["items"]
    assert kinds.count("ADDED") == len(nodes) > 0 and "BOOKMARK" in kinds


def test_kubectl_secrets(cluster: str, tmp_path: Path) -> None:
    """Issue 11 item 4 (Secrets): `kubectl create secret`, stringData merged into base64 data,
    the table's TYPE and DATA columns, and a 422 naming a data key that is not base64."""
    out = kubectl(cluster, tmp_path, "create", "secret", "generic", "gh", "--from-literal=token=s3cr3t")
    assert out.returncode == 0, out.stderr
    got = json.loads(kubectl(cluster, tmp_path, "get", "secret", "gh", "-o", "json").stdout)
    assert got["type"] == "Opaque" and base64.b64decode(got["data"]["token"]) == b"s3cr3t"
    table = kubectl(cluster, tmp_path, "get", "secrets")
    assert table.stdout.split()[:4] == ["NAME", "TYPE", "DATA", "AGE"] and "gh" in table.stdout
    manifest = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "plain"}, "stringData": {"a": "b"}}
    out = kubectl(cluster, tmp_path, "apply", "-f", "-", stdin=json.dumps(manifest))
    assert out.returncode == 0, out.stderr
    got = json.loads(kubectl(cluster, tmp_path, "get", "secret", "plain", "-o", "json").stdout)
    assert got["data"] == {"a": base64.b64encode(b"b").decode()} and "stringData" not in got
    bad = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bad"}, "data": {"k": "not base64!"}}
    out = kubectl(cluster, tmp_path, "create", "-f", "-", stdin=json.dumps(bad))
    assert out.returncode != 0 and "data[k]" in out.stderr
    assert kubectl(cluster, tmp_path, "delete", "secret", "gh").returncode == 0


@pytest.mark.parametrize(("field", "where"), [
    ("ports: [{containerport: 80}]", "spec.containers[0].ports[0].containerport"),
    ("env: [{name: A, valu: b}]", "spec.containers[0].env[0].valu"),
    ("volumeMounts: [{name: v, mountpath: /x}]", "spec.containers[0].volumeMounts[0].mountpath"),
    ("securityContext: {runAsUsr: 1}", "spec.containers[0].securityContext.runAsUsr"),
])
def test_kubectl_strict_validation_below_a_container(cluster: str, tmp_path: Path, field: str, where: str) -> None:
    """Issue 11 item 5: an unknown field below a container is a strict decoding error, as a real
    apiserver's, not kept."""
    manifest = ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: strict-below\nspec:\n  containers:\n"
                f"  - name: c\n    image: nginx\n    {field}\n")
    out = kubectl(cluster, tmp_path, "create", "-f", "-", stdin=manifest)
    assert out.returncode != 0
    assert f'unknown field "{where}"' in out.stderr


def test_kubectl_strict_validation_of_tolerations_and_node_spec(cluster: str, tmp_path: Path) -> None:
    manifest = ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: strict-tol\nspec:\n  tolerations:\n"
                "  - {key: a, operater: Exists}\n  containers:\n  - name: c\n    image: nginx\n")
    out = kubectl(cluster, tmp_path, "create", "-f", "-", stdin=manifest)
    assert out.returncode != 0 and 'unknown field "spec.tolerations[0].operater"' in out.stderr
    node = "apiVersion: v1\nkind: Node\nmetadata:\n  name: strict-node\nspec:\n  unschedulabel: true\n"
    out = kubectl(cluster, tmp_path, "create", "-f", "-", stdin=node)
    assert out.returncode != 0 and 'unknown field "spec.unschedulabel"' in out.stderr


def test_pod_updates_follow_the_apiserver_rules(cluster: str, tmp_path: Path) -> None:
    """Issue 11 item 5: an image change is allowed, any other spec change is a 422 Forbidden, a
    changed metadata.uid is a 409, and `kubectl replace` of the undefaulted manifest is no change."""
    manifest = ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: upd\nspec:\n  containers:\n"
                "  - name: c\n    image: nginx:1\n")
    assert kubectl(cluster, tmp_path, "create", "-f", "-", stdin=manifest).returncode == 0
    ok = kubectl(cluster, tmp_path, "replace", "-f", "-", stdin=manifest.replace("nginx:1", "nginx:2"))
    assert ok.returncode == 0, ok.stderr
    bad = kubectl(cluster, tmp_path, "patch", "pod", "upd", "-p", '{"spec":{"restartPolicy":"Never"}}')
    assert bad.returncode != 0 and "Forbidden: pod updates may not change fields" in bad.stderr
    with httpx.Client(base_url=cluster, timeout=10) as client:
        pod_now = client.get("/api/v1/namespaces/default/pods/upd").json()
        pod_now["metadata"]["uid"] = "00000000-0000-0000-0000-000000000000"
        r = client.put("/api/v1/namespaces/default/pods/upd", json=pod_now)
        assert r.status_code == 409 and "Precondition failed: UID in precondition" in r.json()["message"]
    assert kubectl(cluster, tmp_path, "delete", "pod", "upd").returncode == 0
