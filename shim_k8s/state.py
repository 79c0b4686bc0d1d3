"""The shim's state machines: the scheduler shim itself, and the recovery state of each node.

Rules (read these before changing anything here)
------------------------------------------------
1. Everything that decides a state lives in this module, as data: `SHIM_TRANSITIONS` and
   `NODE_TRANSITIONS` map `state -> {event: new_state}`. An event missing from a state's row is
   illegal; `fire` raises `IllegalTransition` naming the machine, the state and the event, and the
   state does not change.
2. No I/O here. The trio driver (`shim_k8s.shim`) feeds events in and acts on the new state; the
   machines only remember where they are and a bounded history of transitions (for `shim status`
   and the log, which the driver writes from `Transition` records).
3. The shim machine follows the shim-recovery seed::

        New --REGISTER--> Registered --RECOVER--> Recovering --RECOVERED--> Running
         |                   |                       |                        |
         +---------FAIL------+----------FAIL---------+-----------FAIL---------+--> Failed

   plus the engine-restart rule of ykshm: the SI connection dropping (`DISCONNECT`) from
   Registered, Recovering or Running goes back to New, so the shim waits for the engine, registers
   and recovers again. `DISCONNECT` in New is a no-op loop (still waiting).
4. Failed is sticky (h11's ERROR): it has no outgoing transitions, and once a machine is Failed
   every later `fire` raises `ShimFailedError` at once, whatever the event.
5. A node's recovery: a node the shim knows when recovery starts, or that appears later, is
   RECOVERING until the engine has acknowledged the node and every existing allocation on it;
   then RECOVERED (and only then may it become schedulable). A node whose object is deleted while
   recovering is LOST; if it comes back it is RECOVERING again (the seed: "if after sometime this
   node comes back, shim should still try to recover this node"). Recovery of the shim is complete
   when no node is RECOVERING (lost nodes do not hold it up; their pods are held until the node
   returns).

Errors::

    StateError              base, never raised itself
     +-- IllegalTransition  an event that the current state does not accept
     +-- ShimFailedError    any event after the machine reached Failed (sticky)
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections import deque
from collections.abc import Iterable, Mapping


class ShimState(enum.Enum):
    NEW = "New"
    REGISTERED = "Registered"
    RECOVERING = "Recovering"
    RUNNING = "Running"
    FAILED = "Failed"


class ShimEvent(enum.Enum):
    REGISTER = "Register"          # RegisterResourceManager acknowledged by the engine
    RECOVER = "Recover"            # caches synced, recovery messages about to be sent
    RECOVERED = "Success"          # every node recovered, nodes made schedulable
    FAIL = "Fail"                  # unrecoverable error (bad config, engine refused us)
    DISCONNECT = "Disconnect"      # SI connection lost: the engine restarted or went away


class NodeState(enum.Enum):
    RECOVERING = "recovering"
    RECOVERED = "recovered"
    LOST = "lost"


class NodeEvent(enum.Enum):
    RECOVERED = "recovered"        # engine acked the node and all its existing allocations
    LOST = "lost"                  # the node object was deleted (or the engine rejected it)
    FOUND = "found"                # the node (re)appeared: recover it (again)
    RESET = "reset"                # a new engine: every node must be recovered again


S, E = ShimState, ShimEvent

SHIM_TRANSITIONS: Mapping[ShimState, Mapping[ShimEvent, ShimState]] = {
    S.NEW: {E.REGISTER: S.REGISTERED, E.FAIL: S.FAILED, E.DISCONNECT: S.NEW},
    S.REGISTERED: {E.RECOVER: S.RECOVERING, E.FAIL: S.FAILED, E.DISCONNECT: S.NEW},
    S.RECOVERING: {E.RECOVERED: S.RUNNING, E.FAIL: S.FAILED, E.DISCONNECT: S.NEW},
    S.RUNNING: {E.FAIL: S.FAILED, E.DISCONNECT: S.NEW},
    S.FAILED: {},
}

N, NE = NodeState, NodeEvent

NODE_TRANSITIONS: Mapping[NodeState, Mapping[NodeEvent, NodeState]] = {
    N.RECOVERING: {NE.RECOVERED: N.RECOVERED, NE.LOST: N.LOST, NE.RESET: N.RECOVERING,
                   NE.FOUND: N.RECOVERING},
    N.RECOVERED: {NE.LOST: N.LOST, NE.RESET: N.RECOVERING},
    N.LOST: {NE.FOUND: N.RECOVERING, NE.RESET: N.LOST, NE.LOST: N.LOST},
}

del S, E, N, NE


class StateError(Exception):
    """Base of the state-machine errors; never raised itself."""


class IllegalTransition(StateError):
    """An event the current state does not accept; the state is unchanged."""

    def __init__(self, machine: str, state: enum.Enum, event: enum.Enum) -> None:
        super().__init__(f"{machine}: can't handle event {event.value!r} in state {state.value!r}")
        self.machine, self.state, self.event = machine, state, event


class ShimFailedError(StateError):
    """The shim machine is Failed (sticky): no event is accepted any more."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"shim is Failed: {reason}")
        self.reason = reason


@dataclasses.dataclass(frozen=True, slots=True)
class Transition:
    """One state change, as logged and shown by `ykshm shim status`."""

    old: str
    new: str
    event: str
    reason: str
    time: float

    def to_json(self) -> dict[str, object]:
        return {"from": self.old, "to": self.new, "event": self.event, "reason": self.reason,
                "time": self.time}


class ShimMachine:
    """The shim scheduler state (seed: New -> Registered -> Recovering -> Running, or Failed)."""

    __slots__ = ("state", "history", "failure", "_clock")

    def __init__(self, history: int = 50, clock=time.time) -> None:
        self.state = ShimState.NEW
        self.history: deque[Transition] = deque(maxlen=history)
        self.failure = ""
        self._clock = clock

    def fire(self, event: ShimEvent, reason: str = "") -> Transition:
        """Apply an event; returns the transition. Raises IllegalTransition / ShimFailedError."""
        if self.state is ShimState.FAILED:
            raise ShimFailedError(self.failure)
        try:
            new = SHIM_TRANSITIONS[self.state][event]
        except KeyError:
            raise IllegalTransition("shim", self.state, event) from None
        record = Transition(self.state.value, new.value, event.value, reason, self._clock())
        self.state = new
        if new is ShimState.FAILED:
            self.failure = reason or "failed"
        self.history.append(record)
        return record

    def accepts(self, event: ShimEvent) -> bool:
        return event in SHIM_TRANSITIONS[self.state]


class NodeRecovery:
    """Per-node recovery states; `complete` when no node is RECOVERING."""

    __slots__ = ("states",)

    def __init__(self) -> None:
        self.states: dict[str, NodeState] = {}

    def start(self, names: Iterable[str]) -> None:
        """Recovery begins: every known node is RECOVERING, forgotten nodes are dropped."""
        self.states = {name: NodeState.RECOVERING for name in names}

    def add(self, name: str) -> None:
        """A node to recover (new, or back after being lost)."""
        state = self.states.get(name)
        if state is None:
            self.states[name] = NodeState.RECOVERING
        else:
            self.fire(name, NodeEvent.FOUND)

    def fire(self, name: str, event: NodeEvent) -> NodeState:
        state = self.states[name]
        try:
            new = NODE_TRANSITIONS[state][event]
        except KeyError:
            raise IllegalTransition(f"node {name}", state, event) from None
        self.states[name] = new
        return new

    def forget(self, name: str) -> None:
        self.states.pop(name, None)

    def get(self, name: str) -> NodeState | None:
        return self.states.get(name)

    @property
    def complete(self) -> bool:
        return all(s is not NodeState.RECOVERING for s in self.states.values())

    def counts(self) -> dict[str, int]:
        result = {s.value: 0 for s in NodeState}
        for s in self.states.values():
            result[s.value] += 1
        return result


def diagram() -> str:
    """The transition tables as text (the docs are drawn from the same data as the code)."""
    lines = ["shim:"]
    for state, row in SHIM_TRANSITIONS.items():
        for event, new in row.items():
            lines.append(f"  {state.value} --{event.value}--> {new.value}")
    lines.append("node:")
    for nstate, nrow in NODE_TRANSITIONS.items():
        for nevent, nnew in nrow.items():
            lines.append(f"  {nstate.value} --{nevent.value}--> {nnew.value}")
    return "\n".join(lines)
