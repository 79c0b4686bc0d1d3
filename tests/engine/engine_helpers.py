"""Test helpers: a scheduler with an in-memory sink, a fake clock, and SI message builders."""

from __future__ import annotations

from typing import Any

from engine.config import parse_config
from engine.events_out import MemoryEventSink
from engine.partition import Timing
from engine.scheduler import Scheduler
from si import messages

RM = "rm-1"

# SI keys a test may pass to `Harness.app(**extra)` -> AddApplication fields
_APP_FIELDS = {"partitionName": "partition_name", "tags": "tags",
               "gangSchedulingStyle": "gang_scheduling_style",
               "executionTimeoutMilliSeconds": "execution_timeout_ms"}
GI = 1 << 30


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000_000

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * 1e9)


def res(memory_gi: float = 1, vcore: int = 1000, **extra: int) -> dict[str, int]:
    out = {"memory": int(memory_gi * GI), "vcore": vcore}
    out.update(extra)
    return out


class Harness:
    """A Scheduler driven like the SI server drives it."""

    def __init__(self, config: dict[str, Any] | None = None, *, requests: bool = True,
                 tracking: bool = True, timing: Timing | None = None) -> None:
        self.clock = FakeClock()
        self.sink = MemoryEventSink(tracking=tracking, requests_enabled=requests)
        self.sched = Scheduler(parse_config(config or {}), self.sink, instance_uuid="uuid-1",
                               ring_name="ring-1", clock=self.clock,
                               timing=timing or Timing(placeholder_default_ms=10_000,
                                                       starting_s=300, completing_s=30,
                                                       retention_s=3600))
        self.responses: list[dict[str, Any]] = []
        self.handle({"type": "RegisterResourceManager", "rmID": RM}, None)

    @property
    def part(self):
        return self.sched.partitions["default"]

    def handle(self, msg: dict[str, Any] | messages.ShimMessage, conn: str | None = RM):
        if isinstance(msg, dict):
            msg.setdefault("rmID", RM)
        handled = self.sched.handle(msg, conn)
        self.responses.extend(handled.responses)
        return handled

    def nodes(self, *ids: str, cap: dict[str, int] | None = None, action: str = "CREATE",
              occupied: dict[str, int] | None = None, attributes: dict | None = None):
        return self.handle(messages.NodeRequest(RM, tuple(
            messages.NodeChange(node_id, action, attributes,
                                schedulable_resource=cap or res(8, 8000),
                                occupied_resource=occupied) for node_id in ids)))

    def app(self, app_id: str, queue: str = "root.default", user: str = "alice",
            groups: tuple[str, ...] = (), **extra: Any):
        extra.setdefault("tags", {"namespace": "default"})  # as the shim sends it
        fields = {_APP_FIELDS[key]: value for key, value in extra.items()}
        return self.handle(messages.ApplicationRequest(RM, new=(messages.AddApplication(
            app_id, queue, ugi=messages.UserGroupInfo(user, tuple(groups)), **fields),)))

    def remove_app(self, app_id: str):
        return self.handle(messages.ApplicationRequest(
            RM, remove=(messages.RemoveApplication(app_id),)))

    def asks(self, app_id: str, *keys: str, resource: dict[str, int] | None = None,
             priority: int = 0, placeholder: bool = False, task_group: str = "",
             tags: dict[str, str] | None = None,
             preemption: messages.PreemptionPolicy | None = None):
        return self.handle(messages.AllocationRequest(RM, asks=tuple(
            messages.AllocationAsk(k, app_id, resource_ask=resource or res(), priority=priority,
                                   placeholder=placeholder, task_group_name=task_group,
                                   allocation_tags=tags or {}, preemption_policy=preemption)
            for k in keys)))

    def release(self, app_id: str, key: str, termination: str = "STOPPED_BY_RM"):
        return self.handle(messages.AllocationRequest(RM, allocations_to_release=(
            messages.AllocationRelease(app_id, key, termination_type=termination),)))

    def release_ask(self, app_id: str, key: str):
        return self.handle(messages.AllocationRequest(RM, asks_to_release=(
            messages.AskRelease(app_id, key),)))

    def cycle(self, times: int = 1) -> int:
        made = 0
        for _ in range(times):
            made += self.sched.cycle(1.0)
        for msgs in self.sched.take_outgoing().values():
            self.responses.extend(msgs)
        return made

    def allocated(self) -> dict[str, str]:
        """allocationKey -> nodeID of every AllocationResponse.new seen so far."""
        out = {}
        for msg in self.responses:
            if msg["type"] == "AllocationResponse":
                for new in msg["new"]:
                    out[new["allocationKey"]] = new["nodeID"]
        return out

    def released(self) -> list[dict[str, Any]]:
        return [r for m in self.responses if m["type"] == "AllocationResponse"
                for r in m["released"]]

    def request_events(self) -> list[dict[str, Any]]:
        """Every EventRecords event sent to the shim so far."""
        return [e for m in self.responses if m["type"] == "EventRecords" for e in m["events"]]

    def state(self, app_id: str) -> str:
        part = self.part
        app = part.apps.get(app_id) or part.terminated.get(app_id)
        return app.fsm.state.value

    def app_events(self, app_id: str) -> list[tuple[int, int, int, str]]:
        """(type, change_type, detail, reference_id) of the APP events of one app."""
        return [(e.type, e.change_type, e.detail, e.reference_id)
                for e in self.sink.events if e.type == 2 and e.object_id == app_id]

    def details(self, object_id: str) -> list[int]:
        return [e.detail for e in self.sink.events if e.object_id == object_id]
