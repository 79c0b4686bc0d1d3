"""The consistent-region state machine of OpenStreams, every rule of it here, transitions as data.

Rules
-----
Rule 1: a region changes only through `Region.handle(event, now_ms)`. Events are typed (health
updates, PE reports, operator requests, timer expiries, the operator's restart); the answer is a
list of typed actions (notify PEs, arm/cancel timers, clear the board, status changed, metrics).
No I/O here: the operator (operator.py) feeds events one at a time and carries the actions out.

Rule 2: an event is first classified into a `Trigger` (this is where the guards live: did the
health value change, is a timer stale, is this the last checkpoint of the round, is a reset owed),
then `TRANSITIONS[state][trigger]` names the `Step` to run. The table is the whole machine: a
PE report or operator request whose trigger has no entry for the current state is refused with
`NotExpected` (409); a health update or timer with no entry is ignored, as OpenStreams ignores it.

Rule 3: every refusal (errors.py) is raised before anything changes. Where OpenStreams throws
IllegalStateException and loses the region (wrong sequence id, duplicate report), or silently drops a
report (wrong reset seq/attempt, unknown PE, a report in a state that does not take it), the
caller here gets a 4xx naming why and the region carries on.

Rule 4 (OpenStreams, ConsistentRegionStateMachine.java, followed to the letter):
- Initial: STARTED, unhealthy, currentSeqID 1, lastCompleted 0, pending 0, toRetire 0, attempt 0,
  timer seq 0, currentMaxResetAttempts = maxConsecutiveResetAttempts.
- Health: acted on only when the value changes; unknown is ignored. Becoming unhealthy clears the
  notification board for the region's PEs and moves PROCESSING/DRAINING/CHECKPOINT_PENDING/RESETTING
  to UNHEALTHY (timers cancelled). Becoming healthy: UNHEALTHY -> reset; STARTED -> first health:
  a reset if one is owed (isMustReset, not a clean start, or the operator restarted), else PROCESSING
  (+ DrainPeriod if periodic); elsewhere only the flag changes.
- DrainPeriod in PROCESSING -> DRAINING, triggerDrain "seqId=<cur>", DrainTimeout armed.
- Operator drain (operator-driven regions, from a trigger operator): STARTED -> reset owed;
  PROCESSING with seqId == cur -> DRAINING + DrainTimeout (no notification).
- Checkpoint (seq = cur in DRAINING, = pending in CHECKPOINT_PENDING): when every PE has at least a
  blocking checkpoint but not all a full one, in DRAINING: pending = seq, cur++, CHECKPOINT_PENDING,
  resumeSubmission "seqId=<cur>;retId=<toRetire>;pendCkpt=1". When all are full: from DRAINING
  toRetire = last, last = cur, cur++, resumeSubmission "...;pendCkpt=0"; from CHECKPOINT_PENDING
  toRetire = last, last = pending, drained "seqId=<pending>"; both: attempt 0, curMax = max,
  PROCESSING, timers cancelled, pending = cur, DrainPeriod re-armed if periodic.
- Blocking checkpoint: the last one (in DRAINING or CHECKPOINT_PENDING) does the pendCkpt=1 step.
- Reset: timers cancelled; attempt == curMax -> MAXIMUM_RESET_ATTEMPTS_REACHED + resetFailed
  "seqId=<last>"; else RESETTING, progress cleared, triggerReset "seqId=<last>;resetAttempt=<attempt>",
  attempt++, ResetTimeout armed.
- Reset done (RESETTING, seqId == last, resetAttempt == attempt-1): when all PEs are done, cur++,
  PROCESSING, resumeSubmission "seqId=<cur>;retId=<toRetire>;pendCkpt=0", DrainPeriod re-armed. The
  attempt counter is NOT cleared (only a completed checkpoint clears it).
- Operator reset: force -> curMax = attempt + max first; STARTED -> reset owed; UNHEALTHY -> nothing
  (it resets when healthy); MAXIMUM_RESET_ATTEMPTS_REACHED -> only with force: healthy -> reset,
  unhealthy/unknown -> UNHEALTHY (and, unlike OpenStreams, the healthy flag cleared, so the next
  healthy update resets it instead of being "no change" forever); otherwise reset.
- Timeouts: a timer whose seq < currentTimerSeqId is stale and ignored; every cancel bumps the seq.
  DrainTimeout/ResetTimeout in any state but UNHEALTHY -> reset (which uses an attempt).
- Operator restart: STARTED, unhealthy; the next healthy update owes a reset.

`diagram()` draws the machine from `TRANSITIONS`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from .vocabulary import (Action, ArmTimer, CancelTimers, Checkpoint, ClearBoard, DEFAULT_DRAIN_TIMEOUT, DEFAULT_MAX_RESET_ATTEMPTS, DEFAULT_RESET_TIMEOUT, DrainRequest, Event, MOVING_AVERAGE_SAMPLES, MetricSamples, NotificationKind, Notify, OPERATOR_DRIVEN, OperatorRestarted, PERIODIC, PeStatus, RegionState, RegionUpdate, ResetDone, ResetRequest, StatusChanged, TRIGGER_NAMES, Timeout, TimerKind)
from .errors import (DuplicateReport, InvalidRequest, NotExpected, SequenceMismatch,
                     UnknownOperator, UnknownPE)

# -- the table --------------------------------------------------------------------------------------


class Trigger(enum.Enum):
    """An event after classification (guards evaluated); the key of TRANSITIONS."""

    HEALTHY = "healthy"
    HEALTHY_MUST_RESET = "healthyMustReset"
    UNHEALTHY = "unhealthy"
    DRAIN_PERIOD = "drainPeriod"
    DRAIN_TIMEOUT = "drainTimeout"
    RESET_TIMEOUT = "resetTimeout"
    CHECKPOINT = "checkpoint"
    CHECKPOINT_ALL_BLOCKING = "checkpointAllBlocking"
    CHECKPOINT_ALL = "checkpointAll"
    BLOCKING = "blockingCheckpoint"
    BLOCKING_ALL = "blockingCheckpointAll"
    RESET_DONE = "resetDone"
    RESET_DONE_ALL = "resetDoneAll"
    DRAIN_REQUEST = "drainRequest"
    RESET_REQUEST = "resetRequest"
    FORCED_RESET = "forcedReset"
    FORCED_RESET_UNHEALTHY = "forcedResetUnhealthy"
    RESTART = "restart"


class Step(enum.Enum):
    """What a transition does; `STEP_TARGET` gives where it leads."""

    STAY = "stay"                        # only the event's own record (flag, PE progress, curMax)
    START = "start"                      # first health, clean: PROCESSING (+ DrainPeriod)
    START_WITH_RESET = "startWithReset"  # first health, a reset owed
    OWE_RESET = "oweReset"               # not started yet: isMustReset = true
    BEGIN_DRAIN = "beginDrain"           # DrainPeriod: triggerDrain, DrainTimeout
    OPERATOR_DRAIN = "operatorDrain"     # a trigger operator started the drain
    PEND_CHECKPOINT = "pendCheckpoint"   # all blocking: resume with pendCkpt=1
    FINISH_CHECKPOINT = "finishCheckpoint"
    FINISH_RESET = "finishReset"
    RESET = "reset"                      # RESETTING, or MAXIMUM_RESET_ATTEMPTS_REACHED if exhausted
    RECHECK_RESET = "recheckReset"       # forced reset out of MAXIMUM_RESET_ATTEMPTS_REACHED, healthy
    FALL_UNHEALTHY = "fallUnhealthy"     # timers cancelled
    FORCE_UNHEALTHY = "forceUnhealthy"   # forced reset out of MAXIMUM_..., region not healthy
    RESTART = "restart"


S, T, P = RegionState, Trigger, Step
_ACTIVE = (S.PROCESSING, S.DRAINING, S.CHECKPOINT_PENDING, S.RESETTING)
_RESET = "reset"
"""Target of RESET / START_WITH_RESET / RECHECK_RESET: RESETTING or MAXIMUM_RESET_ATTEMPTS_REACHED."""


def _table() -> dict[RegionState, dict[Trigger, Step]]:
    table: dict[RegionState, dict[Trigger, Step]] = {s: {} for s in RegionState}
    for s in RegionState:
        table[s][T.RESTART] = P.RESTART
        if s is not S.UNHEALTHY:
            table[s][T.DRAIN_TIMEOUT] = P.RESET
            table[s][T.RESET_TIMEOUT] = P.RESET
    table[S.STARTED].update({
        T.HEALTHY: P.START, T.HEALTHY_MUST_RESET: P.START_WITH_RESET, T.UNHEALTHY: P.STAY,
        T.DRAIN_REQUEST: P.OWE_RESET, T.RESET_REQUEST: P.OWE_RESET, T.FORCED_RESET: P.OWE_RESET,
        T.FORCED_RESET_UNHEALTHY: P.OWE_RESET})
    for s in _ACTIVE:
        table[s].update({
            T.HEALTHY: P.STAY, T.HEALTHY_MUST_RESET: P.STAY, T.UNHEALTHY: P.FALL_UNHEALTHY,
            T.RESET_REQUEST: P.RESET, T.FORCED_RESET: P.RESET, T.FORCED_RESET_UNHEALTHY: P.RESET})
    table[S.PROCESSING].update({T.DRAIN_PERIOD: P.BEGIN_DRAIN, T.DRAIN_REQUEST: P.OPERATOR_DRAIN})
    table[S.DRAINING].update({
        T.CHECKPOINT: P.STAY, T.CHECKPOINT_ALL_BLOCKING: P.PEND_CHECKPOINT,
        T.CHECKPOINT_ALL: P.FINISH_CHECKPOINT, T.BLOCKING: P.STAY, T.BLOCKING_ALL: P.PEND_CHECKPOINT})
    table[S.CHECKPOINT_PENDING].update({
        T.CHECKPOINT: P.STAY, T.CHECKPOINT_ALL_BLOCKING: P.STAY,
        T.CHECKPOINT_ALL: P.FINISH_CHECKPOINT, T.BLOCKING: P.STAY, T.BLOCKING_ALL: P.PEND_CHECKPOINT})
    table[S.RESETTING].update({T.RESET_DONE: P.STAY, T.RESET_DONE_ALL: P.FINISH_RESET})
    table[S.UNHEALTHY].update({
        T.HEALTHY: P.RESET, T.HEALTHY_MUST_RESET: P.RESET, T.UNHEALTHY: P.STAY,
        T.RESET_REQUEST: P.STAY, T.FORCED_RESET: P.STAY, T.FORCED_RESET_UNHEALTHY: P.STAY})
    table[S.MAXIMUM_RESET_ATTEMPTS_REACHED].update({
        T.HEALTHY: P.STAY, T.HEALTHY_MUST_RESET: P.STAY, T.UNHEALTHY: P.STAY,
        T.FORCED_RESET: P.RECHECK_RESET, T.FORCED_RESET_UNHEALTHY: P.FORCE_UNHEALTHY})
    return table


TRANSITIONS: dict[RegionState, dict[Trigger, Step]] = _table()
"""{state: {trigger: step}}; a missing key: a report is refused (NotExpected), the rest ignored."""

STEP_TARGET: dict[Step, RegionState | str | None] = {
    P.STAY: None, P.OWE_RESET: None, P.START: S.PROCESSING, P.START_WITH_RESET: _RESET,
    P.BEGIN_DRAIN: S.DRAINING, P.OPERATOR_DRAIN: S.DRAINING, P.PEND_CHECKPOINT: S.CHECKPOINT_PENDING,
    P.FINISH_CHECKPOINT: S.PROCESSING, P.FINISH_RESET: S.PROCESSING, P.RESET: _RESET,
    P.RECHECK_RESET: _RESET, P.FALL_UNHEALTHY: S.UNHEALTHY, P.FORCE_UNHEALTHY: S.UNHEALTHY,
    P.RESTART: S.STARTED,
}
"""Where a step leads: a state, None (stays), or "reset" (RESETTING or MAXIMUM_RESET_ATTEMPTS_REACHED)."""

_REPORT_TRIGGERS: dict[type, tuple[Trigger, ...]] = {
    Checkpoint: (T.CHECKPOINT, T.CHECKPOINT_ALL_BLOCKING, T.CHECKPOINT_ALL),
    ResetDone: (T.RESET_DONE, T.RESET_DONE_ALL),
    DrainRequest: (T.DRAIN_REQUEST,),
    ResetRequest: (T.RESET_REQUEST, T.FORCED_RESET, T.FORCED_RESET_UNHEALTHY),
}
_BLOCKING_TRIGGERS = (T.BLOCKING, T.BLOCKING_ALL)
_TIMER_TRIGGERS = {TimerKind.DRAIN_PERIOD: T.DRAIN_PERIOD, TimerKind.DRAIN_TIMEOUT: T.DRAIN_TIMEOUT,
                   TimerKind.RESET_TIMEOUT: T.RESET_TIMEOUT}

METRIC_NAMES = (
    "average_drain_time_milliseconds", "average_reset_time_milliseconds",
    "last_consistent_state_time_milliseconds", "last_reset_time_milliseconds",
    "last_completed_drain_seq_id", "last_completed_reset_seq_id", "state", "n_current_reset_attempts",
)
"""The 8 metrics of the OpenStreams operator, in its order (ConsistentRegionOperatorMetric)."""


# -- the region -----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class RegionSpec:
    """The static part of a ConsistentRegion, from the ADL (CRD spec keys in `to_doc`)."""

    index: int
    trigger: str = PERIODIC
    period: float = 0.0
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT
    reset_timeout: float = DEFAULT_RESET_TIMEOUT
    max_attempts: int = DEFAULT_MAX_RESET_ATTEMPTS
    pes: frozenset[int] = frozenset()
    start_operators: Mapping[str, bool] = dataclasses.field(default_factory=dict)
    """operatorsToStartRegionMap: operator name -> whether it starts the region."""
    trigger_operators: Mapping[str, bool] = dataclasses.field(default_factory=dict)
    """operatorsToTriggerMap: operator name -> whether it may trigger drains."""

    def __post_init__(self) -> None:
        if self.trigger not in TRIGGER_NAMES:
            raise InvalidRequest(f"trigger must be periodic or operatorDriven, not {self.trigger!r}",
                                 field="trigger")
        object.__setattr__(self, "trigger", TRIGGER_NAMES[self.trigger])
        object.__setattr__(self, "pes", frozenset(self.pes))
        if not self.pes:
            raise InvalidRequest(f"region {self.index} has no PE (pesInRegion is empty)",
                                 field="pesInRegion")
        if self.trigger == PERIODIC and not self.period > 0:
            raise InvalidRequest(f"a periodic region needs period > 0, not {self.period!r}",
                                 field="period")
        if self.max_attempts < 1:
            raise InvalidRequest("maxConsecutiveResetAttempts must be >= 1",
                                 field="maxConsecutiveResetAttempts")

    @property
    def periodic(self) -> bool:
        return self.trigger == PERIODIC

    def to_doc(self) -> dict:
        return {
            "regionIndex": self.index, "trigger": self.trigger, "period": self.period,
            "drainTimeout": self.drain_timeout, "resetTimeout": self.reset_timeout,
            "maxConsecutiveResetAttempts": self.max_attempts,
            "pesInRegion": sorted(self.pes),
            "numStartOperators": sum(1 for v in self.start_operators.values() if v),
            "operatorsToStartRegionMap": dict(self.start_operators),
            "operatorsToTriggerMap": dict(self.trigger_operators),
        }

    @classmethod
    def from_doc(cls, doc: Mapping) -> "RegionSpec":
        """The spec of a ConsistentRegion object; a wrong or missing key raises InvalidRequest."""
        from .docs import spec_from_doc

        return spec_from_doc(cls, doc)


@dataclasses.dataclass
class RegionMetrics:
    """What the 8 metrics are computed from (kept in the status under `metrics`)."""

    drain_samples: list[float] = dataclasses.field(default_factory=list)
    reset_samples: list[float] = dataclasses.field(default_factory=list)
    drain_start_ms: float = 0.0
    reset_start_ms: float = 0.0
    last_consistent_state_time: float = 0.0
    last_reset_time: float = 0.0
    last_completed_drain: int = -1
    last_completed_reset: int = -1


def _add_sample(samples: list[float], value: float) -> None:
    samples.append(value)
    del samples[:-MOVING_AVERAGE_SAMPLES]


def _average(samples: list[float]) -> float:
    return sum(samples) / len(samples) if samples else 0.0


class Region:
    """One consistent region: its spec and its dynamic status; `handle` is the only way to change it."""

    def __init__(self, spec: RegionSpec) -> None:
        self.spec = spec
        self.state = RegionState.STARTED
        self._progress: dict[int, PeStatus] = {}
        self._counts: dict[PeStatus, int] = dict.fromkeys(PeStatus, 0)
        self._progress_version = 0
        self.healthy = False
        self.clean_start = False
        self.healthy_first_time = False
        self.must_reset = False
        self.reset_attempt = 0
        self.max_reset_attempts = spec.max_attempts
        self.current_seq = 1
        self.last_completed_seq = 0
        self.pending_seq = 0
        self.to_retire_seq = 0
        self.timer_seq = 0
        self.metrics = RegionMetrics()
        self.restarted = False
        """Process-level, not persisted: set by OperatorRestarted, owes a reset on first health."""
        self._pes = tuple(sorted(spec.pes))
        self._actions: list[Action] = []

    @property
    def index(self) -> int:
        return self.spec.index

    def set_pes(self, pes: Iterable[int]) -> None:
        """The region's members changed (a parallel region inside it was scaled): the spec's
        `pesInRegion` follows, the progress of PEs that left is dropped and new PEs start at None
        (no state change here: the caller rechecks health, which decides as for any PE change)."""
        members = frozenset(pes)
        if not members:
            raise InvalidRequest(f"region {self.index} has no PE (pesInRegion is empty)", field="pesInRegion")
        self.spec = dataclasses.replace(self.spec, pes=members)
        self._pes = tuple(sorted(members))
        self.pe_to_completion = {pe: st for pe, st in self._progress.items() if pe in members}

    def settle_members(self, now_ms: float = 0.0) -> list[Action]:
        """After `set_pes`: a round whose remaining members have all reported completes now, as
        its last report would have completed it (a drain waited for a PE that had left, and the
        drain timeout then reset the region: review probe P4). Like `handle`, the actions to
        carry out; nothing when the round still waits for a member."""
        n = len(self.spec.pes)
        if self.state in (S.DRAINING, S.CHECKPOINT_PENDING) and self._counts[PeStatus.CHECKPOINT] == n:
            step = TRANSITIONS[self.state][T.CHECKPOINT_ALL]
        elif self.state is S.RESETTING and self._counts[PeStatus.RESET] == n:
            step = TRANSITIONS[self.state][T.RESET_DONE_ALL]
        else:
            return []
        before = self._fingerprint()
        self._actions = []
        getattr(self, "_" + step.name.lower())(None, now_ms)
        actions, self._actions = self._actions, []
        if self._fingerprint() != before:
            actions.insert(0, StatusChanged())
            actions.append(MetricSamples(self.metric_samples()))
        return actions

    @property
    def pe_to_completion(self) -> Mapping[int, PeStatus]:
        """peToCompletion: each PE's progress this round (a PE not in it counts as None);
        read-only: it changes through events (and the counts kept beside it must follow)."""
        return MappingProxyType(self._progress)

    @pe_to_completion.setter
    def pe_to_completion(self, value: Mapping[int, PeStatus]) -> None:
        self._progress = dict(value)
        self._counts = dict.fromkeys(PeStatus, 0)
        for status in self._progress.values():
            self._counts[status] += 1
        self._progress_version += 1

    def _set_progress(self, pe: int, status: PeStatus) -> None:
        old = self._progress.get(pe)
        if old is not None:
            self._counts[old] -= 1
        self._progress[pe] = status
        self._counts[status] += 1
        self._progress_version += 1

    # -- the entry point --------------------------------------------------------------------------

    def handle(self, event: Event, now_ms: float = 0.0) -> list[Action]:
        """Apply one event; the actions to carry out, in order. Raises RegionError, changing nothing."""
        trigger = self._classify(event)
        if trigger is None:
            return []
        step = TRANSITIONS[self.state].get(trigger)
        if step is None:
            return []
        before = self._fingerprint()
        self._actions = []
        self._record(event, trigger)
        getattr(self, "_" + step.name.lower())(event, now_ms)
        actions, self._actions = self._actions, []
        if self._fingerprint() != before:
            actions.insert(0, StatusChanged())
            actions.append(MetricSamples(self.metric_samples()))
        return actions

    # -- classification: every guard, every refusal -------------------------------------------------

    def _classify(self, event: Event) -> Trigger | None:
        if isinstance(event, RegionUpdate):
            return self._classify_health(event)
        if isinstance(event, Timeout):
            return None if event.timer_seq < self.timer_seq else _TIMER_TRIGGERS[event.kind]
        if isinstance(event, OperatorRestarted):
            return T.RESTART
        if isinstance(event, Checkpoint):
            trigger = self._classify_checkpoint(event)
        elif isinstance(event, ResetDone):
            trigger = self._classify_reset_done(event)
        elif isinstance(event, DrainRequest):
            trigger = self._classify_drain(event)
        elif isinstance(event, ResetRequest):
            trigger = self._classify_reset_request(event)
        else:
            raise TypeError(f"not a region event: {event!r}")
        if trigger not in TRANSITIONS[self.state]:
            raise self._not_expected(type(event).__name__)
        return trigger

    def _classify_health(self, event: RegionUpdate) -> Trigger | None:
        if event.health is None or event.health == self.healthy:
            return None
        if not event.health:
            return T.UNHEALTHY
        owed = self.must_reset or not event.clean_start or self.restarted
        return T.HEALTHY_MUST_RESET if owed else T.HEALTHY

    def _accepts(self, triggers: Iterable[Trigger], what: str) -> None:
        if not any(t in TRANSITIONS[self.state] for t in triggers):
            raise self._not_expected(what)

    def _not_expected(self, what: str) -> NotExpected:
        return NotExpected(f"region {self.index} is {self.state.name}: it takes no {what} now",
                           region=self.index, state=self.state.name)

    def _known_pe(self, pe: int) -> None:
        if pe not in self.spec.pes:
            raise UnknownPE(f"PE {pe} is not in region {self.index}", region=self.index, pe=pe)

    def _classify_checkpoint(self, event: Checkpoint) -> Trigger:
        self._known_pe(event.pe)
        what = "blocking checkpoint" if event.blocking else "checkpoint"
        self._accepts(_BLOCKING_TRIGGERS if event.blocking else _REPORT_TRIGGERS[Checkpoint], what)
        expected = self.pending_seq if self.state is S.CHECKPOINT_PENDING else self.current_seq
        if event.seq != expected:
            raise SequenceMismatch(
                f"region {self.index} is {self.state.name} for seqId {expected}: PE {event.pe} "
                f"reported a {what} for seqId {event.seq}", region=self.index, pe=event.pe,
                expected=expected, got=event.seq, state=self.state.name)
        mark = PeStatus.BLOCKING if event.blocking else PeStatus.CHECKPOINT
        if self.pe_to_completion.get(event.pe, PeStatus.NONE) is mark:
            raise DuplicateReport(f"PE {event.pe} already reported its {what} for seqId {event.seq}",
                                  region=self.index, pe=event.pe, state=self.state.name)
        full, at_least_blocking = self._count_after(event.pe, mark)
        n = len(self.spec.pes)
        if event.blocking:
            return T.BLOCKING_ALL if at_least_blocking == n else T.BLOCKING
        if full == n:
            return T.CHECKPOINT_ALL
        return T.CHECKPOINT_ALL_BLOCKING if at_least_blocking == n else T.CHECKPOINT

    def _count_after(self, pe: int, mark: PeStatus) -> tuple[int, int]:
        """(PEs with a full checkpoint, PEs with at least a blocking one) once `pe` is `mark`."""
        old = self._progress.get(pe, PeStatus.NONE)
        counts = self._counts
        full = counts[PeStatus.CHECKPOINT] - (old is PeStatus.CHECKPOINT) + (mark is PeStatus.CHECKPOINT)
        blocking = counts[PeStatus.BLOCKING] - (old is PeStatus.BLOCKING) + (mark is PeStatus.BLOCKING)
        return full, full + blocking

    def _classify_reset_done(self, event: ResetDone) -> Trigger:
        self._known_pe(event.pe)
        self._accepts(_REPORT_TRIGGERS[ResetDone], "reset completion")
        want_attempt = self.reset_attempt - 1
        if event.seq != self.last_completed_seq or event.attempt != want_attempt:
            raise SequenceMismatch(
                f"region {self.index} is resetting to seqId {self.last_completed_seq}, attempt "
                f"{want_attempt}: PE {event.pe} reported seqId {event.seq}, attempt {event.attempt}",
                region=self.index, pe=event.pe, expected=self.last_completed_seq, got=event.seq,
                expectedAttempt=want_attempt, gotAttempt=event.attempt, state=self.state.name)
        if self.pe_to_completion.get(event.pe, PeStatus.NONE) is PeStatus.RESET:
            raise DuplicateReport(f"PE {event.pe} already reported its reset for attempt "
                                  f"{event.attempt}", region=self.index, pe=event.pe,
                                  state=self.state.name)
        done = self._counts[PeStatus.RESET]  # this PE is not among them (not a duplicate)
        return T.RESET_DONE_ALL if done + 1 == len(self.spec.pes) else T.RESET_DONE

    def _classify_drain(self, event: DrainRequest) -> Trigger:
        if event.operator not in self.spec.start_operators:
            raise UnknownOperator(f"operator {event.operator!r} does not start region {self.index}",
                                  region=self.index, operator=event.operator)
        if not self.spec.trigger_operators.get(event.operator, False):
            raise NotExpected(f"operator {event.operator!r} does not trigger region {self.index}",
                              region=self.index, operator=event.operator, state=self.state.name)
        if self.spec.trigger != OPERATOR_DRIVEN:
            raise NotExpected(f"region {self.index} is periodic: its drains are not operator driven",
                              region=self.index, state=self.state.name)
        self._accepts(_REPORT_TRIGGERS[DrainRequest], "drain request")
        if self.state is S.PROCESSING and event.seq != self.current_seq:
            raise SequenceMismatch(
                f"region {self.index} drains seqId {self.current_seq} next, not {event.seq}",
                region=self.index, expected=self.current_seq, got=event.seq, state=self.state.name)
        return T.DRAIN_REQUEST

    def _classify_reset_request(self, event: ResetRequest) -> Trigger:
        if not event.force:
            if self.state is S.MAXIMUM_RESET_ATTEMPTS_REACHED:
                raise NotExpected(f"region {self.index} reached its maximum reset attempts: "
                                  "a reset needs force=true", region=self.index,
                                  state=self.state.name)
            return T.RESET_REQUEST
        return T.FORCED_RESET if event.health else T.FORCED_RESET_UNHEALTHY

    # -- what every accepted event records, whatever the step ----------------------------------------

    def _record(self, event: Event, trigger: Trigger) -> None:
        if isinstance(event, RegionUpdate):
            self.healthy = bool(event.health)
            self.clean_start = event.clean_start
            if not event.health:
                self._actions.append(ClearBoard(self._pes))
        elif isinstance(event, Checkpoint):
            self._set_progress(event.pe, PeStatus.BLOCKING if event.blocking else PeStatus.CHECKPOINT)
        elif isinstance(event, ResetDone):
            self._set_progress(event.pe, PeStatus.RESET)
        elif isinstance(event, ResetRequest) and event.force:
            self.max_reset_attempts = self.reset_attempt + self.spec.max_attempts

    # -- steps ------------------------------------------------------------------------------------------

    def _stay(self, event: Event, now_ms: float) -> None:
        pass

    def _owe_reset(self, event: Event, now_ms: float) -> None:
        self.must_reset = True

    def _start(self, event: Event, now_ms: float) -> None:
        self.healthy_first_time = True
        self.state = S.PROCESSING
        self._arm_drain_period()

    def _start_with_reset(self, event: Event, now_ms: float) -> None:
        self.healthy_first_time = True
        self.must_reset = False
        self._reset(event, now_ms)

    def _begin_drain(self, event: Event, now_ms: float) -> None:
        self.state = S.DRAINING
        self._notify(NotificationKind.TRIGGER_DRAIN, f"seqId={self.current_seq}")
        self._arm(TimerKind.DRAIN_TIMEOUT, self.spec.drain_timeout)
        self.metrics.drain_start_ms = now_ms

    def _operator_drain(self, event: Event, now_ms: float) -> None:
        self.state = S.DRAINING
        self.metrics.drain_start_ms = now_ms
        self._arm(TimerKind.DRAIN_TIMEOUT, self.spec.drain_timeout)

    def _pend_checkpoint(self, event: Event, now_ms: float) -> None:
        assert isinstance(event, Checkpoint)
        self.pending_seq = event.seq
        self.current_seq += 1
        self.state = S.CHECKPOINT_PENDING
        self._notify(NotificationKind.RESUME_SUBMISSION,
                     f"seqId={self.current_seq};retId={self.to_retire_seq};pendCkpt=1")

    def _finish_checkpoint(self, event: Event, now_ms: float) -> None:
        self._clear_progress()
        if self.state is S.DRAINING:
            self.to_retire_seq = self.last_completed_seq
            self.last_completed_seq = self.current_seq
            self.current_seq += 1
            self._notify(NotificationKind.RESUME_SUBMISSION,
                         f"seqId={self.current_seq};retId={self.to_retire_seq};pendCkpt=0")
        else:
            self.to_retire_seq = self.last_completed_seq
            self.last_completed_seq = self.pending_seq
            self._notify(NotificationKind.DRAINED, f"seqId={self.pending_seq}")
        self.reset_attempt = 0
        self.max_reset_attempts = self.spec.max_attempts
        self.state = S.PROCESSING
        self._cancel_timers()
        self.pending_seq = self.current_seq
        self._arm_drain_period()
        m = self.metrics
        m.last_completed_drain = self.last_completed_seq
        m.last_consistent_state_time = now_ms
        _add_sample(m.drain_samples, now_ms - m.drain_start_ms)

    def _finish_reset(self, event: Event, now_ms: float) -> None:
        self._clear_progress()
        self.current_seq += 1
        self._cancel_timers()
        self.state = S.PROCESSING
        self._notify(NotificationKind.RESUME_SUBMISSION,
                     f"seqId={self.current_seq};retId={self.to_retire_seq};pendCkpt=0")
        self._arm_drain_period()
        m = self.metrics
        m.last_completed_reset = self.last_completed_seq
        m.last_reset_time = now_ms
        _add_sample(m.reset_samples, now_ms - m.reset_start_ms)

    def _reset(self, event: Event, now_ms: float) -> None:
        self._cancel_timers()
        self._clear_progress()
        if self.reset_attempt == self.max_reset_attempts:
            self.state = S.MAXIMUM_RESET_ATTEMPTS_REACHED
            self._notify(NotificationKind.RESET_FAILED, f"seqId={self.last_completed_seq}")
            return
        self.state = S.RESETTING
        self._notify(NotificationKind.TRIGGER_RESET,
                     f"seqId={self.last_completed_seq};resetAttempt={self.reset_attempt}")
        self.reset_attempt += 1
        self._arm(TimerKind.RESET_TIMEOUT, self.spec.reset_timeout)
        self.metrics.reset_start_ms = now_ms

    def _recheck_reset(self, event: Event, now_ms: float) -> None:
        self.healthy = True
        self._reset(event, now_ms)

    def _fall_unhealthy(self, event: Event, now_ms: float) -> None:
        self.state = S.UNHEALTHY
        self._cancel_timers()

    def _force_unhealthy(self, event: Event, now_ms: float) -> None:
        # OpenStreams leaves isRegionHealthy as it was: a region that was flagged healthy then
        # waits in UNHEALTHY for a change of health that never comes (the monitors report the
        # same "healthy" again, which is no change). Clearing the flag lets it reset when healthy.
        self.state = S.UNHEALTHY
        self.healthy = False

    def _restart(self, event: Event, now_ms: float) -> None:
        self.state = S.STARTED
        self.healthy = False
        self.restarted = True

    # -- helpers of the steps ---------------------------------------------------------------------------

    def _notify(self, kind: NotificationKind, message: str) -> None:
        self._actions.append(Notify(kind, self._pes, message))

    def _arm(self, kind: TimerKind, seconds: float) -> None:
        self._actions.append(ArmTimer(kind, seconds, self.timer_seq))

    def _arm_drain_period(self) -> None:
        if self.spec.periodic:
            self._arm(TimerKind.DRAIN_PERIOD, self.spec.period)

    def _cancel_timers(self) -> None:
        self.timer_seq += 1
        self._actions.append(CancelTimers(self.timer_seq))

    def _clear_progress(self) -> None:
        """resetPeToCompletion: every PE of the region back to None."""
        self.pe_to_completion = dict.fromkeys(self._pes, PeStatus.NONE)  # (recounts)

    # -- the status document ----------------------------------------------------------------------------

    def _fingerprint(self) -> tuple:
        return (self.state, self.healthy, self.clean_start, self.healthy_first_time, self.must_reset,
                self.reset_attempt, self.max_reset_attempts, self.current_seq,
                self.last_completed_seq, self.pending_seq, self.to_retire_seq, self.timer_seq,
                self._progress_version, len(self.metrics.drain_samples),
                len(self.metrics.reset_samples), self.metrics.last_consistent_state_time,
                self.metrics.last_reset_time)

    def metric_samples(self) -> tuple[tuple[str, float], ...]:
        """(name, value) of the 8 metrics."""
        return tuple(zip(METRIC_NAMES, self.metric_values()))

    def metric_values(self) -> tuple[float, ...]:
        """The 8 metrics, in METRIC_NAMES order."""
        m = self.metrics
        return (_average(m.drain_samples), _average(m.reset_samples), m.last_consistent_state_time,
                m.last_reset_time, m.last_completed_drain, m.last_completed_reset,
                int(self.state), self.reset_attempt)

    def status_doc(self) -> dict:
        """The ConsistentRegion status (the CRD's dynamic part, OpenStreams' names)."""
        from .docs import status_to_doc

        return status_to_doc(self)

    @classmethod
    def from_status(cls, spec: RegionSpec, status: Mapping | None) -> "Region":
        """A region as a restarted operator finds it; `status` None or {} is a fresh region."""
        from .docs import region_from_status

        return region_from_status(cls(spec), status or {})


def diagram() -> str:
    """The machine as Graphviz dot, drawn from TRANSITIONS (so the picture cannot drift)."""
    lines = ["digraph consistent_region {"]
    for state, edges in TRANSITIONS.items():
        for trigger, step in edges.items():
            target = STEP_TARGET[step]
            targets = ([state] if target is None else
                       [S.RESETTING, S.MAXIMUM_RESET_ATTEMPTS_REACHED] if target == _RESET else [target])
            for t in targets:
                lines.append(f'  "{state.name}" -> "{t.name}" [label="{trigger.value}/{step.value}"];')
    lines.append("}")
    return "\n".join(lines)
