"""YuniKorn's Prometheus metric families (core pkg/metrics), rendered from the state snapshot.

So a YuniKorn Grafana dashboard (k8shim deployments/grafana-dashboard/yunikorn-metrics.json) reads
ykshm's `/ws/v1/metrics` unchanged. Names, types and labels are YuniKorn's:

- counters the engine keeps (engine.metrics, the snapshot's `metrics`):
  `yunikorn_scheduler_container_allocation_attempt_total{state}`,
  `yunikorn_scheduler_application_submission_total{result}`,
  `yunikorn_queue_app_total{queue,state}`, `yunikorn_<queue>_queue_container{state}` (the queue's
  path with `.` as `_`, YuniKorn's subsystem);
- histograms, observed in seconds under YuniKorn's `_milliseconds` names and buckets:
  `yunikorn_scheduler_scheduling_latency_milliseconds` (one scheduling cycle) and
  `yunikorn_scheduler_trypreemption_latency_milliseconds` (one preemption attempt);
- gauges derived from the snapshot as it is published: `yunikorn_scheduler_application_total{state}`
  (applications by lowercase state), `yunikorn_scheduler_node{state}` (`active` schedulable nodes,
  `draining` the others), `yunikorn_scheduler_<resource>_node_usage_total{range}` (nodes per
  usage decile of each resource), `yunikorn_queue_app{queue,state}`,
  `yunikorn_queue_resource{queue,state,resource}` (guaranteed, max, allocated, pending,
  preempting; maxRunningApps).

Not served: YuniKorn's per-node check timings (`trynode_*`, `node_sorting_*`): the engine does not
time each node it looks at (that is its hot loop).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

RANGES = ("[0,10%]", "(10%,20%]", "(20%,30%]", "(30%,40%]", "(40%,50%]", "(50%,60%]",
          "(60%,70%]", "(70%,80%]", "(80%,90%]", "(90%,100%]")
"""YuniKorn's resourceUsageRangeBuckets."""
_INVALID = re.compile(r"[^a-zA-Z0-9_:]")
_QUEUE_STATES = (("guaranteedResource", "guaranteed"), ("maxResource", "max"),
                 ("allocatedResource", "allocated"), ("pendingResource", "pending"),
                 ("preemptingResource", "preempting"))


def metric_name(text: str) -> str:
    """YuniKorn's formatMetricName: every character Prometheus does not allow becomes `_`."""
    return _INVALID.sub("_", text)


def families(doc: dict[str, Any]) -> Iterator[Any]:
    """Every YuniKorn family from one snapshot document."""
    yield from _engine_counters(doc.get("metrics") or {})
    yield from _applications(doc)
    yield from _nodes(doc)
    yield from _queues(doc)


def _engine_counters(metrics: dict[str, Any]) -> Iterator[Any]:
    for name, help_, label, values in (
            ("yunikorn_scheduler_container_allocation_attempt",
             "Total number of attempts to allocate containers. State of the attempt includes "
             "`allocated`, `rejected`, `error`, `released`", "state", metrics.get("containers")),
            ("yunikorn_scheduler_application_submission",
             "Total number of application submissions. State of the attempt includes `new`, "
             "`accepted` and `rejected`.", "result", metrics.get("submissions"))):
        family = CounterMetricFamily(name, help_, labels=[label])
        for value_label, value in sorted((values or {}).items()):
            family.add_metric([value_label], value)
        yield family
    terminal = CounterMetricFamily(
        "yunikorn_queue_app", "Total number of applications that reached a terminal state. "
        "State includes `completed`, `failed`, `rejected`.", labels=["queue", "state"])
    for queue, states in sorted((metrics.get("queueTerminal") or {}).items()):
        for state, value in sorted(states.items()):
            terminal.add_metric([queue, state], value)
    yield terminal
    for queue, states in sorted((metrics.get("queueContainers") or {}).items()):
        family = CounterMetricFamily(
            f"yunikorn_{metric_name(queue)}_queue_container",
            "Queue container metrics. State of the attempt includes `allocated`, `released`.",
            labels=["state"])
        for state, value in sorted(states.items()):
            family.add_metric([state], value)
        yield family
    buckets = metrics.get("buckets") or []
    for name, help_, key in (
            ("yunikorn_scheduler_scheduling_latency_milliseconds",
             "Latency of the main scheduling routine, in seconds.", "schedulingLatency"),
            ("yunikorn_scheduler_trypreemption_latency_milliseconds",
             "Latency of preemption condition checks for container allocations, in seconds.",
             "preemptionLatency")):
        family = HistogramMetricFamily(name, help_)
        observed = metrics.get(key) or {}
        counts = observed.get("counts") or [0] * len(buckets)
        cumulative, points = 0, []
        for bound, count in zip(buckets, counts):
            cumulative += count
            points.append((repr(float(bound)), cumulative))
        points.append(("+Inf", observed.get("count", 0)))
        family.add_metric([], points, observed.get("sum", 0.0))
        yield family


def _all(doc: dict[str, Any], section: str) -> list[dict[str, Any]]:
    return [item for items in (doc.get(section) or {}).values() for item in items or []
            if isinstance(item, dict)]


def _applications(doc: dict[str, Any]) -> Iterator[Any]:
    apps = _all(doc, "applications")
    total = GaugeMetricFamily(
        "yunikorn_scheduler_application_total", "Total number of applications. State of the "
        "application includes `running`, `resuming`, `failing`, `completing`, `completed` and "
        "`failed`.", labels=["state"])
    for state, count in sorted(Counter(str(a.get("applicationState", "")).lower()
                                       for a in apps).items()):
        total.add_metric([state], count)
    yield total
    per_queue = GaugeMetricFamily(
        "yunikorn_queue_app", "Queue application metrics. State of the application includes "
        "`new`, `accepted`, `rejected`, `running`, `failing`, `failed`, `resuming`, "
        "`completing`, `completed`.", labels=["queue", "state"])
    for (queue, state), count in sorted(Counter(
            (str(a.get("queueName", "")), str(a.get("applicationState", "")).lower())
            for a in apps).items()):
        per_queue.add_metric([queue, state], count)
    yield per_queue


def _nodes(doc: dict[str, Any]) -> Iterator[Any]:
    nodes = _all(doc, "nodes")
    states = GaugeMetricFamily("yunikorn_scheduler_node", "Total number of nodes. State of the "
                               "node includes `active` and `failed`.", labels=["state"])
    by_state = Counter("active" if n.get("schedulable", True) else "draining" for n in nodes)
    for state in ("active", "draining"):
        states.add_metric([state], by_state[state])
    yield states
    usage: dict[str, list[int]] = {}
    for node in nodes:
        capacity, allocated = node.get("capacity") or {}, node.get("allocated") or {}
        for resource, cap in capacity.items():
            if cap:
                ratio = min(max(allocated.get(resource, 0) / cap, 0.0), 1.0)
                decile = max(0, min(9, int(-(-ratio * 10 // 1)) - 1))
                usage.setdefault(resource, [0] * 10)[decile] += 1
    for resource, counts in sorted(usage.items()):
        family = GaugeMetricFamily(f"yunikorn_scheduler_{metric_name(resource)}_node_usage_total",
                                   "Total resource usage of node, by resource name.",
                                   labels=["range"])
        for label, count in zip(RANGES, counts):
            family.add_metric([label], count)
        yield family


def _queues(doc: dict[str, Any]) -> Iterator[Any]:
    family = GaugeMetricFamily(
        "yunikorn_queue_resource", "Queue resource metrics. State of the resource includes "
        "`guaranteed`, `max`, `allocated`, `pending`, `preempting`, `maxRunningApps`.",
        labels=["queue", "state", "resource"])
    stack = [q for q in (doc.get("queues") or {}).values() if isinstance(q, dict)]
    while stack:
        queue = stack.pop()
        path = str(queue.get("queuename", ""))
        for key, state in _QUEUE_STATES:
            for resource, value in sorted((queue.get(key) or {}).items()):
                family.add_metric([path, state, resource], value)
        if queue.get("maxRunningApps"):
            family.add_metric([path, "maxRunningApps", "apps"], queue["maxRunningApps"])
        stack.extend(c for c in queue.get("children") or [] if isinstance(c, dict))
    yield family
