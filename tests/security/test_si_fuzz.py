"""Fuzzing the SI as an attacker who can write frames to the engine (issue 26.9).

The engine answers a malformed or out-of-order message with an `Error` (ProtocolError /
OutOfOrderError) and changes nothing; any other exception is an undocumented error the SI server
would log as an internal failure. Frames are built from valid shim messages, mutated at a random
place (a value replaced by any JSON, a key removed, a container emptied, a huge number), framed,
split at random points and fed through the real `FrameDecoder` into `Scheduler.handle`, whose
state is then checked: it still answers a valid message.
"""

from __future__ import annotations

import copy
import struct
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from fuzzbudget import examples

from engine.config import parse_config
from engine.events_out import MemoryEventSink
from engine.scheduler import OutOfOrderError, Scheduler
from si import protocol as P
from si.resources import to_si

json_scalars = (st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70) | st.floats(allow_nan=True)
                | st.text(max_size=8) | st.sampled_from(["", "CREATE", "Hard", "root", "default", "rm"]))
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)

NODE = {"nodeID": "n1", "action": "CREATE", "attributes": {"si.io/hostname": "n1"},
        "schedulableResource": to_si({"memory": 1 << 30, "vcore": 4000})}
APP = {"applicationID": "a1", "queueName": "root.default", "partitionName": "default",
       "ugi": {"user": "alice", "groups": ["dev"]}, "tags": {"namespace": "ns"},
       "placeholderAsk": to_si({"memory": 1}), "gangSchedulingStyle": "Soft",
       "executionTimeoutMilliSeconds": 1000}
ASK = {"allocationKey": "k1", "applicationID": "a1", "partitionName": "default",
       "resourceAsk": to_si({"memory": 1 << 20, "vcore": 100}), "priority": 0, "placeholder": False,
       "taskGroupName": "", "allocationTags": {"kubernetes.io/label/app": "x"}}
TEMPLATES: list[dict[str, Any]] = [
    {"type": "RegisterResourceManager", "rmID": "rm", "policyGroup": "queues", "version": "1", "id": 1},
    {"type": "UpdateConfiguration", "rmID": "rm", "policyGroup": "queues",
     "config": "partitions: [{name: default, queues: [{name: root, queues: [{name: default}]}]}]",
     "extraConfig": {"log.level": "INFO"}, "id": 2},
    {"type": "NodeRequest", "rmID": "rm", "nodes": [NODE, {**NODE, "nodeID": "n2", "action": "CREATE_DRAIN"}],
     "id": 3},
    {"type": "ApplicationRequest", "rmID": "rm", "new": [APP],
     "remove": [{"applicationID": "gone", "partitionName": "default"}], "id": 4},
    {"type": "AllocationRequest", "rmID": "rm", "asks": [ASK],
     "allocations": [{"allocationKey": "e1", "applicationID": "a1", "partitionName": "default",
                      "nodeID": "n1", "resourcePerAlloc": to_si({"memory": 1}), "placeholder": False,
                      "taskGroupName": "", "priority": 0}],
     "releases": {"allocationsToRelease": [{"partitionName": "default", "applicationID": "a1",
                                            "allocationKey": "e1", "terminationType": "STOPPED_BY_RM",
                                            "message": "m"}],
                  "allocationAsksToRelease": [{"partitionName": "default", "applicationID": "a1",
                                               "allocationKey": "k1", "message": "m"}]}, "id": 5},
]


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a JSON document, as a path of keys and indexes."""
    found = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            found += _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += _paths(v, prefix + (i,))
    return found


def _mutate(doc: Any, path: tuple, how: str, new: Any) -> Any:
    if not path:
        return new if how == "replace" else doc
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if how == "replace":
        parent[last] = new
    elif how == "delete" and isinstance(parent, dict):
        del parent[last]
    elif how == "empty" and isinstance(parent[last], (dict, list)):
        parent[last] = type(parent[last])()
    elif how == "huge":
        parent[last] = 1 << 64
    return doc


@st.composite
def mutated_messages(draw) -> dict[str, Any]:
    doc = copy.deepcopy(draw(st.sampled_from(TEMPLATES)))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        doc = _mutate(doc, path, draw(st.sampled_from(["replace", "delete", "empty", "huge"])), draw(json_values))
    return doc


def _scheduler() -> Scheduler:
    sched = Scheduler(parse_config({}), MemoryEventSink(), instance_uuid="u-1", ring_name="r-1")
    for msg in TEMPLATES[:4]:
        sched.handle(msg, "rm")
    return sched


def _frames(doc: Any) -> bytes:
    try:
        return P.encode(doc)
    except TypeError:  # orjson cannot encode it (e.g. an integer over 64 bits): send it as text
        body = repr(doc).encode()
        return struct.pack(">I", len(body)) + body


@settings(max_examples=examples(400, 150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutated_messages(), min_size=1, max_size=4), st.lists(st.integers(1, 64), max_size=6))
def test_mutated_frames_get_documented_errors_only_and_the_engine_keeps_working(docs, cuts):
    sched = _scheduler()
    stream = b"".join(_frames(d) for d in docs)
    decoder = P.FrameDecoder(max_frame=1 << 20)
    pos = 0
    for cut in [*cuts, len(stream)]:  # the bytes arrive in pieces
        decoder.feed(stream[pos:pos + cut])
        pos += cut
        while True:
            try:
                msg = decoder.next_message()
            except P.ProtocolError:
                continue  # answered with Error; the decoder goes on with the next frame
            if msg is None:
                break
            try:
                sched.handle(msg, "rm")
            except (P.ProtocolError, OutOfOrderError):
                pass
    decoder.feed(stream[pos:])
    # whatever came before, a valid message is still served
    handled = sched.handle({"type": "NodeRequest", "rmID": "rm",
                            "nodes": [{**NODE, "nodeID": "fresh", "action": "CREATE"}]}, "rm")
    assert not handled.problems
    assert "fresh" in sched.partitions["default"].nodes


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_any_json_object_as_a_message_is_refused_or_applied_never_a_crash(body):
    sched = _scheduler()
    msg = body if isinstance(body, dict) else {"type": "AllocationRequest", "rmID": "rm", "asks": body}
    try:
        sched.handle(msg, "rm")
    except (P.ProtocolError, OutOfOrderError):
        pass
