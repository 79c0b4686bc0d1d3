"""The consistent-region operator of one job under trio: one queue and one task per region.

Why one task per region: OpenStreams' state machine takes one event at a time and, after a change,
waits until the ConsistentRegion's new status is visible before the next event (the seed's
consistency rule); regions are independent, so each gets its own queue and a slow write in one
never delays another.

Per batch of events, in order (`_RegionTask.process`):
1. A `Recheck` (monitors: a PE or pod of the region changed) becomes `RegionUpdate` with the health
   the health source answers now; a forced `ResetRequest` gets the current health the same way.
2. `Region.handle` (fsm.py), event after event. A refusal (RegionError) changes nothing.
3. `ClearBoard` and `CancelTimers` act at once (a PE never reads a notification of an abandoned
   round; a cancelled timer never fires).
4. If any event changed the region: `await status_writer(index, status_doc)`, which returns when
   the write is visible (for Kubernetes: when the ConsistentRegion watch has seen the new
   resourceVersion). No event is taken while a write is in flight.
5. Then the notifications are posted (board + UDP), timers armed, metrics set, and every caller of
   `submit` gets its answer: a 2xx from the REST API means the report is persisted.

Coalescing (`coalesce=True`, the default): a batch is the event taken plus every event already
queued behind it (up to MAX_BATCH), applied one at a time in order to the in-memory region, under
ONE status write. What the seed's rule protects still holds: OpenStreams waits for the write
because its next event reads the region back from the informer cache; ours reads the in-memory
region, and nothing leaves the operator (notification, answer, timer) before the status that
includes it is visible. A 100-PE drain costs a few writes instead of 100 round trips to the
apiserver. `coalesce=False` writes after every event, the seed to the letter.

Timers carry the region's timer sequence number; a timer that fires after a cancel is stale and
the FSM ignores it, so a race between a cancel and an expiry cannot act twice.

Start (`run`): when `restarted` (the ConsistentRegionOperator's hasStarted was already true), every
region first takes `OperatorRestarted` (STARTED, unhealthy; its status written) before any other
event, so the next healthy update resets it. Then each region rechecks its health once.

Resource handling
    `run` owns a nursery: one task per region, each with a nursery for its timers, plus the UDP
    socket, closed when `run` returns.

Error handling
    A refused event is answered to its caller and the region goes on. An exception from the status
    writer or the health source ends `run` (the whole operator): the writer is expected to retry
    what is transient itself; what it cannot fix is a reason to exit and be restarted by the
    supervisor (`ykshm streams`), after which hasStarted forces the regions through a reset.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable

import trio

from .board import Notification, NotificationBoard
from .errors import RegionError, UnknownRegion
from .fsm import Region
from .vocabulary import Action, ArmTimer, CancelTimers, Checkpoint, ClearBoard, Event, MetricSamples, Notify, OperatorRestarted, RegionState, RegionUpdate, ResetDone, ResetRequest, StatusChanged, Timeout
from .health import Health
from .metrics import RegionMetrics
from .udp import AddressBook, UdpNotifier

log = logging.getLogger("ykshm.cr-operator")

MAX_BATCH = 1024
"""Most events applied under one status write (coalescing, see the module docstring)."""

LINGER_GAP, LINGER_MAX = 0.002, 0.010
"""Group commit of a round's reports (seconds): when a batch held several PEs' reports
(checkpoints, resets) and leaves the round open (DRAINING, CHECKPOINT_PENDING, RESETTING), the
region task waits up to LINGER_GAP for the next event, LINGER_MAX in all, before writing. 100 PEs
report over ~30 ms on a busy machine; without the wait a round's reports were often cut in two,
and the second part waited for the first's write (5-15 ms) before it could finish the round.
Only a batch of several reports lingers: reports that come one at a time (a PE that waits for
its answer before the next PE can report, as in a pipeline passing a drain marker) would each pay
the wait and gain nothing. A report's answer is delayed by at most LINGER_MAX."""

_OPEN_ROUND = (RegionState.DRAINING, RegionState.CHECKPOINT_PENDING, RegionState.RESETTING)


StatusWriter = Callable[[int, dict], Awaitable[None]]
"""(region index, status document) -> returns once the written status is visible."""

HealthSource = Callable[[int], Awaitable[Health]]
"""region index -> its health now (health.region_health computes it from the PEs and pods)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Recheck:
    """A PE or pod of the region changed: ask the health source and feed the answer to the FSM."""


@dataclasses.dataclass(frozen=True, slots=True)
class Members:
    """The region's members changed (a parallel region inside it was scaled): set them, recheck."""

    pes: frozenset[int]


class _Reply:
    """Where `submit` waits for the outcome of its event."""

    __slots__ = ("done", "actions", "error")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.actions: list[Action] = []
        self.error: RegionError | None = None


class RegionOperator:
    """The operator of one job: its regions, board, metrics, and the tasks that drive them."""

    def __init__(self, job: str, regions: Iterable[Region], *, status_writer: StatusWriter,
                 health_source: HealthSource, addresses: AddressBook | None = None,
                 restarted: bool = False, clock_ms: Callable[[], float] | None = None,
                 coalesce: bool = True) -> None:
        self.job = job
        self.regions = {r.index: r for r in regions}
        self.status_writer = status_writer
        self.health_source = health_source
        self.addresses = addresses
        self.restarted = restarted
        self.coalesce = coalesce
        self.clock_ms = clock_ms or (lambda: time.time() * 1000.0)
        self.board = NotificationBoard()
        self.metrics = RegionMetrics(job)
        self._udp: UdpNotifier | None = None
        self._tasks = {index: _RegionTask(self, region) for index, region in self.regions.items()}
        for region in self.regions.values():
            self.metrics.update(region.index, region.metric_samples())

    def region(self, index: int) -> Region:
        try:
            return self.regions[index]
        except KeyError:
            raise UnknownRegion(f"job {self.job} has no consistent region {index}",
                                region=index) from None

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Drive every region until cancelled; `started` once restart statuses are written."""
        if self.addresses is not None:
            self._udp = UdpNotifier(self.addresses)
        try:
            if self.restarted:
                for task in self._tasks.values():
                    await task.process([(OperatorRestarted(), None)])
            async with trio.open_nursery() as nursery:
                for task in self._tasks.values():
                    nursery.start_soon(task.run)
                    task.post(Recheck())
                task_status.started(self)
        finally:
            if self._udp is not None:
                self._udp.close()

    async def submit(self, index: int, event: Event) -> list[Action]:
        """Queue an event behind the region's others and wait for its outcome (raises RegionError)."""
        task = self._task(index)
        reply = _Reply()
        task.post(event, reply)
        await reply.done.wait()
        if reply.error is not None:
            raise reply.error
        return reply.actions

    def post(self, index: int, event: Event | Recheck) -> None:
        """Queue an event without waiting (monitors: `post(index, Recheck())`)."""
        self._task(index).post(event)

    def set_members(self, index: int, pes: Iterable[int]) -> None:
        """The region's `pesInRegion` changed: apply it in the region's queue, then recheck."""
        self.post(index, Members(frozenset(pes)))

    def welcome(self, region: Region, new: Iterable[int], members: Iterable[int]) -> None:
        """New members get the notification the others hold (a drain under way reaches them)."""
        note = next((n for pe in members if (n := self.board.get(pe, region.index)) is not None), None)
        pes = tuple(sorted(new))
        if note is not None and pes:
            self.board.post(pes, region.index, note)
            if self._udp is not None:
                self._udp.send(pes, region.index, note)

    def recheck_all(self, indexes: Iterable[int]) -> None:
        """A PE or pod changed: recheck every region it belongs to."""
        for index in indexes:
            self.post(index, Recheck())

    def _task(self, index: int) -> "_RegionTask":
        self.region(index)
        return self._tasks[index]

    def _notify(self, region: Region, action: Notify) -> None:
        notification = Notification(action.kind.value, action.message)
        self.board.post(action.pes, region.index, notification)
        if self._udp is not None:
            self._udp.send(action.pes, region.index, notification)


@dataclasses.dataclass
class _Step:
    """What one status write covers: the actions waiting for it, the callers to answer, whether
    the region changed, and how many of the events were PEs' reports (checkpoints, resets)."""

    deferred: list[Action] = dataclasses.field(default_factory=list)
    answers: list[tuple[_Reply, list[Action], RegionError | None]] = dataclasses.field(default_factory=list)
    changed: bool = False
    reports: int = 0


class _RegionTask:
    """One region's queue, the task draining it, and its armed timers."""

    def __init__(self, operator: RegionOperator, region: Region) -> None:
        self.operator = operator
        self.region = region
        self._send, self._receive = trio.open_memory_channel(math.inf)
        self._armed: list[trio.CancelScope] = []
        self._timers: trio.Nursery | None = None

    def post(self, event, reply: _Reply | None = None) -> None:
        self._send.send_nowait((event, reply))

    async def run(self) -> None:
        async with trio.open_nursery() as timers:
            self._timers = timers
            async for item in self._receive:
                await self.process(self._queued_behind(item))

    def _queued_behind(self, item: tuple) -> list[tuple]:
        """`item` and, when coalescing, every event already queued behind it."""
        batch = [item]
        while self.operator.coalesce and len(batch) < MAX_BATCH:
            try:
                batch.append(self._receive.receive_nowait())
            except trio.WouldBlock:
                break
        return batch

    async def process(self, batch: list[tuple]) -> None:
        """Apply the events in order (and, coalescing, the reports that follow them closely:
        LINGER_GAP), write the status once if any changed it, then carry out what waits for a
        visible status and answer every caller (refusals included)."""
        step = _Step()
        await self._apply(batch, step)
        if self.operator.coalesce and step.reports > 1 and step.changed:
            await self._linger(step)
        await self._finish(step)

    async def _linger(self, step: _Step) -> None:
        """Apply what arrives within LINGER_GAP of the last event while the round stays open."""
        deadline = trio.current_time() + LINGER_MAX
        while self.region.state in _OPEN_ROUND and len(step.answers) < MAX_BATCH:
            item = None
            with trio.move_on_at(min(deadline, trio.current_time() + LINGER_GAP)):
                item = await self._receive.receive()
            if item is None:
                return
            await self._apply(self._queued_behind(item), step)   # never cut short by the wait

    async def _apply(self, batch: list[tuple], step: _Step) -> None:
        op = self.operator
        region = self.region
        deferred, answers = step.deferred, step.answers
        for event, reply in batch:
            step.reports += isinstance(event, (Checkpoint, ResetDone))
            members = isinstance(event, Members)
            event = await self._with_health(event)
            try:
                actions = region.handle(event, op.clock_ms())
                if members:      # the round may wait for no one now (fsm.Region.settle_members)
                    actions = actions + region.settle_members(op.clock_ms())
            except RegionError as exc:
                if reply is None:
                    log.warning("cr-operator: job %s region %s: %s", op.job, region.index, exc)
                else:
                    answers.append((reply, [], exc))
                continue
            for action in actions:
                if isinstance(action, StatusChanged):
                    step.changed = True
                elif isinstance(action, CancelTimers):
                    self._cancel_timers()
                else:
                    if isinstance(action, ClearBoard):  # at once, and again in order below
                        op.board.clear(action.pes, region.index)
                    deferred.append(action)
            if reply is not None:
                answers.append((reply, actions, None))

    async def _finish(self, step: _Step) -> None:
        op = self.operator
        region = self.region
        if step.changed:
            await op.status_writer(region.index, region.status_doc())
        for action in step.deferred:
            if isinstance(action, Notify):
                op._notify(region, action)
            elif isinstance(action, ArmTimer):
                if action.timer_seq >= region.timer_seq:  # not cancelled later in the batch
                    self._arm(action)
            elif isinstance(action, ClearBoard):
                op.board.clear(action.pes, region.index)
            elif isinstance(action, MetricSamples):
                op.metrics.update(region.index, action.values)
        for reply, actions, error in step.answers:
            reply.actions, reply.error = actions, error
            reply.done.set()

    async def _with_health(self, event):
        index = self.region.index
        if isinstance(event, Members):
            before = set(self.region.spec.pes)
            self.region.set_pes(event.pes)
            self.operator.welcome(self.region, event.pes - before, before & event.pes)
            event = Recheck()
        if isinstance(event, Recheck):
            health = await self.operator.health_source(index)
            return RegionUpdate(health.healthy, health.clean_start)
        if isinstance(event, ResetRequest) and event.force:
            health = await self.operator.health_source(index)
            return ResetRequest(True, bool(health.healthy))
        return event

    def _cancel_timers(self) -> None:
        for scope in self._armed:
            scope.cancel()
        self._armed.clear()

    def _arm(self, arm: ArmTimer) -> None:
        scope = trio.CancelScope()
        self._armed.append(scope)
        if self._timers is None:  # before run(): the restart step arms nothing, but be safe
            raise RuntimeError("a timer was armed before the region task runs")
        self._timers.start_soon(self._fire, scope, arm)

    async def _fire(self, scope: trio.CancelScope, arm: ArmTimer) -> None:
        with scope:
            await trio.sleep(arm.seconds)
            # a cancel may land between the expiry and this line: the seq makes it stale then
            if scope in self._armed:
                self._armed.remove(scope)
            self.post(Timeout(arm.kind, arm.timer_seq))
