"""End to end: a high-priority pod in a queue below its guarantee evicts a pod of a queue above
its guarantee and runs (real sim-cluster, engine and shim: tools.harness). The victim is marked
`DisruptionTarget` (reason PreemptionByScheduler) before it is deleted, as kube-scheduler does."""

from __future__ import annotations


import pytest

from tools.harness import Cluster, ObjectWatch, wait_for

CONFIG = """\
partitions:
  - name: default
    queues:
      - name: root
        queues:
          - name: batch
          - name: prod
            resources:
              guaranteed: {vcore: 1, memory: 1Gi}
            properties:
              preemption.delay: 1s
service:
  event:
    requestEventsEnabled: true
"""


@pytest.fixture
def one_node(ring_name):
    c = Cluster(ring_name, nodes=0, engine_config=CONFIG)
    try:
        c.start_all()
        c.create_node("node-p", cpu="2", memory="4Gi")
        yield c
    finally:
        c.close()


def PodWatch(url: str, name: str) -> ObjectWatch:
    """Every watch event of one pod, (type, its conditions), in a thread."""
    return ObjectWatch(url, "/api/v1/namespaces/default/pods", name,
                       lambda ev: (ev["type"], ev["object"].get("status", {}).get("conditions") or []))


def disruption(conditions: list[dict]) -> dict | None:
    return next((c for c in conditions if c["type"] == "DisruptionTarget" and c["status"] == "True"), None)


def test_high_priority_pod_below_guarantee_evicts_and_runs(one_node):
    c = one_node
    for name in ("batch-1", "batch-2"):
        c.create_pod(name, app="app-batch", queue="root.batch", cpu="1")
        c.wait_bound([name], timeout=30, phase="Running")
    victim = PodWatch(c.url, "batch-2")
    c.create_pod("urgent", app="app-prod", queue="root.prod", cpu="1",
                 spec_extra={"priority": 1000})
    c.wait_bound(["urgent"], timeout=30, phase="Running")
    names = {p["metadata"]["name"] for p in c.pods("default")}
    assert names == {"batch-1", "urgent"}   # the newer batch pod was the victim, and is gone
    assert c.pod("urgent")["spec"]["nodeName"] == "node-p"
    try:
        wait_for(lambda: any(t == "DELETED" for t, _ in victim.seen), 15, "the victim's deletion watched")
    finally:
        victim.close()
    marked = next(i for i, (t, conds) in enumerate(victim.seen) if disruption(conds))
    assert marked < next(i for i, (t, _) in enumerate(victim.seen) if t == "DELETED")
    assert disruption(victim.seen[marked][1])["reason"] == "PreemptionByScheduler"
    before = {c["type"] for c in victim.seen[marked - 1][1]} if marked else set()
    assert before and before <= {c["type"] for c in victim.seen[marked][1]}   # the others kept
    assert not [t for t, conds in victim.seen[:marked] if disruption(conds)]

    urgent_uid = c.pod("urgent")["metadata"]["uid"]
    wanted = {("Preempted", "Preempted by the scheduler: preempting allocations to free up "
                            f"resources to run ask: {urgent_uid}"),
              ("Informational", f"Preempted by {urgent_uid} from application app-prod in "
                                "root.prod")}

    def victim_events():
        got = {(e["reason"], e["message"]) for e in c.events()
               if e["involvedObject"]["name"] == "batch-2"}
        return wanted <= got

    wait_for(victim_events, 15, "the victim's Preempted and Informational events")
    assert not [e for e in c.events() if e["involvedObject"]["name"] == "batch-1"
                and "reempt" in e["message"]]

    def released():
        apps = {a["applicationID"]: a for a in c.applications()}
        batch = apps.get("app-batch")
        return batch is not None and len(batch.get("allocations") or []) == 1 and apps
    wait_for(released, 15, "the victim's allocation gone from the engine")
