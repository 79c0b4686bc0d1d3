"""The consistent-region FSM: the table against one written out here, scenarios with the whole
status asserted, refusals that change nothing, and a hypothesis state machine against the
separately written reference model (region_model.py)."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from fuzzbudget import examples
from region_model import Model, Refused

from streams.regions import errors
from streams.regions.fsm import STEP_TARGET, TRANSITIONS, Region, RegionSpec, Step, Trigger, diagram
from streams.regions.vocabulary import ArmTimer, CancelTimers, Checkpoint, ClearBoard, DrainRequest, MetricSamples, Notify, OperatorRestarted, RegionState, RegionUpdate, ResetDone, ResetRequest, StatusChanged, Timeout, TimerKind

S, T = RegionState, Trigger
R = "reset"  # RESETTING, or MAXIMUM_RESET_ATTEMPTS_REACHED when attempts ran out
SAME = "same"
ACTIVE = (S.PROCESSING, S.DRAINING, S.CHECKPOINT_PENDING, S.RESETTING)

# The expected machine, written out from the research notes independently of fsm._table().
LEGAL: dict[tuple[RegionState, Trigger], object] = {}
for _s in S:
    LEGAL[(_s, T.RESTART)] = S.STARTED
    if _s is not S.UNHEALTHY:
        LEGAL[(_s, T.DRAIN_TIMEOUT)] = R
        LEGAL[(_s, T.RESET_TIMEOUT)] = R
LEGAL.update({
    (S.STARTED, T.HEALTHY): S.PROCESSING, (S.STARTED, T.HEALTHY_MUST_RESET): R,
    (S.STARTED, T.UNHEALTHY): SAME, (S.STARTED, T.DRAIN_REQUEST): SAME,
    (S.STARTED, T.RESET_REQUEST): SAME, (S.STARTED, T.FORCED_RESET): SAME,
    (S.STARTED, T.FORCED_RESET_UNHEALTHY): SAME,
    (S.UNHEALTHY, T.HEALTHY): R, (S.UNHEALTHY, T.HEALTHY_MUST_RESET): R,
    (S.UNHEALTHY, T.UNHEALTHY): SAME, (S.UNHEALTHY, T.RESET_REQUEST): SAME,
    (S.UNHEALTHY, T.FORCED_RESET): SAME, (S.UNHEALTHY, T.FORCED_RESET_UNHEALTHY): SAME,
    (S.MAXIMUM_RESET_ATTEMPTS_REACHED, T.HEALTHY): SAME,
    (S.MAXIMUM_RESET_ATTEMPTS_REACHED, T.HEALTHY_MUST_RESET): SAME,
    (S.MAXIMUM_RESET_ATTEMPTS_REACHED, T.UNHEALTHY): SAME,
    (S.MAXIMUM_RESET_ATTEMPTS_REACHED, T.FORCED_RESET): R,
    (S.MAXIMUM_RESET_ATTEMPTS_REACHED, T.FORCED_RESET_UNHEALTHY): S.UNHEALTHY,
    (S.PROCESSING, T.DRAIN_PERIOD): S.DRAINING, (S.PROCESSING, T.DRAIN_REQUEST): S.DRAINING,
    (S.DRAINING, T.CHECKPOINT): SAME, (S.DRAINING, T.CHECKPOINT_ALL_BLOCKING): S.CHECKPOINT_PENDING,
    (S.DRAINING, T.CHECKPOINT_ALL): S.PROCESSING, (S.DRAINING, T.BLOCKING): SAME,
    (S.DRAINING, T.BLOCKING_ALL): S.CHECKPOINT_PENDING,
    (S.CHECKPOINT_PENDING, T.CHECKPOINT): SAME, (S.CHECKPOINT_PENDING, T.CHECKPOINT_ALL_BLOCKING): SAME,
    (S.CHECKPOINT_PENDING, T.CHECKPOINT_ALL): S.PROCESSING, (S.CHECKPOINT_PENDING, T.BLOCKING): SAME,
    (S.CHECKPOINT_PENDING, T.BLOCKING_ALL): S.CHECKPOINT_PENDING,
    (S.RESETTING, T.RESET_DONE): SAME, (S.RESETTING, T.RESET_DONE_ALL): S.PROCESSING,
})
for _s in ACTIVE:
    LEGAL.update({(_s, T.HEALTHY): SAME, (_s, T.HEALTHY_MUST_RESET): SAME,
                  (_s, T.UNHEALTHY): S.UNHEALTHY, (_s, T.RESET_REQUEST): R,
                  (_s, T.FORCED_RESET): R, (_s, T.FORCED_RESET_UNHEALTHY): R})


def test_table_is_exactly_the_expected_one():
    table = {}
    for state, edges in TRANSITIONS.items():
        for trigger, step in edges.items():
            target = STEP_TARGET[step]
            table[(state, trigger)] = SAME if target is None else target
    # SAME: the step keeps the state; a state named (even the same one) is entered by the step
    assert table == LEGAL
    assert set(TRANSITIONS) == set(RegionState)
    assert set(STEP_TARGET) == set(Step)


def test_diagram_draws_every_edge():
    dot = diagram()
    resets = sum(1 for v in LEGAL.values() if v == R)
    assert dot.count("->") == len(LEGAL) + resets  # a reset edge is drawn to both of its targets


def test_state_values_are_the_metric_ordinals():
    assert [(s.name, s.value) for s in RegionState] == [
        ("STARTED", 0), ("PROCESSING", 1), ("UNHEALTHY", 2), ("DRAINING", 3), ("RESETTING", 4),
        ("MAXIMUM_RESET_ATTEMPTS_REACHED", 5), ("CHECKPOINT_PENDING", 6)]


# -- scenarios ------------------------------------------------------------------------------------

PES = frozenset({7, 8, 9})


def spec(**kw) -> RegionSpec:
    base = dict(index=0, trigger="periodic", period=2.0, drain_timeout=30.0, reset_timeout=40.0,
                max_attempts=2, pes=PES)
    base.update(kw)
    return RegionSpec(**base)


def notes(actions) -> list[tuple[str, str]]:
    return [(a.kind.value, a.message) for a in actions if isinstance(a, Notify)]


def status(region: Region) -> dict:
    doc = region.status_doc()
    doc.pop("metrics")
    return doc


def healthy_region(**kw) -> Region:
    region = Region(spec(**kw))
    region.handle(RegionUpdate(True))
    return region


def test_fresh_region_is_started_and_unhealthy():
    region = Region(spec())
    assert status(region) == {
        "state": "STARTED", "peToCompletion": {}, "isRegionHealthy": False, "isCleanStart": False,
        "isHealthyFirstTime": False, "isMustReset": False, "currentResetAttempt": 0,
        "currentMaxResetAttempts": 2, "currentSeqID": 1, "lastCompletedSeqID": 0,
        "pendingSeqID": 0, "toRetireSeqID": 0, "currentTimerSeqId": 0}


def test_first_health_starts_processing_and_arms_the_drain_period():
    region = Region(spec())
    actions = region.handle(RegionUpdate(True), now_ms=5.0)
    assert actions[0] == StatusChanged()
    assert ArmTimer(TimerKind.DRAIN_PERIOD, 2.0, 0) in actions
    assert region.state is S.PROCESSING and region.healthy_first_time and region.clean_start


def test_periodic_drain_round_with_every_field():
    region = healthy_region()
    actions = region.handle(Timeout(TimerKind.DRAIN_PERIOD, 0), now_ms=100.0)
    assert notes(actions) == [("triggerDrain", "seqId=1")]
    assert ArmTimer(TimerKind.DRAIN_TIMEOUT, 30.0, 0) in actions
    assert region.state is S.DRAINING
    assert region.handle(Checkpoint(7, 1), 101.0)[0] == StatusChanged()
    region.handle(Checkpoint(8, 1), 102.0)
    actions = region.handle(Checkpoint(9, 1), 125.0)
    assert notes(actions) == [("resumeSubmission", "seqId=2;retId=0;pendCkpt=0")]
    assert CancelTimers(1) in actions and ArmTimer(TimerKind.DRAIN_PERIOD, 2.0, 1) in actions
    assert status(region) == {
        "state": "PROCESSING", "peToCompletion": {"7": "None", "8": "None", "9": "None"},
        "isRegionHealthy": True, "isCleanStart": True, "isHealthyFirstTime": True,
        "isMustReset": False, "currentResetAttempt": 0, "currentMaxResetAttempts": 2,
        "currentSeqID": 2, "lastCompletedSeqID": 1, "pendingSeqID": 2, "toRetireSeqID": 0,
        "currentTimerSeqId": 1}
    values = dict(next(a for a in actions if isinstance(a, MetricSamples)).values)
    assert values["average_drain_time_milliseconds"] == 25.0
    assert values["last_completed_drain_seq_id"] == 1 and values["state"] == 1
    assert values["last_consistent_state_time_milliseconds"] == 125.0
    # the second round retires the first checkpoint
    region.handle(Timeout(TimerKind.DRAIN_PERIOD, 1), 200.0)
    for pe in (7, 8):
        region.handle(Checkpoint(pe, 2), 201.0)
    actions = region.handle(Checkpoint(9, 2), 235.0)
    assert notes(actions) == [("resumeSubmission", "seqId=3;retId=1;pendCkpt=0")]
    values = dict(next(a for a in actions if isinstance(a, MetricSamples)).values)
    assert values["average_drain_time_milliseconds"] == 30.0  # (25 + 35) / 2


def test_average_drain_time_is_over_the_last_ten_drains():
    region = healthy_region(pes=frozenset({7}))
    now = 0.0
    for duration in range(1, 13):
        region.handle(Timeout(TimerKind.DRAIN_PERIOD, region.timer_seq), now)
        now += duration
        actions = region.handle(Checkpoint(7, region.current_seq), now)
    values = dict(next(a for a in actions if isinstance(a, MetricSamples)).values)
    assert values["average_drain_time_milliseconds"] == sum(range(3, 13)) / 10
    assert region.status_doc()["metrics"]["drainSamples"] == [float(d) for d in range(3, 13)]


def test_blocking_checkpoints_resume_with_a_pending_checkpoint_then_drained():
    region = healthy_region()
    region.handle(Timeout(TimerKind.DRAIN_PERIOD, 0))
    region.handle(Checkpoint(7, 1, blocking=True))
    region.handle(Checkpoint(8, 1))
    actions = region.handle(Checkpoint(9, 1, blocking=True))
    assert notes(actions) == [("resumeSubmission", "seqId=2;retId=0;pendCkpt=1")]
    assert region.state is S.CHECKPOINT_PENDING
    assert (region.current_seq, region.pending_seq, region.last_completed_seq) == (2, 1, 0)
    # the full checkpoints of the pending round carry the pending seq id
    with pytest.raises(errors.SequenceMismatch):
        region.handle(Checkpoint(7, 2))
    with pytest.raises(errors.DuplicateReport):
        region.handle(Checkpoint(8, 1))
    region.handle(Checkpoint(7, 1))
    actions = region.handle(Checkpoint(9, 1))
    assert notes(actions) == [("drained", "seqId=1")]
    assert (region.state, region.current_seq, region.last_completed_seq, region.pending_seq,
            region.to_retire_seq) == (S.PROCESSING, 2, 1, 2, 0)


def test_drain_timeout_resets_then_max_attempts_then_forced_reset():
    region = healthy_region()
    region.handle(Timeout(TimerKind.DRAIN_PERIOD, 0))
    actions = region.handle(Timeout(TimerKind.DRAIN_TIMEOUT, 0), now_ms=10.0)
    assert notes(actions) == [("triggerReset", "seqId=0;resetAttempt=0")]
    assert CancelTimers(1) in actions and ArmTimer(TimerKind.RESET_TIMEOUT, 40.0, 1) in actions
    assert region.state is S.RESETTING and region.reset_attempt == 1
    # the old drain timeout (seq 0) is stale now
    assert region.handle(Timeout(TimerKind.DRAIN_TIMEOUT, 0)) == []
    actions = region.handle(Timeout(TimerKind.RESET_TIMEOUT, 1))
    assert notes(actions) == [("triggerReset", "seqId=0;resetAttempt=1")]
    actions = region.handle(Timeout(TimerKind.RESET_TIMEOUT, 2))
    assert notes(actions) == [("resetFailed", "seqId=0")]
    assert region.state is S.MAXIMUM_RESET_ATTEMPTS_REACHED
    assert not any(isinstance(a, ArmTimer) for a in actions)
    with pytest.raises(errors.NotExpected, match="force"):
        region.handle(ResetRequest(force=False))
    actions = region.handle(ResetRequest(force=True, health=True))
    assert notes(actions) == [("triggerReset", "seqId=0;resetAttempt=2")]
    assert (region.state, region.reset_attempt, region.max_reset_attempts) == (S.RESETTING, 3, 4)


def test_forced_reset_while_not_healthy_waits_in_unhealthy_then_resets_when_healthy():
    region = healthy_region(max_attempts=1)
    region.handle(ResetRequest())
    region.handle(Timeout(TimerKind.RESET_TIMEOUT, region.timer_seq))
    assert region.state is S.MAXIMUM_RESET_ATTEMPTS_REACHED and region.healthy
    region.handle(ResetRequest(force=True, health=None))  # a pod is missing right now
    assert region.state is S.UNHEALTHY and not region.healthy
    actions = region.handle(RegionUpdate(True))  # the same "healthy" as before the force
    assert notes(actions) == [("triggerReset", "seqId=0;resetAttempt=1")]


def test_reset_done_completes_the_reset_and_keeps_the_attempt_count():
    region = healthy_region()
    region.handle(ResetRequest(), now_ms=0.0)
    with pytest.raises(errors.SequenceMismatch, match="attempt 0"):
        region.handle(ResetDone(7, 0, 1))
    with pytest.raises(errors.SequenceMismatch):
        region.handle(ResetDone(7, 1, 0))
    region.handle(ResetDone(7, 0, 0))
    with pytest.raises(errors.DuplicateReport):
        region.handle(ResetDone(7, 0, 0))
    region.handle(ResetDone(8, 0, 0))
    actions = region.handle(ResetDone(9, 0, 0), now_ms=12.0)
    assert notes(actions) == [("resumeSubmission", "seqId=2;retId=0;pendCkpt=0")]
    assert (region.state, region.current_seq, region.reset_attempt) == (S.PROCESSING, 2, 1)
    values = dict(next(a for a in actions if isinstance(a, MetricSamples)).values)
    assert values["average_reset_time_milliseconds"] == 12.0
    assert values["last_completed_reset_seq_id"] == 0 and values["n_current_reset_attempts"] == 1


def test_unhealthy_clears_the_board_cancels_timers_and_recovery_resets():
    region = healthy_region()
    region.handle(Timeout(TimerKind.DRAIN_PERIOD, 0))
    actions = region.handle(RegionUpdate(False))
    assert ClearBoard((7, 8, 9)) in actions and CancelTimers(1) in actions
    assert region.state is S.UNHEALTHY
    assert region.handle(RegionUpdate(False)) == [] and region.handle(RegionUpdate(None)) == []
    assert region.handle(Timeout(TimerKind.DRAIN_TIMEOUT, 1)) == []  # ignored while UNHEALTHY
    assert region.handle(ResetRequest()) == []  # it resets anyway once healthy
    actions = region.handle(RegionUpdate(True))
    assert notes(actions) == [("triggerReset", "seqId=0;resetAttempt=0")]


@pytest.mark.parametrize("cause", ["restart", "unclean", "drain", "reset"])
def test_first_health_resets_when_a_reset_is_owed(cause):
    region = Region(spec(trigger="operatorDriven", period=0.0, start_operators={"op": True},
                         trigger_operators={"op": True}))
    clean = cause != "unclean"
    if cause == "restart":
        region.handle(OperatorRestarted())
    elif cause == "drain":
        region.handle(DrainRequest(1, "op"))
        assert region.must_reset
    elif cause == "reset":
        region.handle(ResetRequest())
        assert region.must_reset
    actions = region.handle(RegionUpdate(True, clean_start=clean))
    assert notes(actions) == [("triggerReset", "seqId=0;resetAttempt=0")]
    assert region.state is S.RESETTING and not region.must_reset and region.healthy_first_time


def test_operator_restart_in_every_state_goes_back_to_started_and_resets():
    for setup in (lambda r: None, lambda r: r.handle(Timeout(TimerKind.DRAIN_PERIOD, 0)),
                  lambda r: r.handle(ResetRequest())):
        region = healthy_region()
        setup(region)
        restarted = Region.from_status(region.spec, region.status_doc())
        restarted.handle(OperatorRestarted())
        assert (restarted.state, restarted.healthy) == (S.STARTED, False)
        actions = restarted.handle(RegionUpdate(True))
        assert notes(actions)[0][0] == "triggerReset"


def test_operator_driven_drain():
    region = healthy_region(trigger="operatorDriven", period=0.0, start_operators={"op": True,
                            "side": False}, trigger_operators={"op": True, "side": False})
    assert region.state is S.PROCESSING
    with pytest.raises(errors.UnknownOperator):
        region.handle(DrainRequest(1, "ghost"))
    with pytest.raises(errors.NotExpected, match="does not trigger"):
        region.handle(DrainRequest(1, "side"))
    with pytest.raises(errors.SequenceMismatch):
        region.handle(DrainRequest(2, "op"))
    actions = region.handle(DrainRequest(1, "op"), now_ms=3.0)
    assert notes(actions) == []  # the trigger operator drains by itself
    assert ArmTimer(TimerKind.DRAIN_TIMEOUT, 30.0, 0) in actions and region.state is S.DRAINING
    with pytest.raises(errors.NotExpected):
        region.handle(DrainRequest(1, "op"))
    for pe in sorted(PES):
        actions = region.handle(Checkpoint(pe, 1))
    assert notes(actions) == [("resumeSubmission", "seqId=2;retId=0;pendCkpt=0")]
    assert not any(isinstance(a, ArmTimer) for a in actions)  # no period on operator-driven


def test_drain_request_on_a_periodic_region_is_refused():
    region = healthy_region(start_operators={"op": True}, trigger_operators={"op": True})
    with pytest.raises(errors.NotExpected, match="periodic"):
        region.handle(DrainRequest(1, "op"))


# -- refusals change nothing ----------------------------------------------------------------------

def _drained_twice() -> Region:
    region = healthy_region()
    region.handle(Timeout(TimerKind.DRAIN_PERIOD, 0))
    region.handle(Checkpoint(7, 1))
    return region


REFUSED = [
    (Checkpoint(99, 1), errors.UnknownPE, 404),
    (Checkpoint(8, 2), errors.SequenceMismatch, 409),
    (Checkpoint(7, 1), errors.DuplicateReport, 409),
    (ResetDone(7, 0, 0), errors.NotExpected, 409),
    (ResetDone(99, 0, 0), errors.UnknownPE, 404),
    (DrainRequest(1, "nobody"), errors.UnknownOperator, 404),
]


@pytest.mark.parametrize("event,error,status_code", REFUSED)
def test_refusal_names_why_and_changes_nothing(event, error, status_code):
    region = _drained_twice()
    before = copy.deepcopy(region.status_doc())
    with pytest.raises(error) as info:
        region.handle(event)
    assert info.value.status == status_code
    body = info.value.as_json()
    assert body["status_code"] == status_code and body["reason"] == error.reason
    assert body["message"]
    assert region.status_doc() == before
    # and the region carries on
    region.handle(Checkpoint(8, 1))
    assert notes(region.handle(Checkpoint(9, 1)))[0][0] == "resumeSubmission"


def test_status_round_trip_and_bad_documents():
    region = _drained_twice()
    again = Region.from_status(region.spec, region.status_doc())
    assert again.status_doc() == region.status_doc()
    assert RegionSpec.from_doc(region.spec.to_doc()) == region.spec
    bad = region.status_doc() | {"state": "DANCING"}
    with pytest.raises(errors.InvalidRequest, match="state"):
        Region.from_status(region.spec, bad)
    with pytest.raises(errors.InvalidRequest, match="currentSeqID"):
        Region.from_status(region.spec, region.status_doc() | {"currentSeqID": "x"})
    with pytest.raises(errors.InvalidRequest, match="peToCompletion"):
        Region.from_status(region.spec, region.status_doc() | {"peToCompletion": {"x": "None"}})
    with pytest.raises(errors.InvalidRequest, match="peToCompletion"):
        Region.from_status(region.spec, region.status_doc() | {"peToCompletion": {"0": "Halfway"}})
    # a PE that left the region while no operator ran (a width change): dropped, not a refusal
    # that would crash-loop the operator (review probe P6)
    departed = max(region.spec.pes) + 1
    narrowed = Region.from_status(region.spec, region.status_doc() | {
        "peToCompletion": {**region.status_doc()["peToCompletion"], str(departed): "CheckpointDone"}})
    assert narrowed.status_doc() == region.status_doc()
    with pytest.raises(errors.InvalidRequest, match="pesInRegion"):
        RegionSpec.from_doc({"regionIndex": 0, "period": 1.0, "pesInRegion": []})
    with pytest.raises(errors.InvalidRequest, match="trigger"):
        RegionSpec.from_doc({"regionIndex": 0, "trigger": "sometimes", "pesInRegion": [1]})
    with pytest.raises(errors.InvalidRequest, match="period"):
        RegionSpec.from_doc({"regionIndex": 0, "pesInRegion": [1]})


# -- the fuzz: the FSM against the reference model -------------------------------------------------

class RegionVersusModel(RuleBasedStateMachine):
    """Random events; after each, the region and the model agree on the status, the notifications,
    the timers and the refusal (by class); a refusal leaves both unchanged."""

    @initialize(n=st.integers(1, 3), periodic=st.booleans(), max_attempts=st.integers(1, 3))
    def setup(self, n, periodic, max_attempts):
        pes = frozenset(range(1, n + 1))
        ops = dict(start_operators={"trig": True, "plain": True},
                   trigger_operators={"trig": True, "plain": False})
        self.region = Region(RegionSpec(0, trigger="periodic" if periodic else "operatorDriven",
                                        period=1.0 if periodic else 0.0, max_attempts=max_attempts,
                                        pes=pes, **ops))
        self.model = Model(pes, periodic, max_attempts, {"trig", "plain"}, {"trig"})
        self.last_completed = 0

    def _both(self, event, name, *args):
        before = self.region.status_doc()
        try:
            expected = self.model.apply(name, *args)
        except Refused as refused:
            with pytest.raises(errors.RegionError) as info:
                self.region.handle(event)
            assert type(info.value).__name__ == refused.name
            assert self.region.status_doc() == before
            return
        actions = self.region.handle(event)
        got = []
        for a in actions:
            if isinstance(a, Notify):
                got.append(("notify", a.kind.value, a.message))
            elif isinstance(a, ArmTimer):
                got.append(("arm", a.kind.value, a.timer_seq))
            elif isinstance(a, CancelTimers):
                got.append(("cancel", a.timer_seq))
        assert got == expected

    def _pe(self, data):
        return data.draw(st.sampled_from([*self.model.pes, 99]))

    @rule(health=st.sampled_from([True, True, False, None]), clean=st.sampled_from([True, True, False]))
    def health(self, health, clean):
        self._both(RegionUpdate(health, clean), "health", health, clean)

    @rule(kind=st.sampled_from([TimerKind.DRAIN_PERIOD] * 4 + list(TimerKind)), back=st.integers(0, 1))
    def timeout(self, kind, back):
        seq = self.model.s["tseq"] - back
        self._both(Timeout(kind, seq), "timeout", kind.value, seq)

    @rule(data=st.data(), blocking=st.sampled_from([False, False, True]))
    def checkpoint(self, data, blocking):
        s = self.model.s
        seq = data.draw(st.sampled_from([s["cur"], s["pend"], s["cur"] + 1]))
        pe = self._pe(data)
        self._both(Checkpoint(pe, seq, blocking), "checkpoint", pe, seq, blocking)

    @rule(data=st.data())
    def reset_done(self, data):
        s = self.model.s
        seq = data.draw(st.sampled_from([s["last"], s["last"], s["last"] + 1]))
        attempt = data.draw(st.sampled_from([s["attempt"] - 1, s["attempt"] - 1, s["attempt"]]))
        pe = self._pe(data)
        self._both(ResetDone(pe, seq, attempt), "reset_done", pe, seq, attempt)

    @rule(data=st.data(), op=st.sampled_from(["trig", "trig", "plain", "ghost"]))
    def drain(self, data, op):
        seq = data.draw(st.sampled_from([self.model.s["cur"], self.model.s["cur"] + 1]))
        self._both(DrainRequest(seq, op), "drain", seq, op)

    @rule(force=st.booleans(), health=st.sampled_from([True, False, None]))
    def reset(self, force, health):
        self._both(ResetRequest(force, health), "reset", force, health)

    @rule(dice=st.integers(0, 4))
    def restart(self, dice):
        if dice == 0:  # rarer than the rest, so the fuzz gets past STARTED
            self._both(OperatorRestarted(), "restart")

    def _progress(self, data):
        """The event that moves the region on from its state (the random rules rarely find it)."""
        s, pes = self.model.s, self.model.pes
        state = s["state"]
        if state in ("STARTED", "UNHEALTHY"):
            if s["healthy"]:
                self._both(RegionUpdate(False), "health", False, True)
            self._both(RegionUpdate(True), "health", True, True)
        elif state == "PROCESSING":
            if self.model.periodic:
                self._both(Timeout(TimerKind.DRAIN_PERIOD, s["tseq"]), "timeout", "DrainPeriod", s["tseq"])
            else:
                self._both(DrainRequest(s["cur"], "trig"), "drain", s["cur"], "trig")
        elif state in ("DRAINING", "CHECKPOINT_PENDING"):
            seq = s["cur"] if state == "DRAINING" else s["pend"]
            todo = [p for p in pes if s["prog"].get(p) != "CheckpointDone"]
            pe = data.draw(st.sampled_from(todo))
            blocking = state == "DRAINING" and data.draw(st.booleans()) and s["prog"].get(pe) is None
            self._both(Checkpoint(pe, seq, blocking), "checkpoint", pe, seq, blocking)
        elif state == "RESETTING":
            todo = [p for p in pes if s["prog"].get(p) != "ResetDone"]
            pe = data.draw(st.sampled_from(todo))
            self._both(ResetDone(pe, s["last"], s["attempt"] - 1), "reset_done", pe, s["last"],
                       s["attempt"] - 1)
        else:
            self._both(ResetRequest(True, True), "reset", True, True)

    @rule(data=st.data())
    def progress(self, data):
        self._progress(data)

    @rule(data=st.data())
    def progress_again(self, data):
        self._progress(data)

    @rule(data=st.data())
    def progress_once_more(self, data):
        self._progress(data)

    @rule()
    def round_trip(self):
        again = Region.from_status(self.region.spec, self.region.status_doc())
        again.restarted = self.region.restarted
        assert again.status_doc() == self.region.status_doc()
        self.region = again

    @invariant()
    def agree(self):
        doc = self.region.status_doc()
        doc.pop("metrics")
        assert doc == self.model.status()
        assert self.region.last_completed_seq >= self.last_completed
        assert self.region.current_seq > self.region.last_completed_seq
        self.last_completed = self.region.last_completed_seq


RegionVersusModel.TestCase.settings = settings(
    max_examples=examples(300, 100), stateful_step_count=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_region_against_the_model = RegionVersusModel.TestCase
