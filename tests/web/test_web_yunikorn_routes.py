"""YuniKorn's remaining REST routes, served by a live `ykshm web` from a snapshot the test writes.

What each route picks from the snapshot, its errors in the core's order and wording, CORS, gzip,
OPTIONS, and a UI build served beside `/ws`. The shapes the engine itself publishes are checked
against a live `ykshm run` in tests/run/test_run_rest_contract.py.
"""

from __future__ import annotations

import gzip
import os
import time
import zlib

import httpx
import orjson
import pytest
import yaml

from shm import SnapshotWriter
from webharness import WebServer, cleanup, unique_name

from test_web_views import error, get


def _app(app_id: str, queue: str, state: str) -> dict:
    return {"applicationID": app_id, "queueName": queue, "partition": "default",
            "applicationState": state, "allocations": []}


def _queue(path: str, children: list[dict] | None = None) -> dict:
    kids = children or []
    return {"queuename": path, "isLeaf": not kids, "children": kids,
            "childNames": [c["queuename"] for c in kids]}


APPS = [
    _app("a-new", "root.default", "New"),
    _app("a-run", "root.default", "Running"),
    _app("a-run2", "root.team.dev", "Running"),
    _app("a-done", "root.default", "Completed"),
    _app("a-fail", "root.default", "Failed"),
    _app("a-rej", "root.default", "Rejected"),
]
NODES = [
    {"nodeID": "n0", "capacity": {"memory": 100, "vcore": 10}, "allocated": {}},
    {"nodeID": "n5", "capacity": {"memory": 100, "vcore": 10}, "allocated": {"memory": 5, "vcore": 10}},
    {"nodeID": "n55", "capacity": {"memory": 100}, "allocated": {"memory": 55}},
]
CONFIG_DOC = {"partitions": [{"name": "default", "queues": [
    {"name": "root", "queues": [{"name": "default", "resources": {"max": {"memory": "1Gi"}},
                                 "maxapplications": 5}]}]}],
    "checksum": "ABC", "extra": {"service.event.RESTResponseSize": "50"}}
DOC = {
    "engine": {"pid": os.getpid(), "instanceUUID": "x", "startedNano": 11, "publishedNano": 12,
               "rmIDs": ["rm"], "cycles": 1},
    "rmBuildInformation": [{"buildVersion": "1.2", "buildDate": "d", "rmId": "rm"}],
    "partitions": [{"name": "default", "clusterId": "rm", "state": "Active"}],
    "queues": {"default": _queue("root", [_queue("root.default"),
                                          _queue("root.team", [_queue("root.team.dev")])])},
    "applications": {"default": APPS},
    "nodes": {"default": NODES},
    "usage": {"default": {"users": [], "groups": []}},
    "history": [[1000, 1, 2], [2000, 3, 4]],
    "config": CONFIG_DOC,
    "placementRules": {"default": [{"name": "tag", "parameters": {"create": "true", "value": "namespace"}},
                                   {"name": "recovery", "parameters": {"create": "true"}}]},
}


@pytest.fixture
def state(web):
    writer = SnapshotWriter.create(web.name, 1 << 20)
    writer.publish(DOC)
    time.sleep(0.6)  # a worker re-checks the snapshot file at most every 0.5 s
    yield web
    writer.close()
    writer.unlink()


def ids(r: httpx.Response) -> list[str]:
    assert r.status_code == 200, r.text
    return [a["applicationID"] for a in r.json()]


def test_applications_by_state_and_status(state):
    base = "/ws/v1/partition/default/applications/"
    assert ids(get(state, base + "active")) == ["a-new", "a-run", "a-run2"]
    assert ids(get(state, base + "ACTIVE?status=Running")) == ["a-run", "a-run2"]
    assert ids(get(state, base + "completed")) == ["a-done", "a-fail"]
    assert ids(get(state, base + "rejected")) == ["a-rej"]
    assert error(get(state, base + "finished"), 400) == \
        "Only following application states are allowed: active, rejected, completed"
    assert error(get(state, base + "active?status=completed"), 400).startswith(
        "Only following active statuses are allowed: new,accepted,running")
    assert error(get(state, "/ws/v1/partition/nope/applications/active"), 404) == "Partition not found"


def test_queue_applications_and_one_application(state):
    base = "/ws/v1/partition/default/queue/"
    assert ids(get(state, base + "root.default/applications")) == ["a-new", "a-run"]
    assert ids(get(state, base + "root.default/applications/active?status=new")) == ["a-new"]
    assert ids(get(state, base + "root%2Eteam%2Edev/applications")) == ["a-run2"]
    assert error(get(state, base + "root.default/applications/completed"), 400) == \
        "Only following application states are allowed: active"
    assert error(get(state, base + "root.nope/applications"), 404) == "Queue not found"
    assert "invalid queue name a b" in error(get(state, base + "root.a%20b/applications"), 400)
    assert get(state, base + "root.default/application/a-run").json()["applicationState"] == "Running"
    assert error(get(state, base + "root.team.dev/application/a-run"), 404) == "Application not found"
    one = "/ws/v1/partition/default/application/"
    assert get(state, one + "a-done").json()["applicationState"] == "Completed"
    assert error(get(state, one + "ghost"), 404) == "Application not found"


def test_queue_with_and_without_subtree(state):
    plain = get(state, "/ws/v1/partition/default/queue/root.team").json()
    assert plain["queuename"] == "root.team" and "children" not in plain
    assert plain["childNames"] == ["root.team.dev"]
    full = get(state, "/ws/v1/partition/default/queue/ROOT.team?subtree").json()
    assert [c["queuename"] for c in full["children"]] == ["root.team.dev"]
    assert error(get(state, "/ws/v1/partition/default/queue/root.x"), 404) == "Queue not found"


def test_node_and_node_utilizations(state):
    assert get(state, "/ws/v1/partition/default/node/n5").json()["nodeID"] == "n5"
    assert error(get(state, "/ws/v1/partition/default/node/zz"), 404) == "Node not found"
    [part] = get(state, "/ws/v1/scheduler/node-utilizations").json()
    assert part["clusterId"] == "rm" and part["partition"] == "default"
    by_type = {u["type"]: u["utilization"] for u in part["utilizations"]}
    assert list(by_type) == ["memory", "vcore"]
    memory = by_type["memory"]
    assert [b["bucketName"] for b in memory] == [f"{k * 10}-{k * 10 + 10}%" for k in range(10)]
    # n0 has nothing allocated -> bucket 0; 5 % -> bucket 0; 55 % -> bucket 5
    assert memory[0] == {"bucketName": "0-10%", "numOfNodes": 2, "nodeNames": ["n0", "n5"]}
    assert memory[5]["nodeNames"] == ["n55"]
    assert memory[1] == {"bucketName": "10-20%"}  # omitempty
    assert by_type["vcore"][9]["nodeNames"] == ["n5"]  # 100 % -> the last bucket


def test_clusters_and_history(state):
    assert get(state, "/ws/v1/clusters").json() == [
        {"startTime": 11, "rmBuildInformation": DOC["rmBuildInformation"], "partition": "default",
         "clusterName": "kubernetes"}]
    assert get(state, "/ws/v1/history/apps").json() == [
        {"timestamp": 1000, "totalApplications": "1"}, {"timestamp": 2000, "totalApplications": "3"}]
    assert get(state, "/ws/v1/history/containers").json() == [
        {"timestamp": 1000, "totalContainers": "2"}, {"timestamp": 2000, "totalContainers": "4"}]


def test_placement_rules_of_a_partition(state):
    assert get(state, "/ws/v1/partition/default/placementrules").json() == DOC["placementRules"]["default"]
    assert error(get(state, "/ws/v1/partition/nope/placementrules"), 404)


def test_config_yaml_or_json_and_validate(state):
    r = get(state, "/ws/v1/config")
    assert r.headers["content-type"] == "application/x-yaml; charset=UTF-8"
    assert yaml.safe_load(r.text) == CONFIG_DOC
    r = httpx.get(state.url + "/ws/v1/config", headers={"Accept": "application/json"}, timeout=5)
    body = r.json()
    assert body["Checksum"] == "ABC" and body["Extra"] == CONFIG_DOC["extra"]
    queue = body["Partitions"][0]["Queues"][0]["Queues"][0]
    assert queue == {"Name": "default", "Resources": {"Max": {"memory": "1Gi"}}, "MaxApplications": 5}
    ok = httpx.post(state.url + "/ws/v1/validate-conf", content=b"partitions:\n- name: default\n", timeout=5)
    assert ok.json() == {"allowed": True, "reason": ""}
    bad = httpx.post(state.url + "/ws/v1/validate-conf",
                     content=b"partitions:\n- name: default\n  queues:\n  - name: root\n    maxapplications: -1\n",
                     timeout=5).json()
    assert bad["allowed"] is False and "maxapplications" in bad["reason"] and "-1" in bad["reason"]
    wildcard_only = httpx.post(state.url + "/ws/v1/validate-conf", timeout=5, content=(
        b"partitions:\n- name: default\n  queues:\n  - name: root\n    limits:\n"
        b"    - {limit: all, groups: ['*'], maxapplications: 1}\n")).json()
    assert wildcard_only["allowed"] is False and (  # refused as YuniKorn refuses it (R7)
        "should not specify only one group limit that is using the wildcard" in wildcard_only["reason"])
    assert error(httpx.get(state.url + "/ws/v1/validate-conf", timeout=5), 405)


def test_full_state_dump_and_redirect(state):
    r = httpx.get(state.url + "/ws/v1/fullstatedump", timeout=5)
    assert r.status_code == 301 and r.headers["location"] == "/debug/fullstatedump"
    dump = get(state, "/debug/fullstatedump")
    assert dump.text.startswith("{\n  ")  # indented, as YuniKorn's MarshalIndent
    body = dump.json()
    assert abs(body["timestamp"] - time.time_ns()) < 60e9 and list(body)[0] == "timestamp"
    assert get(state, "/debug/fullstatedump").json()["timestamp"] > body["timestamp"]
    assert [a["applicationID"] for a in body["applications"]] == [a["applicationID"] for a in APPS]
    assert body["nodes"] == [{"partitionName": "default", "nodesInfo": NODES}]
    assert body["queues"][0]["queuename"] == "root"
    assert body["appHistory"][1] == {"timestamp": 2000, "totalApplications": "3"}
    assert body["clusterInfo"][0]["clusterName"] == "kubernetes"
    assert body["config"]["Checksum"] == "ABC"
    assert body["placementRules"] == [{"partition": "default", "rules": DOC["placementRules"]["default"]}]


def test_cors_headers_as_the_core_sets_them(state):
    r = get(state, "/ws/v1/partitions")
    assert r.headers["access-control-allow-origin"] == "*"
    assert r.headers["access-control-allow-methods"] == "GET, OPTIONS"
    assert r.headers["access-control-allow-headers"] == "X-Requested-With,Content-Type,Accept,Origin"
    assert error(get(state, "/ws/v1/partition/nope/queues"), 404)
    assert get(state, "/ws/v1/partition/nope/queues").headers["access-control-allow-origin"] == "*"
    post = httpx.post(state.url + "/ws/v1/validate-conf", content=b"{}", timeout=5)
    assert post.headers["access-control-allow-methods"] == "OPTIONS, POST"
    assert "access-control-allow-origin" not in get(state, "/ws/v1/metrics").headers
    opt = httpx.options(state.url + "/ws/v1/partitions", timeout=5)
    assert opt.status_code == 200 and opt.headers["allow"] == "GET, HEAD, OPTIONS"
    assert "access-control-allow-origin" not in opt.headers
    assert httpx.options(state.url + "/ws/v1/nope", timeout=5).status_code == 404


def test_gzip_for_large_json_when_accepted(web):
    big = [_app(f"app-{i:04d}", "root.default", "Running") for i in range(200)]
    writer = SnapshotWriter.create(web.name, 1 << 20)
    try:
        writer.publish({**DOC, "applications": {"default": big}})
        time.sleep(0.6)
        path = web.url + "/ws/v1/partition/default/applications/active"
        with httpx.Client(headers={"Accept-Encoding": "gzip"}) as client:
            r = client.get(path)
        assert r.headers["content-encoding"] == "gzip"
        assert int(r.headers["content-length"]) < len(r.content)  # httpx decoded it
        assert len(r.json()) == 200
        raw = httpx.get(path, headers={"Accept-Encoding": "identity"}, timeout=5)
        assert "content-encoding" not in raw.headers and len(raw.json()) == 200
        small = httpx.get(web.url + "/ws/v1/clusters", headers={"Accept-Encoding": "gzip"}, timeout=5)
        assert "content-encoding" not in small.headers  # under 1,400 bytes
        with httpx.stream("GET", web.url + "/ws/v1/events/stream",
                          headers={"Accept-Encoding": "gzip"}, timeout=5) as stream:
            assert "content-encoding" not in stream.headers
    finally:
        writer.close()
        writer.unlink()


def test_gzip_bytes_are_a_valid_gzip_of_the_answer(state):
    r = httpx.get(state.url + "/debug/fullstatedump", headers={"Accept-Encoding": "gzip"}, timeout=5)
    with httpx.Client() as client:
        request = client.build_request("GET", state.url + "/debug/fullstatedump",
                                       headers={"Accept-Encoding": "gzip"})
        raw = client.send(request, stream=True)
        packed = b"".join(raw.iter_raw())
        raw.close()
    assert raw.headers["content-encoding"] == "gzip"
    assert int(raw.headers["content-length"]) == len(packed)
    assert gzip.decompress(packed).startswith(b"{\n  ")
    assert r.json()["clusterInfo"]
    # one gzip member (a client that stops after the first member gets it all), equal to the plain
    # answer but for the timestamp line
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    body = inflate.decompress(packed)
    assert inflate.eof and inflate.unused_data == b""
    plain = httpx.get(state.url + "/debug/fullstatedump", headers={"Accept-Encoding": "identity"}, timeout=5)
    assert "content-encoding" not in plain.headers
    assert int(plain.headers["content-length"]) == len(plain.content)
    assert body.split(b"\n", 2)[2] == plain.content.split(b"\n", 2)[2]
    assert orjson.loads(body).keys() == orjson.loads(plain.content).keys()


@pytest.fixture
def ui_web(tmp_path):
    ui = tmp_path / "ui"
    (ui / "assets").mkdir(parents=True)
    (ui / "index.html").write_text("<html><body>the ui</body></html>")
    (ui / "assets" / "app.js").write_text("console.log('ui')")
    (tmp_path / "secret.txt").write_text("not for you")
    name = unique_name()
    server = WebServer(name, workers=1, extra=["--ui-dir", str(ui)])
    yield server
    server.stop()
    cleanup(name)


def test_ui_build_served_beside_the_api(ui_web):
    root = httpx.get(ui_web.url + "/", timeout=5)
    assert root.status_code == 200 and "the ui" in root.text
    assert root.headers["content-type"].startswith("text/html")
    js = httpx.get(ui_web.url + "/assets/app.js", timeout=5)
    assert js.text == "console.log('ui')" and "javascript" in js.headers["content-type"]
    # a UI route (no file) is the single-page fallback; a missing asset is 404
    assert "the ui" in httpx.get(ui_web.url + "/#/dashboard", timeout=5).text
    assert "the ui" in httpx.get(ui_web.url + "/applications/root.default", timeout=5).text
    assert httpx.get(ui_web.url + "/assets/missing.js", timeout=5).status_code == 404
    assert httpx.get(ui_web.url + "/..%2Fsecret.txt", timeout=5).status_code in (400, 404)
    assert httpx.get(ui_web.url + "/%2E%2E/secret.txt", timeout=5).status_code in (400, 404)
    assert "Healthy" in httpx.get(ui_web.url + "/ws/v1/scheduler/healthcheck", timeout=5).json()
    assert httpx.post(ui_web.url + "/", timeout=5).status_code == 405


def test_ui_dir_without_index_is_a_usage_error(tmp_path):
    import subprocess
    import sys

    (tmp_path / "empty").mkdir()
    done = subprocess.run([sys.executable, "-m", "tools.cli", "web", "--bind", "127.0.0.1:0",
                           "--ui-dir", str(tmp_path / "empty")], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert "has no index.html" in done.stderr and "Traceback" not in done.stderr
    cfg = tmp_path / "c.yaml"
    cfg.write_text("ui:\n  dir: 7\n")
    done = subprocess.run([sys.executable, "-m", "tools.cli", "web", "--bind", "127.0.0.1:0",
                           "--config", str(cfg)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "ui.dir" in done.stderr
