"""End to end: the engine configured from YuniKorn's ConfigMaps, hot-reloaded.

A real sim-cluster, engine and shim (`--configmaps`) and, where the REST view matters, a real
`ykshm web`; the ConfigMaps are created and edited with the real `kubectl`. Every process is
stopped by pid (tools.harness, tests/web/webharness).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson
import yaml

from tools.harness import Cluster, Kubectl, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "web"))
from webharness import WebServer  # noqa: E402

ALICE = '{"user": "alice", "groups": ["devs"]}'


def queues(leaf: str, max_apps: int = 1) -> str:
    return yaml.safe_dump({"partitions": [{
        "name": "default", "placementrules": [{"name": "provided", "create": False}],
        "queues": [{"name": "root", "submitacl": "*", "queues": [{
            "name": leaf, "limits": [{"limit": "alice", "users": ["alice"],
                                      "maxapplications": max_apps}]}]}]}]})


def configmap(name: str, data: dict[str, str]) -> str:
    return orjson.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": name, "namespace": "default"},
                         "data": data}).decode()


def apply(kubectl: Kubectl, name: str, data: dict[str, str]) -> None:
    kubectl("apply", "-f", "-", stdin=configmap(name, data))


def leaf_queues(c: Cluster) -> set[str]:
    root = (c.engine_doc() or {}).get("queues", {}).get("default") or {}
    return {q["queuename"].removeprefix("root.") for q in root.get("children") or []}


def events_on(c: Cluster, name: str, reason: str) -> list[dict]:
    return [e for e in c.events("default") if e["involvedObject"].get("kind") == "ConfigMap"
            and e["involvedObject"]["name"] == name and e["reason"] == reason]


def config_check(web: WebServer) -> dict:
    health = httpx.get(web.url + "/ws/v1/scheduler/healthcheck", timeout=5).json()
    [check] = [h for h in health["HealthChecks"] if h["Name"] == "Configuration"]
    return check


def start(c: Cluster, *extra: str) -> Kubectl:
    c.start_all(shim_extra=["--configmaps", "--namespace", "default", *extra])
    return Kubectl(c.url, c.tmp)


def test_configmaps_merge_reload_refuse_and_report(ring_name):
    with Cluster(ring_name, nodes=2) as c:
        kubectl = start(c)
        # no ConfigMaps: YuniKorn's default configuration replaces the engine's file
        wait_for(lambda: (c.engine_doc() or {})["engine"]["configSource"] == "rm:mycluster", 10,
                 "the shim's configuration in force")
        apply(kubectl, "yunikorn-defaults", {"queues.yaml": queues("sandbox"),
                                             "event.trackingEnabled": "true"})
        wait_for(lambda: leaf_queues(c) == {"sandbox"}, 15, "root.sandbox in force")
        # key by key: configs' queues.yaml replaces defaults' (no deep merge), defaults' other
        # keys stay
        apply(kubectl, "yunikorn-configs", {"queues.yaml": queues("prod")})
        wait_for(lambda: leaf_queues(c) == {"prod"}, 15, "root.prod in force")
        web = WebServer(ring_name, workers=1)
        try:
            config = httpx.get(web.url + "/ws/v1/config", timeout=5,
                               headers={"Accept": "application/json"}).json()
            [root] = config["Partitions"][0]["Queues"]
            assert root["Queues"][0]["Name"] == "prod"
            assert root["Queues"][0]["Limits"][0]["MaxApplications"] == 1
            assert config["Extra"]["event.trackingEnabled"] == "true"
            assert events_on(c, "yunikorn-configs", "ConfigReloaded")
            # the user limit is enforced: alice's second application waits
            for pod, app in (("a1", "app-a1"), ("a2", "app-a2")):
                c.create_pod(pod, app=app, queue="root.prod", annotations={
                    "yunikorn.apache.org/user.info": ALICE})
            c.wait_bound(["a1"], timeout=20)

            def alice_running() -> list[str] | None:
                usage = httpx.get(web.url + "/ws/v1/partition/default/usage/user/alice",
                                  timeout=5).json()
                return usage.get("queues", {}).get("children", [{}])[0].get(
                    "runningApplications")

            assert wait_for(alice_running, 10, "alice's usage") == ["app-a1"]
            wait_for(lambda: "app-a2" in {a["applicationID"] for a in c.applications()}, 10,
                     "app-a2 known to the engine")
            time.sleep(1.0)  # cycles pass: the limit, not slowness, keeps a2 waiting
            assert not c.pod("a2")["spec"].get("nodeName")

            # a bad YAML edit: refused by the engine, the running configuration stays
            checksum = config["Checksum"]
            apply(kubectl, "yunikorn-configs", {"queues.yaml": "partitions: [unclosed"})
            [refused] = wait_for(lambda: events_on(c, "yunikorn-configs", "ConfigRefused"), 15,
                                 "a ConfigRefused event")
            assert refused["type"] == "Warning" and "not valid YAML" in refused["message"]
            assert leaf_queues(c) == {"prod"}
            again = httpx.get(web.url + "/ws/v1/config", timeout=5,
                              headers={"Accept": "application/json"}).json()
            assert again["Checksum"] == checksum
            check = wait_for(lambda: not config_check(web)["Succeeded"] and config_check(web), 5,
                             "the Configuration check failing")
            assert "not valid YAML" in check["DiagnosisMessage"]
            health = httpx.get(web.url + "/ws/v1/scheduler/healthcheck", timeout=5).json()
            assert health["Healthy"]  # a warning: scheduling goes on with the old configuration

            def status() -> str:
                return subprocess.run([sys.executable, "-m", "tools.cli", "status", "--name",
                                       ring_name], capture_output=True, text=True,
                                      timeout=30).stdout

            line = wait_for(lambda: "change refused at" in status() and status(), 10,
                            "ykshm status showing the refusal")
            assert "not valid YAML" in line and "yunikorn-configs in namespace default" in line

            # a key YuniKorn reads only at start: reported, not applied; the rest is
            apply(kubectl, "yunikorn-configs", {"queues.yaml": queues("prod", 2),
                                                "service.clusterId": "other"})
            [note] = wait_for(lambda: events_on(c, "yunikorn-configs", "ConfigNotReloadable"),
                              15, "a ConfigNotReloadable event")
            assert "service.clusterId" in note["message"] and "restart" in note["message"]
            c.wait_bound(["a2"], timeout=20)  # maxapplications 2 is in force
            doc = c.engine_doc() or {}
            assert doc["engine"]["rmIDs"] == ["mycluster"]
            shim = wait_for(lambda: (c.shim_status()["configMaps"]["refused"] is None
                                     and c.shim_status()["configMaps"]), 5, "the shim's status")
            assert "service.clusterId" in shim["notApplied"][0]
            check = wait_for(lambda: config_check(web)["Succeeded"] and config_check(web), 5,
                             "the Configuration check passing again")
            assert "service.clusterId" in check["DiagnosisMessage"]
        finally:
            web.stop()


def test_hot_refresh_off_ignores_changes(ring_name):
    with Cluster(ring_name, nodes=1) as c:
        c.start_sim()
        kubectl = Kubectl(c.url, c.tmp)
        apply(kubectl, "yunikorn-defaults", {"service.enableConfigHotRefresh": "false",
                                             "queues.yaml": queues("first")})
        c.start_engine()
        c.start_shim(extra=["--configmaps"])
        wait_for(lambda: leaf_queues(c) == {"first"}, 10, "root.first in force")
        apply(kubectl, "yunikorn-configs", {"queues.yaml": queues("second")})
        [ev] = wait_for(lambda: events_on(c, "yunikorn-configs", "ConfigHotRefreshDisabled"), 15,
                        "a ConfigHotRefreshDisabled event")
        assert "service.enableConfigHotRefresh is false" in ev["message"]
        wait_for(lambda: c.shim_status()["configMaps"]["ignoredChanges"] == 1, 5,
                 "the ignored change in the shim's status")
        shim_status = subprocess.run([sys.executable, "-m", "tools.cli", "shim", "status",
                                      "--name", ring_name], capture_output=True, text=True,
                                     timeout=30).stdout
        assert "config: ConfigMaps in namespace default, hot refresh off" in shim_status
        assert leaf_queues(c) == {"first"}


def test_invalid_configmap_at_start_stops_the_shim(ring_name):
    with Cluster(ring_name, nodes=1) as c:
        c.start_sim()
        apply(Kubectl(c.url, c.tmp), "yunikorn-configs", {"service.schedulingInterval": "fast"})
        c.start_engine()
        c.start_shim(wait_state=None, extra=["--configmaps"])
        assert c.shim is not None
        assert c.shim.popen.wait(20) == 1
        assert "service.schedulingInterval: invalid value 'fast'" in c.shim.tail()


def test_a_restarted_engine_gets_the_configuration_again(ring_name):
    """The engine reads only its file at start; the shim's re-registration brings the ConfigMaps'
    configuration back (YuniKorn: a new scheduler pod reads the ConfigMaps)."""
    with Cluster(ring_name, nodes=1) as c:
        kubectl = start(c)
        apply(kubectl, "yunikorn-configs", {"queues.yaml": queues("prod")})
        wait_for(lambda: leaf_queues(c) == {"prod"}, 15, "root.prod in force")
        first = (c.engine_doc() or {})["engine"]["instanceUUID"]
        c.kill_engine()
        c.start_engine()
        c.wait_shim("Running", registrations=2)
        doc = wait_for(lambda: (c.engine_doc() or {})["engine"]["instanceUUID"] != first
                       and leaf_queues(c) == {"prod"} and c.engine_doc(), 15,
                       "root.prod in force in the new engine")
        assert doc["engine"]["configSource"] == "rm:mycluster"
        assert doc["config"]["partitions"][0]["queues"][0]["queues"][0]["name"] == "prod"


def test_unreadable_configmaps_at_start_are_one_line_and_exit_1():
    out = subprocess.run([sys.executable, "-m", "tools.cli", "shim", "--api-server",
                          "http://127.0.0.1:1", "--configmaps", "--namespace", "yk",
                          "--name", "t-unreadable-cm", "--status-file", "/dev/null"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert "cannot read ConfigMap yk/yunikorn-defaults" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_helm_rendered_yunikorn_defaults_starts_the_shim_unchanged(ring_name):
    """YuniKorn's chart renders service.operatorPlugins (a key nobody reads any more): ignored,
    listed, the rest in force."""
    from test_configmaps_keys import HELM_DEFAULTS

    with Cluster(ring_name, nodes=1) as c:
        c.start_sim()
        apply(Kubectl(c.url, c.tmp), "yunikorn-defaults", HELM_DEFAULTS)
        c.start_engine()
        c.start_shim(extra=["--configmaps"])
        wait_for(lambda: leaf_queues(c) == {"spark"}, 10, "root.spark in force")
        status = wait_for(lambda: c.shim_status()["configMaps"]["inForce"] and
                          c.shim_status()["configMaps"], 5, "the configuration in force")
        assert status["ignoredKeys"] == ["service.operatorPlugins"]
        assert c.shim.tail().count("ignoring unknown configuration key") == 1


def test_event_settings_from_the_configmaps_reach_the_web(ring_name):
    """event.RESTResponseSize and event.maxStreamsPerHost are applied by the web on every update
    (as YuniKorn's REST does); 0 means YuniKorn's default (10000); trackingEnabled false makes
    the event REST answer YuniKorn's 500 instead of the ring's stale history (R9)."""
    with Cluster(ring_name, nodes=3) as c:
        kubectl = start(c)
        web = WebServer(ring_name, workers=1)
        try:
            def batch() -> httpx.Response:
                return httpx.get(web.url + "/ws/v1/events/batch", timeout=5)

            wait_for(lambda: len(batch().json()["EventRecords"] or []) > 3, 10, "some events")
            apply(kubectl, "yunikorn-configs", {"event.RESTResponseSize": "2",
                                                "event.maxStreamsPerHost": "1"})
            wait_for(lambda: len(batch().json()["EventRecords"]) == 2, 10, "batches of 2")
            with httpx.stream("GET", web.url + "/ws/v1/events/stream", timeout=5) as first:
                assert first.status_code == 200
                second = httpx.get(web.url + "/ws/v1/events/stream?count=0", timeout=5)
                assert (second.status_code, second.json()["message"]) == (
                    503, "Too many streaming connections")
            apply(kubectl, "yunikorn-configs", {"event.RESTResponseSize": "0"})
            wait_for(lambda: len(batch().json()["EventRecords"]) > 3, 10, "YuniKorn's default")
            apply(kubectl, "yunikorn-configs", {"event.trackingEnabled": "false"})
            off = wait_for(lambda: batch().status_code == 500 and batch(), 10, "tracking off")
            assert off.json() == {"status_code": 500, "message": "Event tracking is disabled",
                                  "description": "Event tracking is disabled"}
        finally:
            web.stop()
