"""The shim and node state machines, driven directly (no I/O)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shim_k8s.state import (
    NODE_TRANSITIONS,
    SHIM_TRANSITIONS,
    IllegalTransition,
    NodeEvent,
    NodeRecovery,
    NodeState,
    ShimEvent,
    ShimFailedError,
    ShimMachine,
    ShimState,
    diagram,
)

S, E = ShimState, ShimEvent

LEGAL = {
    (S.NEW, E.REGISTER): S.REGISTERED,
    (S.NEW, E.FAIL): S.FAILED,
    (S.NEW, E.DISCONNECT): S.NEW,
    (S.REGISTERED, E.RECOVER): S.RECOVERING,
    (S.REGISTERED, E.FAIL): S.FAILED,
    (S.REGISTERED, E.DISCONNECT): S.NEW,
    (S.RECOVERING, E.RECOVERED): S.RUNNING,
    (S.RECOVERING, E.FAIL): S.FAILED,
    (S.RECOVERING, E.DISCONNECT): S.NEW,
    (S.RUNNING, E.FAIL): S.FAILED,
    (S.RUNNING, E.DISCONNECT): S.NEW,
}

PATH_TO = {
    S.NEW: [],
    S.REGISTERED: [E.REGISTER],
    S.RECOVERING: [E.REGISTER, E.RECOVER],
    S.RUNNING: [E.REGISTER, E.RECOVER, E.RECOVERED],
    S.FAILED: [E.FAIL],
}


def machine_in(state: ShimState) -> ShimMachine:
    m = ShimMachine(clock=lambda: 1.0)
    for event in PATH_TO[state]:
        m.fire(event)
    assert m.state is state
    return m


def test_table_is_exactly_the_seed_plus_disconnect():
    table = {(s, e): new for s, row in SHIM_TRANSITIONS.items() for e, new in row.items()}
    assert table == LEGAL


def test_happy_path_seed_order():
    m = ShimMachine(clock=lambda: 5.0)
    assert m.state is S.NEW
    t1 = m.fire(E.REGISTER, "registered")
    assert (m.state, t1.old, t1.new, t1.event) == (S.REGISTERED, "New", "Registered", "Register")
    m.fire(E.RECOVER)
    assert m.state is S.RECOVERING
    m.fire(E.RECOVERED)
    assert m.state is S.RUNNING
    assert [t.new for t in m.history] == ["Registered", "Recovering", "Running"]
    assert m.history[0].to_json() == {"from": "New", "to": "Registered", "event": "Register",
                                      "reason": "registered", "time": 5.0}


@pytest.mark.parametrize("state,event", list(itertools.product(
    [s for s in S if s is not S.FAILED], list(E))))
def test_every_transition(state, event):
    m = machine_in(state)
    before = list(m.history)
    if (state, event) in LEGAL:
        t = m.fire(event)
        assert m.state is LEGAL[(state, event)]
        assert t.old == state.value and t.new == m.state.value
        assert list(m.history) == before + [t]
    else:
        with pytest.raises(IllegalTransition) as info:
            m.fire(event)
        assert info.value.state is state and info.value.event is event
        assert "can't handle event" in str(info.value)
        assert m.state is state
        assert list(m.history) == before


@pytest.mark.parametrize("event", list(E))
def test_failed_is_sticky(event):
    m = machine_in(S.RUNNING)
    m.fire(E.FAIL, "engine refused")
    assert m.state is S.FAILED and m.failure == "engine refused"
    assert not m.accepts(event)
    with pytest.raises(ShimFailedError, match="engine refused"):
        m.fire(event)
    assert m.state is S.FAILED


def test_engine_restart_goes_back_to_new_and_recovers_again():
    m = machine_in(S.RUNNING)
    m.fire(E.DISCONNECT, "engine gone")
    assert m.state is S.NEW
    for event in PATH_TO[S.RUNNING]:
        m.fire(event)
    assert m.state is S.RUNNING


@given(st.lists(st.sampled_from(list(E)), max_size=40))
def test_fuzz_only_documented_errors(events):
    m = ShimMachine()
    for event in events:
        before = m.state
        try:
            m.fire(event)
        except ShimFailedError:
            assert before is S.FAILED
        except IllegalTransition:
            assert m.state is before
        else:
            assert m.state is SHIM_TRANSITIONS[before][event]


def test_node_recovery_states():
    r = NodeRecovery()
    r.start(["n1", "n2", "n3"])
    assert r.counts() == {"recovering": 3, "recovered": 0, "lost": 0}
    assert not r.complete
    r.fire("n1", NodeEvent.RECOVERED)
    r.fire("n2", NodeEvent.LOST)          # deleted while recovering
    assert not r.complete
    r.fire("n3", NodeEvent.RECOVERED)
    assert r.complete                      # lost nodes do not hold recovery up
    r.add("n2")                            # it came back: recover it again
    assert r.get("n2") is NodeState.RECOVERING and not r.complete
    r.fire("n2", NodeEvent.RECOVERED)
    assert r.complete
    with pytest.raises(IllegalTransition):
        r.fire("n1", NodeEvent.RECOVERED)  # recovered is not recovered twice
    assert r.get("n1") is NodeState.RECOVERED
    for name in ("n1", "n2", "n3"):
        r.fire(name, NodeEvent.RESET)      # a new engine
    assert r.counts()["recovering"] == 3


def test_node_table_every_pair():
    for state in NodeState:
        for event in NodeEvent:
            r = NodeRecovery()
            r.states["n"] = state
            if event in NODE_TRANSITIONS[state]:
                assert r.fire("n", event) is NODE_TRANSITIONS[state][event]
            else:
                with pytest.raises(IllegalTransition):
                    r.fire("n", event)
                assert r.get("n") is state


def test_diagram_drawn_from_table():
    text = diagram()
    assert "New --Register--> Registered" in text
    assert "Recovering --Success--> Running" in text
    assert "recovering --recovered--> recovered" in text
    assert text.count("-->") == sum(map(len, SHIM_TRANSITIONS.values())) + sum(
        map(len, NODE_TRANSITIONS.values()))
