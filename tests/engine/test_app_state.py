"""The application state machine: every (state, event) pair, legal or not, and a fuzz."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.app_state import (STATE_DETAIL, TRANSITIONS, ApplicationFSM, AppEvent, AppState,
                              InvalidTransition, diagram)

S, E = AppState, AppEvent

# The expected table, written out independently of the module's data.
LEGAL = {
    (S.NEW, E.RUN): S.ACCEPTED, (S.NEW, E.REJECT): S.REJECTED, (S.NEW, E.FAIL): S.FAILING,
    (S.NEW, E.RESUME): S.RESUMING,
    (S.ACCEPTED, E.RUN): S.STARTING, (S.ACCEPTED, E.COMPLETE): S.COMPLETING,
    (S.ACCEPTED, E.FAIL): S.FAILING, (S.ACCEPTED, E.RESUME): S.RESUMING,
    (S.STARTING, E.RUN): S.RUNNING, (S.STARTING, E.COMPLETE): S.COMPLETING,
    (S.STARTING, E.FAIL): S.FAILING, (S.STARTING, E.RESUME): S.RESUMING,
    (S.RUNNING, E.RUN): S.RUNNING, (S.RUNNING, E.COMPLETE): S.COMPLETING,
    (S.RUNNING, E.FAIL): S.FAILING, (S.RUNNING, E.RESUME): S.RESUMING,
    (S.COMPLETING, E.RUN): S.RUNNING, (S.COMPLETING, E.COMPLETE): S.COMPLETED,
    (S.COMPLETED, E.EXPIRE): S.EXPIRED, (S.REJECTED, E.EXPIRE): S.EXPIRED,
    (S.FAILING, E.FAIL): S.FAILED, (S.FAILED, E.EXPIRE): S.EXPIRED,
    (S.RESUMING, E.RUN): S.ACCEPTED, (S.RESUMING, E.FAIL): S.FAILING,
}
ALL_PAIRS = [(s, e) for s in AppState for e in AppEvent]


def test_table_is_exactly_the_expected_one():
    table = {(s, e): t for s, edges in TRANSITIONS.items() for e, t in edges.items()}
    assert table == LEGAL
    assert set(TRANSITIONS) == set(AppState)


@pytest.mark.parametrize("state,event", [p for p in ALL_PAIRS if p in LEGAL])
def test_legal_transition(state, event):
    fsm = ApplicationFSM(state)
    assert fsm.can_fire(event)
    assert fsm.fire(event) is LEGAL[(state, event)]
    assert fsm.state is LEGAL[(state, event)]


@pytest.mark.parametrize("state,event", [p for p in ALL_PAIRS if p not in LEGAL])
def test_illegal_transition_names_state_and_event_and_changes_nothing(state, event):
    fsm = ApplicationFSM(state)
    assert not fsm.can_fire(event)
    with pytest.raises(InvalidTransition) as info:
        fsm.fire(event)
    assert info.value.state is state and info.value.event is event
    assert state.value in str(info.value) and event.value in str(info.value)
    assert info.value.__suppress_context__  # raised "from None"
    assert fsm.state is state


def test_every_state_has_an_event_detail_and_diagram_lists_every_edge():
    assert set(STATE_DETAIL) == set(AppState)
    assert diagram().count("->") == len(LEGAL)


@given(st.lists(st.sampled_from(list(AppEvent)), max_size=40))
def test_fuzz_only_the_documented_error(events):
    fsm = ApplicationFSM()
    for event in events:
        before = fsm.state
        try:
            after = fsm.fire(event)
        except InvalidTransition:
            assert fsm.state is before
        else:
            assert LEGAL[(before, event)] is after
