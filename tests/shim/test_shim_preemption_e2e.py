"""End to end: a high-priority pod in a queue below its guarantee evicts a pod of a queue above
its guarantee and runs (real sim-cluster, engine and shim: tools.harness)."""

from __future__ import annotations

import pytest

from tools.harness import Cluster, wait_for

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


def test_high_priority_pod_below_guarantee_evicts_and_runs(one_node):
    c = one_node
    for name in ("batch-1", "batch-2"):
        c.create_pod(name, app="app-batch", queue="root.batch", cpu="1")
        c.wait_bound([name], timeout=30, phase="Running")
    c.create_pod("urgent", app="app-prod", queue="root.prod", cpu="1",
                 spec_extra={"priority": 1000})
    c.wait_bound(["urgent"], timeout=30, phase="Running")
    names = {p["metadata"]["name"] for p in c.pods("default")}
    assert names == {"batch-1", "urgent"}   # the newer batch pod was the victim, and is gone
    assert c.pod("urgent")["spec"]["nodeName"] == "node-p"

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
