"""A message the engine refuses changes nothing: validation happens before any mutation.

Each SI request carries several items; if a later item is malformed, the earlier ones must not
have been applied (the engine answers Error and the partition is as it was). The fuzz corrupts
one field of a valid multi-item message: the only error ever seen is ProtocolError, and with it
nothing changed.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from engine_helpers import Harness, res

from engine import snapshot
from si.protocol import ProtocolError
from si.resources import to_si


def _state(h: Harness) -> tuple:
    """Everything a reader or the shim could see: the snapshot, events, queued messages."""
    doc = snapshot.build(h.sched, pid=0)
    doc["engine"].pop("publishedNano")
    return (doc, len(h.sink.events), h.sched.version, h.sched.outbox.take(),
            h.sink.take_requests())


def _started() -> Harness:
    h = Harness()
    h.nodes("n1", "n2", cap=res(4, 4000))
    h.app("app-1")
    h.asks("app-1", "a1", "a2")
    h.cycle()
    h.sched.take_outgoing()
    return h


def _node(node_id: str, action: str = "CREATE") -> dict:
    return {"nodeID": node_id, "action": action, "schedulableResource": to_si(res(2, 2000))}


def _ask(key: str) -> dict:
    return {"allocationKey": key, "applicationID": "app-1", "resourceAsk": to_si(res(1, 100))}


VALID = {
    "ApplicationRequest": {"new": [{"applicationID": "app-2", "queueName": "root.x",
                                    "ugi": {"user": "bob", "groups": ["g"]}}],
                           "remove": [{"applicationID": "app-1"}]},
    "NodeRequest": {"nodes": [_node("n3"), _node("n1", "DRAIN_NODE"), _node("n2", "DECOMISSION")]},
    "AllocationRequest": {
        "asks": [_ask("a3"), _ask("a4")],
        "allocations": [{"allocationKey": "x1", "applicationID": "app-1", "nodeID": "n2",
                         "resourcePerAlloc": to_si(res(1, 100))}],
        "releases": {"allocationsToRelease": [{"applicationID": "app-1", "allocationKey": "a1",
                                               "terminationType": "STOPPED_BY_RM"}],
                     "allocationAsksToRelease": [{"applicationID": "app-1",
                                                  "allocationKey": "a2"}]}},
}

BAD_LAST_ITEM = [
    ("NodeRequest", {"nodes": [_node("n3"), {**_node("n4"),
                                              "attributes": {"si/node-partition": 5}}]},
     "NodeRequest.nodes[1].attributes.si/node-partition must be str, got int"),
    ("AllocationRequest", {"asks": [_ask("a3"), {**_ask("a4"), "partitionName": 7}]},
     "AllocationRequest.asks[1].partitionName must be str, got int"),
    ("AllocationRequest", {"asks": [_ask("a3"), {**_ask("a4"), "allocationTags": "x"}]},
     "AllocationRequest.asks[1].allocationTags must be dict, got str"),
    ("AllocationRequest", {"asks": [_ask("a3")], "releases": {"allocationsToRelease": [
        {"applicationID": "app-1", "allocationKey": "a1", "message": 3}]}},
     "AllocationRequest.releases.allocationsToRelease[0].message must be str, got int"),
    ("ApplicationRequest", {"new": [{"applicationID": "app-2"}],
                            "remove": [{"applicationID": "app-1", "partitionName": []}]},
     "ApplicationRequest.remove[0].partitionName must be str, got list"),
]


@pytest.mark.parametrize("mtype, body, error", BAD_LAST_ITEM)
def test_a_refused_message_leaves_the_partition_unchanged(mtype, body, error):
    h = _started()
    before = _state(h)
    with pytest.raises(ProtocolError) as info:
        h.handle({"type": mtype, **copy.deepcopy(body)})
    assert str(info.value) == error
    assert _state(h) == before
    # the same items without the bad one are applied: the refusal was the bad item's
    h.handle({"type": "NodeRequest", "nodes": [_node("n3")]})
    assert "n3" in h.part.nodes


def test_valid_messages_of_the_fuzz_are_applied():
    for mtype, body in VALID.items():
        h = _started()
        before = _state(h)
        h.handle({"type": mtype, **copy.deepcopy(body)})
        assert _state(h) != before, mtype


JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=3),
                    lambda inner: st.lists(inner, max_size=2)
                    | st.dictionaries(st.text(max_size=3), inner, max_size=2), max_leaves=4)


def _paths(obj, prefix=()):
    """Every (path) to a value inside a message body, containers included."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mtype=st.sampled_from(sorted(VALID)), data=st.data(), value=JSON)
def test_only_protocol_errors_and_nothing_half_applied(mtype, data, value):
    h = _started()
    body = copy.deepcopy(VALID[mtype])
    path = data.draw(st.sampled_from(sorted(_paths(body), key=repr)))
    target = body
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    before = _state(h)
    try:
        h.handle({"type": mtype, **body})
    except ProtocolError:
        assert _state(h) == before
