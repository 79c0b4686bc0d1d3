"""`/ws/v1/metrics` serves YuniKorn's metric families (core pkg/metrics) besides ykshm's, so a
YuniKorn Grafana dashboard reads it: a real sim-cluster, engine, shim and `ykshm web`, scraped
and parsed with prometheus_client's own text parser."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tools.harness import Cluster, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "web"))
from webharness import WebServer  # noqa: E402

DASHBOARD = {  # the names k8shim deployments/grafana-dashboard/yunikorn-metrics.json queries
    "yunikorn_scheduler_container_allocation_attempt": "counter",
    "yunikorn_scheduler_application_submission": "counter",
    "yunikorn_scheduler_application_total": "gauge",
    "yunikorn_scheduler_scheduling_latency_milliseconds": "histogram",
    "yunikorn_scheduler_trypreemption_latency_milliseconds": "histogram",
    "yunikorn_scheduler_memory_node_usage_total": "gauge",
    "yunikorn_scheduler_vcore_node_usage_total": "gauge",
    "yunikorn_scheduler_pods_node_usage_total": "gauge",
}
"""Family names as the parser reports them (a counter's `_total` is its samples' suffix)."""


def scrape(web: WebServer) -> dict[tuple[str, str], object]:
    text = httpx.get(web.url + "/ws/v1/metrics", timeout=5).text
    return {(f.name, f.type): f for f in text_string_to_metric_families(text)}


def value(family, **labels) -> float:
    return sum(s.value for s in family.samples
               if all(s.labels.get(k) == v for k, v in labels.items())
               and not s.name.endswith("_created"))


def test_yunikorns_metric_names_and_types(ring_name):
    with Cluster(ring_name, nodes=3) as c:
        c.start_all()
        for i in range(4):
            c.create_pod(f"p{i}", app="app-m", queue="root.a")
        c.wait_bound([f"p{i}" for i in range(4)])
        web = WebServer(ring_name, workers=1)
        try:
            got = wait_for(lambda: (lambda m: m if value(m[(
                "yunikorn_scheduler_container_allocation_attempt", "counter")],
                state="allocated") >= 4 else None)(scrape(web)), 10, "4 allocations counted")
            for name, kind in DASHBOARD.items():
                assert (name, kind) in got, name
            assert ("ykshm_web_requests", "counter") in got  # ours stay
            assert value(got[("yunikorn_scheduler_application_submission", "counter")],
                         result="accepted") == 1
            assert value(got[("yunikorn_scheduler_application_total", "gauge")],
                         state="running") == 1
            assert value(got[("yunikorn_scheduler_node", "gauge")], state="active") == 3
            assert value(got[("yunikorn_scheduler_memory_node_usage_total", "gauge")]) == 3
            latency = got[("yunikorn_scheduler_scheduling_latency_milliseconds", "histogram")]
            assert value(latency, le="+Inf") > 0
            assert value(got[("yunikorn_queue_resource", "gauge")], queue="root.a",
                         state="allocated", resource="memory") == 4 * 64 * 2**20
            assert value(got[("yunikorn_queue_app", "gauge")], queue="root.a",
                         state="running") == 1
            assert value(got[("yunikorn_root_a_queue_container", "counter")],
                         state="allocated") == 4
        finally:
            web.stop()
