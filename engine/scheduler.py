"""The scheduler core: partitions, registered RMs, SI message handling and the cycle. No I/O.

`Scheduler.handle(msg, conn_rm)` applies one shim message and returns a `Handled`
(responses to send now, in order, and the problems to report as `Error`). A message is
validated whole before anything changes: a malformed item anywhere in it raises ProtocolError
and none of its items is applied (the partition never serves a half-applied message). Items
that are well formed but refused (an unknown application, a node that exists) are answered
item by item, as YuniKorn does. `cycle()` fires timers
and schedules every partition; `take_outgoing()` returns the asynchronous messages per rmID that
the cycle produced (AllocationResponse.new, app state updates, releases, EventRecords).
The trio code that owns the socket lives in `engine.si_server`; this module is driven directly by
tests and by `bench sched`.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from engine import rm_config
from engine.config import ConfigError, EngineConfig, PartitionConfig
from engine.events_out import request_records
from engine.metrics import EngineMetrics
from engine.history import MetricsHistory
from engine.partition import Outbox, Partition, Timing
from si import messages, protocol
from si.config import apply_log_levels

_RM_PREFIX = re.compile(r"^\[[^\]]*\]")
_TYPED = (messages.RegisterResourceManager, messages.ApplicationRequest, messages.NodeRequest,
          messages.AllocationRequest, messages.UpdateConfiguration)


class OutOfOrderError(Exception):
    """A message that is valid but not acceptable now (before registering, another rmID)."""


@dataclasses.dataclass
class Handled:
    responses: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)


class Scheduler:
    """All partitions of one engine and the RMs registered with it."""

    def __init__(self, config: EngineConfig, sink: Any, *, instance_uuid: str = "",
                 ring_name: str = "", clock: Callable[[], int] = time.monotonic_ns,
                 wall_clock: Callable[[], int] = time.time_ns,
                 timing: Timing | None = None) -> None:
        self.config = config
        self.sink = sink
        self.instance_uuid = instance_uuid
        self.ring_name = ring_name
        self.clock = clock
        self.wall_clock = wall_clock
        self.timing = timing or Timing(retention_s=config.retention_s,
                                       max_retained=config.max_retained_apps)
        self.outbox = Outbox()
        self._pending_other: dict[str, list[dict[str, Any]]] = {}
        self.rms: dict[str, dict[str, Any]] = {}
        self.cycles = 0
        self.started_nano = wall_clock()
        self._reloads = 0
        self.reload_error: tuple[int, str] | None = None
        """(when, why) of the last refused reload (SIGHUP or an RM's); None after a good one."""
        self.config_warnings: list[str] = []
        """Keys of an RM's configuration that keep their running value (engine.rm_config)."""
        self.config_origin = "file"
        """Where the configuration in force came from: "file" or "rm:<rmID>"."""
        self.history = MetricsHistory()
        self.metrics = EngineMetrics()
        """YuniKorn's scheduler metrics (engine.metrics), in the snapshot's `metrics`."""
        self._history_samples = 0
        self.partitions: dict[str, Partition] = {}
        for pcfg in config.partitions:
            self._add_partition(pcfg)
        self.default_partition = config.partitions[0].name

    def _add_partition(self, pcfg: PartitionConfig) -> None:
        self.partitions[pcfg.name] = Partition(pcfg, self.sink, self.outbox, clock=self.clock,
                                               wall_clock=self.wall_clock, timing=self.timing,
                                               metrics=self.metrics)

    @property
    def version(self) -> int:
        return (sum(p.version for p in self.partitions.values()) + len(self.rms)
                + self._history_samples + self._reloads)

    def sample_history(self) -> None:
        """Take one sample of the metrics history (the engine does so every minute)."""
        self.history.sample(self, self.wall_clock())
        self._history_samples += 1

    def refuse_reload(self, reason: str) -> None:
        """A SIGHUP's configuration was refused: the old one stays; the snapshot says why."""
        self.reload_error = (time.time_ns(), reason)
        self._reloads += 1

    def reload(self, config: EngineConfig) -> None:
        """Apply a changed queue configuration (service settings change on restart only)."""
        self.reload_error = None
        self._reloads += 1
        for pcfg in config.partitions:
            part = self.partitions.get(pcfg.name)
            if part is None:
                self._add_partition(pcfg)
            else:
                part.update_config(pcfg)
        self.config = dataclasses.replace(self.config, partitions=config.partitions,
                                          source=config.source, checksum=config.checksum)

    def apply_rm_config(self, rm_id: str, text: str, extra: Mapping[str, str]) -> str | None:
        """An RM's configuration (queues.yaml text + extraConfig), applied as a reload; the
        reason it was refused (the running configuration stays), or None."""
        try:
            config, warnings = rm_config.from_rm(text, extra, self.config)
        except ConfigError as exc:
            self.refuse_reload(str(exc))
            return str(exc)
        before = self.config.extra
        self.reload(config)
        self.config = dataclasses.replace(self.config, event=config.event, extra=config.extra)
        self.config_warnings = warnings
        self.config_origin = f"rm:{rm_id}"
        self.sink.tracking = config.event.tracking_active
        self.sink.requests_enabled = (config.event.request_events_enabled
                                      and config.event.request_store_capacity > 0)
        apply_log_levels(extra, before)
        return None

    def partition_of(self, name: str | None) -> Partition:
        """The partition a message names ("[rm]default" and "default" are the same); KeyError."""
        if not name:
            return self.partitions[self.default_partition]
        return self.partitions[_RM_PREFIX.sub("", name)]

    # --- messages ------------------------------------------------------------------------------

    def handle(self, msg: Mapping[str, Any] | messages.ShimMessage,
               conn_rm: str | None) -> Handled:
        """Apply one message, or nothing of it: a dict is parsed whole (`messages.parse`)
        before anything changes. Raises ProtocolError for a malformed message and
        OutOfOrderError for one not acceptable on this connection now (nothing applied
        either way)."""
        message = msg if isinstance(msg, _TYPED) else messages.parse(msg)
        rm_id = message.rm_id
        result = Handled()
        if isinstance(message, messages.RegisterResourceManager):
            self._register(message, result)
            return result
        if conn_rm is None or rm_id not in self.rms:
            raise OutOfOrderError(f"{message.TYPE} before RegisterResourceManager for rmID "
                                  f"{rm_id!r}")
        if rm_id != conn_rm:
            raise OutOfOrderError(f"{message.TYPE} for rmID {rm_id!r} on the connection of "
                                  f"{conn_rm!r}")
        if isinstance(message, messages.UpdateConfiguration):
            refused = self.apply_rm_config(rm_id, message.config, message.extra_config)
            if refused is not None:
                result.problems.append(f"update of configuration failed: {refused}")
        elif isinstance(message, messages.ApplicationRequest):
            self._applications(message, result)
        elif isinstance(message, messages.NodeRequest):
            self._nodes(message, result)
        else:
            self._allocations(message, result)
        return result

    def _register(self, message: messages.RegisterResourceManager, result: Handled) -> None:
        """A (re-)registration: a known rmID's objects are forgotten (the RM replays them).
        A configuration it carries is applied first; an invalid one refuses the registration
        (YuniKorn: "registration of RM failed")."""
        rm_id = message.rm_id
        if message.config is not None:
            refused = self.apply_rm_config(rm_id, message.config, message.extra_config or {})
            if refused is not None:
                result.problems.append(f"registration of RM failed: {refused}")
                return
        if rm_id in self.rms:
            for part in self.partitions.values():
                part.remove_rm(rm_id)
                if len(self.rms) == 1:
                    part.ugm.clear()
            self.outbox.forget(rm_id)
        self.rms[rm_id] = {"rmID": rm_id, "policyGroup": message.policy_group,
                           "version": message.version, "registeredNano": self.wall_clock()}
        result.responses.append(messages.RegisterResourceManagerResponse(
            self.instance_uuid, self.ring_name, message.id).to_si())

    def _part(self, name: str, what: str, result: Handled) -> Partition | None:
        try:
            return self.partition_of(name)
        except KeyError:
            result.problems.append(f"{what}: unknown partition {name!r}")
            return None

    def _applications(self, message: messages.ApplicationRequest, result: Handled) -> None:
        rm_id = message.rm_id
        accepted: list[str] = []
        rejected: list[messages.RejectedApplication] = []
        for app in message.new:
            app_id = app.application_id
            part = self._part(app.partition_name, f"application {app_id}", result)
            reason = part.add_app(rm_id, app) if part is not None else "unknown partition"
            if reason is None:
                accepted.append(app_id)
            else:
                rejected.append(messages.RejectedApplication(app_id, reason))
        for gone in message.remove:
            app_id = gone.application_id
            part = self._part(gone.partition_name, f"application {app_id}", result)
            if part is not None and not part.remove_app(app_id):
                result.problems.append(f"remove: unknown application {app_id}")
        # state updates caused by this message go out before the accept/reject answer
        result.responses.extend(self._flush_for(rm_id))
        if accepted or rejected:
            result.responses.append(messages.ApplicationResponse(
                tuple(accepted), tuple(rejected)).to_si())

    def _nodes(self, message: messages.NodeRequest, result: Handled) -> None:
        rm_id = message.rm_id
        accepted: list[str] = []
        rejected: list[messages.RejectedNode] = []
        for node in message.nodes:
            node_id = node.node_id
            part = self._part(node.partition_name, f"node {node_id}", result)
            if part is None:
                rejected.append(messages.RejectedNode(node_id, "unknown partition"))
                continue
            action = node.action
            if action == protocol.NODE_CREATE:
                reason = part.add_node(rm_id, node)
            elif action == protocol.NODE_CREATE_DRAIN:
                reason = part.add_node(rm_id, node, drain=True)
            elif action == protocol.NODE_UPDATE:
                reason = part.update_node(node)
            elif action == protocol.NODE_DRAIN:
                reason = part.set_schedulable(node_id, False)
            elif action == protocol.NODE_DRAIN_TO_SCHEDULABLE:
                reason = part.set_schedulable(node_id, True)
            else:  # DECOMISSION
                reason = part.remove_node(node_id)
            if reason is None:
                if action in (protocol.NODE_CREATE, protocol.NODE_CREATE_DRAIN):
                    accepted.append(node_id)
            else:
                rejected.append(messages.RejectedNode(node_id, reason))
                result.problems.append(f"{action} {node_id}: {reason}")
        result.responses.extend(self._flush_for(rm_id))
        if accepted or rejected:
            result.responses.append(messages.NodeResponse(tuple(accepted),
                                                          tuple(rejected)).to_si())

    def _allocations(self, message: messages.AllocationRequest, result: Handled) -> None:
        rm_id = message.rm_id
        box = self.outbox
        for rel in message.allocations_to_release:
            part = self._part(rel.partition_name, "release", result)
            if part is not None:
                part.release_allocation(rel.application_id, rel.allocation_key,
                                        rel.termination_type or "STOPPED_BY_RM", rel.message)
        for ask_rel in message.asks_to_release:
            part = self._part(ask_rel.partition_name, "ask release", result)
            if part is not None:
                part.release_ask(ask_rel.application_id, ask_rel.allocation_key, ask_rel.message)
        for items, add, what in ((message.allocations, Partition.add_existing, "allocation"),
                                 (message.asks, Partition.add_ask, "ask")):
            for item in items:  # existing allocations first: recovery before new asks
                key = item.allocation_key
                part = self._part(item.partition_name, f"{what} {key}", result)
                reason = add(part, rm_id, item) if part is not None else "unknown partition"
                if reason is not None:
                    box.alloc_rejected(rm_id, item.application_id, key, reason)
                    result.problems.append(f"{what} {key}: {reason}")
        result.responses.extend(self._flush_for(rm_id))

    def _flush_for(self, rm_id: str) -> list[dict[str, Any]]:
        """Everything queued for this RM so far (so a request's effects precede its Ack)."""
        out = self.outbox.take()
        mine = out.pop(rm_id, [])
        for other, msgs in out.items():  # rare: effects on another RM's objects
            self._pending_other.setdefault(other, []).extend(msgs)
        return mine

    # --- the cycle -----------------------------------------------------------------------------

    def cycle(self, budget_s: float = 0.05) -> int:
        """Fire due timers and allocate for up to budget_s seconds; allocations made."""
        self.cycles += 1
        started = time.perf_counter()
        deadline = self.clock() + int(budget_s * 1e9)
        made = 0
        for part in self.partitions.values():
            part.tick()
            made += part.schedule(deadline)
        self.metrics.scheduling.observe(time.perf_counter() - started)
        return made

    def pending(self) -> bool:
        """Any partition with pending asks and usable nodes (another cycle may allocate)."""
        return any(p.root.pending_count and len(p.index) for p in self.partitions.values())

    def take_outgoing(self) -> dict[str, list[dict[str, Any]]]:
        """Asynchronous messages per rmID: responses from the cycle, then request events."""
        out = self.outbox.take()
        for rm, msgs in self._pending_other.items():
            out.setdefault(rm, [])[:0] = msgs
        self._pending_other = {}
        events = self.sink.take_requests()
        if events:
            by_rm: dict[str, list[messages.EventRecord]] = {}
            for record in request_records(events):
                rm = self._rm_of_app(record.reference_id)
                if rm is not None:
                    by_rm.setdefault(rm, []).append(record)
            for rm, records in by_rm.items():
                out.setdefault(rm, []).append(messages.EventRecords(tuple(records)).to_si())
        return out

    def _rm_of_app(self, app_id: str) -> str | None:
        for part in self.partitions.values():
            app = part.apps.get(app_id) or part.terminated.get(app_id)
            if app is not None:
                return app.rm_id
        if len(self.rms) == 1:
            return next(iter(self.rms))
        return None

