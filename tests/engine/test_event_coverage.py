"""Every row of the event-history seed's "Event overview" tables comes from a real code path.

The rows are read from the seed itself, so a row added there fails here until it is emitted.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from engine_helpers import Harness, res

from engine.config import parse_config
from shm.events import EventChangeDetail, EventChangeType, EventRecordType

SEED = Path("/work/shared/seeds/event-history-tracking.txt")
ROW = re.compile(r"^(REQUEST|APP|NODE|QUEUE) \| (NONE|SET|ADD|REMOVE) \| (\w+) \|", re.M)


def seed_rows() -> set[tuple[int, int, int]]:
    text = SEED.read_text(encoding="utf-8")
    start = text.index("Generic events")
    rows = set()
    for kind, change, detail in ROW.findall(text[start:]):
        rows.add((int(EventRecordType[kind]), int(EventChangeType[change]),
                  int(EventChangeDetail[detail])))
    return rows


def run_everything() -> set[tuple[int, int, int]]:
    seen: set[tuple[int, int, int]] = set()
    harnesses = []

    # normal lifecycle + node changes + releases of every termination type
    h = Harness({"partitions": [{"name": "default", "placementrules": [{"name": "provided", "create": True}],
                                 "queues": [{"name": "root", "queues": [
        {"name": "fixed", "resources": {"guaranteed": {"memory": "1Gi"},
                                        "max": {"memory": "64Gi"}}},
        {"name": "gone"}, {"name": "small", "resources": {"max": {"memory": "1Gi"}}}]}]}]})
    harnesses.append(h)
    h.nodes("n1", "n2", cap=res(4, 4000))
    h.app("a", queue="root.dynamic-q")
    h.asks("a", "p1", "p2", "p3", "p4", "p5")
    h.cycle()
    h.release("a", "p1")
    h.release("a", "p2", "PREEMPTED_BY_SCHEDULER")
    h.release("a", "p3", "TIMEOUT")
    h.handle({"type": "NodeRequest", "nodes": [
        {"nodeID": "n1", "action": "UPDATE", "schedulableResource": {"resources": {
            "memory": {"value": 8 << 30}, "vcore": {"value": 4000}}},
         "occupiedResource": {"resources": {"memory": {"value": 1}}},
         "attributes": {"ready": "false"}},
        {"nodeID": "n1", "action": "DRAIN_NODE"}]})
    h.handle({"type": "NodeRequest", "nodes": [{"nodeID": n, "action": "DECOMISSION"}
                                               for n in ("n1", "n2")]})
    h.asks("a", "q1")
    h.release_ask("a", "q1")
    h.asks("a", "q2")
    h.remove_app("a")
    h.app("b", queue="root.fixed")
    h.asks("b", "b1")
    h.app("r", queue="root")  # a parent queue: rejected
    h.app("s", queue="root.small")
    h.nodes("n3", cap=res(4, 4000))
    h.asks("s", "s1", "s2")  # s2 exceeds the queue max: request event
    h.cycle()
    h.release("b", "b1")
    h.clock.advance(40)
    h.cycle()
    h.clock.advance(4000)
    h.cycle()
    h.sched.reload(parse_config({"partitions": [{"name": "default", "queues": [
        {"name": "root", "queues": [{"name": "fixed", "resources": {
            "guaranteed": {"memory": "2Gi"}, "max": {"memory": "32Gi"}},
            "queues": [{"name": "child"}]}]}]}]}))

    # reservation
    h = Harness()
    harnesses.append(h)
    h.nodes("n1", cap=res(4, 4000))
    h.app("x")
    h.asks("x", "x1", resource=res(3, 100))
    h.cycle()
    h.app("y")
    h.asks("y", "y1", resource=res(4, 100))
    h.cycle()
    h.release("x", "x1")
    h.cycle()

    # gang: replaced, size mismatch, soft and hard timeouts
    for style in ("Soft", "Hard"):
        h = Harness()
        harnesses.append(h)
        h.nodes("n1", cap=res(2, 2000))
        h.app("g", gangSchedulingStyle=style, executionTimeoutMilliSeconds=1000)
        h.asks("g", "ph1", "ph2", "ph3", placeholder=True, task_group="tg", resource=res(1, 500))
        h.cycle()
        h.clock.advance(2)
        h.cycle()
    h = Harness()
    harnesses.append(h)
    h.nodes("n1", cap=res(8, 8000))
    h.app("g", executionTimeoutMilliSeconds=1000)
    h.asks("g", "ph1", "ph2", placeholder=True, task_group="tg", resource=res(1, 500))
    h.cycle()
    h.asks("g", "real1", task_group="tg", resource=res(1, 500))
    h.asks("g", "real2", task_group="tg", resource=res(2, 500))
    h.cycle()
    h.cycle()

    for h in harnesses:
        seen |= {(e.type, e.change_type, e.detail) for e in h.sink.events}
        seen |= {(e["type"], e["eventChangeType"], e["eventChangeDetail"])
                 for e in h.request_events()}
    return seen


def test_seed_has_the_expected_rows():
    # 23 APP + 10 NODE + 9 QUEUE rows, and REQUEST/NONE/DETAILS_NONE (two rows, one triple)
    assert len(seed_rows()) == 43


@pytest.fixture(scope="module")
def everything() -> set[tuple[int, int, int]]:
    return run_everything()


@pytest.mark.parametrize("row", sorted(seed_rows()))
def test_row_is_emitted(row, everything):
    kind, change, detail = row
    assert row in everything, (EventRecordType(kind).name, EventChangeType(change).name,
                               EventChangeDetail(detail).name)
