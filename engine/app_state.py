"""The application state machine: every legal transition lives here, as data.

Rules
-----
Rule 1: the state of an application changes only through `ApplicationFSM.fire(event)`; nothing
else assigns a state. The transition table below is the whole machine. A (state, event) pair
missing from the table is illegal and raises `InvalidTransition` naming both, from None; an
illegal attempt changes nothing (the machine is not broken by it: the caller decides).

Rule 2: the machine does no I/O. `fire` returns the new state; the caller
(`engine.partition.apps.set_state`) emits the APP / SET / APP_<STATE> event and does the
bookkeeping tied to a state entry (timers, termination). Pure in, pure out, so tests drive it
directly.

Rule 3: the states are YuniKorn's (application_state.go), and the events are what makes the
scheduler core move an application:

- RUN: the next active state. New -> Accepted (first ask), Resuming -> Accepted (placeholders
  gone), Accepted -> Starting (first allocation), Starting -> Running (next allocation, or no
  pending ask left, or the starting timeout), Completing -> Running (a new ask or allocation
  while completing: a restarted pod), Running -> Running (no change, not an event).
- COMPLETE: Accepted/Starting/Running -> Completing when the last allocation is gone and no
  ask is pending; Completing -> Completed when the completing timeout passes.
- REJECT: New -> Rejected (no queue, queue full of applications, ...).
- FAIL: New/Accepted/Starting/Running/Resuming -> Failing (hard gang timeout, RM removal while
  allocations remain), Failing -> Failed (the last allocation is gone).
- RESUME: New/Accepted/Starting/Running -> Resuming: a "Soft" gang whose placeholders timed out
  before any real allocation replaced one (Starting/Running then only held placeholders); the
  placeholders are released and the application continues without gang semantics (RUN ->
  Accepted). A "Hard" gang fails instead (FAIL).
- EXPIRE: Completed/Failed/Rejected -> Expired: terminal applications are forgotten after the
  retention time.

Rule 4: running-application counting (user-group-usage-tracking seed): an application counts as
running from its first allocation (entry into Starting from Accepted, or Completing -> Running)
until it enters Completing, Failing or is removed. `RUNNING_STATES` is that set.

The diagram in `docs` can be generated from `TRANSITIONS` with `diagram()`.
"""

from __future__ import annotations

import enum

from shm.events import EventChangeDetail


class AppState(enum.Enum):
    NEW = "New"
    ACCEPTED = "Accepted"
    STARTING = "Starting"
    RUNNING = "Running"
    COMPLETING = "Completing"
    COMPLETED = "Completed"
    REJECTED = "Rejected"
    FAILING = "Failing"
    FAILED = "Failed"
    RESUMING = "Resuming"
    EXPIRED = "Expired"


class AppEvent(enum.Enum):
    RUN = "runApplication"
    COMPLETE = "completeApplication"
    REJECT = "rejectApplication"
    FAIL = "failApplication"
    RESUME = "resumeApplication"
    EXPIRE = "expireApplication"


S, E = AppState, AppEvent

TRANSITIONS: dict[AppState, dict[AppEvent, AppState]] = {
    S.NEW: {E.RUN: S.ACCEPTED, E.REJECT: S.REJECTED, E.FAIL: S.FAILING, E.RESUME: S.RESUMING},
    S.ACCEPTED: {E.RUN: S.STARTING, E.COMPLETE: S.COMPLETING, E.FAIL: S.FAILING,
                 E.RESUME: S.RESUMING},
    S.STARTING: {E.RUN: S.RUNNING, E.COMPLETE: S.COMPLETING, E.FAIL: S.FAILING,
                 E.RESUME: S.RESUMING},
    S.RUNNING: {E.RUN: S.RUNNING, E.COMPLETE: S.COMPLETING, E.FAIL: S.FAILING,
                E.RESUME: S.RESUMING},
    S.COMPLETING: {E.RUN: S.RUNNING, E.COMPLETE: S.COMPLETED},
    S.COMPLETED: {E.EXPIRE: S.EXPIRED},
    S.REJECTED: {E.EXPIRE: S.EXPIRED},
    S.FAILING: {E.FAIL: S.FAILED},
    S.FAILED: {E.EXPIRE: S.EXPIRED},
    S.RESUMING: {E.RUN: S.ACCEPTED, E.FAIL: S.FAILING},
    S.EXPIRED: {},
}
"""{state: {event: new state}}; a missing key is an illegal transition."""

STATE_DETAIL: dict[AppState, EventChangeDetail] = {
    S.NEW: EventChangeDetail.APP_NEW,
    S.ACCEPTED: EventChangeDetail.APP_ACCEPTED,
    S.STARTING: EventChangeDetail.APP_STARTING,
    S.RUNNING: EventChangeDetail.APP_RUNNING,
    S.COMPLETING: EventChangeDetail.APP_COMPLETING,
    S.COMPLETED: EventChangeDetail.APP_COMPLETED,
    S.REJECTED: EventChangeDetail.APP_REJECT,
    S.FAILING: EventChangeDetail.APP_FAILING,
    S.FAILED: EventChangeDetail.APP_FAILED,
    S.RESUMING: EventChangeDetail.APP_RESUMING,
    S.EXPIRED: EventChangeDetail.APP_EXPIRED,
}
"""The change detail of the APP / SET event recorded on entry into a state."""

TERMINAL_STATES = frozenset({S.COMPLETED, S.REJECTED, S.FAILED, S.EXPIRED})
RUNNING_STATES = frozenset({S.STARTING, S.RUNNING})
SCHEDULABLE_STATES = frozenset({S.ACCEPTED, S.STARTING, S.RUNNING, S.COMPLETING, S.RESUMING})


class InvalidTransition(Exception):
    """Raised by `fire` for an event the current state has no transition for."""

    def __init__(self, state: AppState, event: AppEvent) -> None:
        super().__init__(f"application in state {state.value} cannot handle event {event.value}")
        self.state = state
        self.event = event


class ApplicationFSM:
    """The state of one application; `fire` is the only way to change it."""

    __slots__ = ("state",)

    def __init__(self, state: AppState = AppState.NEW) -> None:
        self.state = state

    def can_fire(self, event: AppEvent) -> bool:
        return event in TRANSITIONS[self.state]

    def fire(self, event: AppEvent) -> AppState:
        try:
            new_state = TRANSITIONS[self.state][event]
        except KeyError:
            raise InvalidTransition(self.state, event) from None
        self.state = new_state
        return new_state


def diagram() -> str:
    """The machine as Graphviz dot, generated from TRANSITIONS (so docs cannot drift)."""
    lines = ["digraph application {"]
    for state, edges in TRANSITIONS.items():
        for event, target in edges.items():
            lines.append(f'  "{state.value}" -> "{target.value}" [label="{event.value}"];')
    lines.append("}")
    return "\n".join(lines)
