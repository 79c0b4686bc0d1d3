"""State views, usage, healthcheck, metrics and OpenAPI from a snapshot the test writes itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
import yaml

from shm import SnapshotWriter

Q_ROOT = {
    "queuePath": "root",
    "resourceUsage": {"memory": 2048, "vcore": 200},
    "runningApplications": ["app-1", "app-2"],
    "children": [
        {"queuePath": "root.default", "resourceUsage": {"memory": 2048, "vcore": 200},
         "runningApplications": ["app-1", "app-2"], "maxApplications": 10}
    ],
}
DOC = {
    "engine": {"pid": os.getpid(), "instanceUUID": "x", "startedNano": 1, "publishedNano": 2,
               "rmIDs": ["rm"], "cycles": 3},
    "partitions": [{"name": "default", "state": "Active"}],
    "queues": {"default": {"queuename": "root", "children": []}},
    "applications": {"default": [{"applicationID": "app-1"}, {"applicationID": "app-2"}]},
    "nodes": {"default": [{"nodeID": "node-1"}]},
    "usage": {
        "default": {
            "users": [{"userName": "alice", "groups": {"app-1": "devs"}, "queues": Q_ROOT},
                      {"userName": "system:serviceaccount:ns:sa", "queues": Q_ROOT}],
            "groups": [{"groupName": "devs", "applications": ["app-1"], "queues": Q_ROOT}],
        },
        "empty": {"users": [], "groups": []},
    },
}


def get(web, path: str) -> httpx.Response:
    return httpx.get(web.url + path, timeout=10)


def error(r: httpx.Response, status: int) -> str:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json; charset=UTF-8"
    body = r.json()
    assert set(body) == {"status_code", "message", "description"} and body["status_code"] == status
    return body["message"]


@pytest.fixture
def snapshot(web):
    writer = SnapshotWriter.create(web.name, 1 << 20)
    writer.publish(DOC)
    yield writer
    writer.close()
    writer.unlink()


def test_views_503_without_snapshot(web):
    for path in ("/ws/v1/partitions", "/ws/v1/partition/default/queues",
                 "/ws/v1/partition/default/usage/users", "/ws/v1/partition/default/usage/user/alice"):
        assert "not running" in error(get(web, path), 503)
    # the event endpoints are served all the same
    assert get(web, "/ws/v1/events/batch").status_code == 200


def test_views_from_snapshot(web, snapshot):
    time.sleep(0.6)  # a worker re-checks the snapshot file at most every 0.5 s
    assert get(web, "/ws/v1/partitions").json() == DOC["partitions"]
    assert get(web, "/ws/v1/partition/default/queues").json() == DOC["queues"]["default"]
    assert get(web, "/ws/v1/partition/default/applications").json() == DOC["applications"]["default"]
    assert get(web, "/ws/v1/partition/default/nodes").json() == DOC["nodes"]["default"]
    users = get(web, "/ws/v1/partition/default/usage/users")
    assert users.headers["content-type"] == "application/json; charset=UTF-8"
    assert users.json() == DOC["usage"]["default"]["users"]
    assert get(web, "/ws/v1/partition/default/usage/user/alice").json()["groups"] == {"app-1": "devs"}
    assert get(web, "/ws/v1/partition/default/usage/user/system:serviceaccount:ns:sa").status_code == 200
    assert get(web, "/ws/v1/partition/default/usage/groups").json() == DOC["usage"]["default"]["groups"]
    assert get(web, "/ws/v1/partition/default/usage/group/devs").json()["applications"] == ["app-1"]
    assert get(web, "/ws/v1/partition/empty/usage/users").json() == []
    assert get(web, "/ws/v1/partition/empty/usage/groups").json() == []
    assert error(get(web, "/ws/v1/partition/default/usage/user/bob"), 404) == "User not found"
    assert error(get(web, "/ws/v1/partition/default/usage/group/ops"), 404) == "Group not found"
    # usage at the edges, as YuniKorn answers (G8): its one usage manager ignores {partition}
    assert get(web, "/ws/v1/partition/nope/usage/users").json() == DOC["usage"]["default"]["users"]
    assert get(web, "/ws/v1/partition/a%2Fb/usage/user/alice").json()["userName"] == "alice"
    assert error(get(web, "/ws/v1/partition/nope/queues"), 404) == "Partition not found"
    assert error(get(web, "/ws/v1/partition/default/usage/user/1bad"), 400) == "Invalid user name"
    assert error(get(web, "/ws/v1/partition/default/usage/user/a%20b"), 400) == "Invalid user name"
    for bad in ("a@b", "a%23b", "a%2Fb"):  # GroupRegExp has no @, # or /
        assert error(get(web, f"/ws/v1/partition/default/usage/group/{bad}"), 400) == "Invalid group name"
    long = "u" * 1000  # no length limit of its own: an unknown user
    assert error(get(web, f"/ws/v1/partition/default/usage/user/{long}"), 404) == "User not found"
    assert error(get(web, f"/ws/v1/partition/default/usage/group/{long}"), 404) == "Group not found"
    assert error(get(web, "/ws/v1/partition/a%2Fb/queues"), 400) == "Invalid partition name"
    # a new publish is served at once
    doc = dict(DOC, partitions=[{"name": "default", "state": "Draining"}])
    snapshot.publish(doc)
    assert get(web, "/ws/v1/partitions").json() == doc["partitions"]


def _engine_proc(name: str) -> subprocess.Popen:
    code = (
        "import sys, time\n"
        "from shm import RingWriter\n"
        f"w = RingWriter.create({name!r}, 100)\n"
        "w.publish(2, 2, 0, object_id='app-x')\n"
        "print('ready', flush=True)\n"
        "while True:\n"
        "    w.heartbeat(); time.sleep(0.05)\n"
    )
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


def _checks(web) -> dict:
    doc = get(web, "/ws/v1/scheduler/healthcheck").json()
    assert set(doc) == {"Healthy", "HealthChecks"}
    for c in doc["HealthChecks"]:
        assert set(c) == {"Name", "Succeeded", "Description", "DiagnosisMessage"}
    return {c["Name"]: c["Succeeded"] for c in doc["HealthChecks"]} | {"Healthy": doc["Healthy"]}


def test_healthcheck_engine_live_then_stopped(web, snapshot):
    web.ring.writer.close()
    engine = _engine_proc(web.name)
    try:
        assert engine.stdout.readline().strip() == b"ready"
        time.sleep(0.6)
        checks = _checks(web)
        assert checks["Engine process"] and checks["Engine heartbeat"] and checks["State snapshot"]
        assert checks["Healthy"]
        assert "ykshm_engine_alive 1.0" in get(web, "/ws/v1/metrics").text
        os.kill(engine.pid, signal.SIGSTOP)
        time.sleep(1.5)  # --heartbeat-timeout 1
        checks = _checks(web)
        assert checks["Engine process"] and not checks["Engine heartbeat"] and not checks["Healthy"]
        assert "ykshm_engine_alive 0.0" in get(web, "/ws/v1/metrics").text
        # the history it left is still served
        batch = get(web, "/ws/v1/events/batch").json()
        assert batch["EventRecords"][0]["objectID"] == "app-x"
        os.kill(engine.pid, signal.SIGKILL)
        engine.wait(5)
        checks = _checks(web)
        assert not checks["Engine process"] and not checks["Healthy"]
    finally:
        if engine.poll() is None:
            os.kill(engine.pid, signal.SIGKILL)
            engine.wait(5)
        engine.stdout.close()


def test_healthcheck_shows_a_failed_shim(web, snapshot):
    """The shim of this instance publishes its state in RUNTIME/NAME.shim.json: the
    healthcheck reports it, unhealthy once the shim is Failed; no file, no shim check."""
    import orjson

    from common.shimstatus import status_path

    path = status_path(web.name, create=True)
    assert "Kubernetes shim" not in _checks(web)
    try:
        with open(path, "wb") as f:
            f.write(orjson.dumps({"pid": os.getpid(), "state": "Running"}))
        assert _checks(web)["Kubernetes shim"]
        with open(path, "wb") as f:
            f.write(orjson.dumps({"pid": os.getpid(), "state": "Failed",
                                  "failure": "recovery not complete within 300 s"}))
        doc = get(web, "/ws/v1/scheduler/healthcheck").json()
        [shim] = [c for c in doc["HealthChecks"] if c["Name"] == "Kubernetes shim"]
        assert not shim["Succeeded"] and not doc["Healthy"]
        assert "Failed: recovery not complete" in shim["DiagnosisMessage"]
    finally:
        os.unlink(path)


def test_metrics_text(web):
    web.ring.publish(30)
    get(web, "/ws/v1/events/batch")
    get(web, "/nope")
    r = get(web, "/ws/v1/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    for needle in (
        "ykshm_ring_capacity 100.0",
        "ykshm_ring_lowest_id 0.0",
        "ykshm_ring_highest_id 29.0",
        "ykshm_ring_fill_ratio 0.3",
        "ykshm_ring_events_per_second",
        "ykshm_web_streams_open 0.0",
        'ykshm_web_streams_closed_total{reason="lapped"}',
        'ykshm_web_requests_total{code="2xx",route="events_batch"}',
        'ykshm_web_requests_total{code="4xx",route="unmatched"}',
        'ykshm_web_request_duration_seconds_bucket{le="0.005",route="events_batch"}',
        "ykshm_engine_alive",
    ):
        assert needle in text, needle


def test_openapi_served_and_covers_every_route(web):
    from web.app import ROUTES

    doc = yaml.safe_load(get(web, "/ws/v1/openapi.yaml").content)
    assert doc["openapi"].startswith("3.")
    assert {r.path for r in ROUTES} == set(doc["paths"])
    assert get(web, "/ws/v1/openapi.json").json() == doc


def test_error_bodies(web):
    assert error(get(web, "/nope"), 404)
    assert error(get(web, "/ws/v1/events"), 404)
    r = httpx.post(web.url + "/ws/v1/events/batch", timeout=5)
    error(r, 405)
    assert r.headers["allow"] == "GET, HEAD"
    r = httpx.delete(web.url + "/ws/v1/partitions", timeout=5)
    error(r, 405)
    r = httpx.head(web.url + "/ws/v1/events/stream", timeout=5)
    assert r.status_code == 405
    assert error(get(web, "/ws/v1/events/batch?x=" + "a" * 9000), 414)
    assert error(get(web, "/" + "a" * 9000), 414)
    r = httpx.post(web.url + "/ws/v1/events/batch", content=b"x" * 100_000, timeout=5)
    error(r, 413)
    r = httpx.get(web.url + "/ws/v1/events/batch", timeout=5)
    assert r.status_code == 200
    r = httpx.head(web.url + "/ws/v1/events/batch", timeout=5)
    assert r.status_code == 200 and r.content == b""
