"""SI framing and schema: fed whole, byte by byte, with trailing data; only ProtocolError."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from si import protocol as P
from si.parse import validate

MSGS = [{"type": "Ack", "replyTo": 1}, {"type": "Error", "message": "x", "messageType": ""},
        {"type": "AllocationResponse", "new": [{"allocationKey": "k" * 1000}]}]


def drain(decoder):
    out = []
    while (msg := decoder.next_message()) is not None:
        out.append(msg)
    return out


def test_whole_bytewise_and_trailing():
    data = P.encode_many(MSGS)
    d = P.FrameDecoder()
    d.feed(data)
    assert drain(d) == MSGS
    d = P.FrameDecoder()
    got = []
    for i in range(len(data)):
        d.feed(data[i:i + 1])
        got += drain(d)
    assert got == MSGS
    d = P.FrameDecoder()
    d.feed(data + data[:7])
    assert drain(d) == MSGS and d.buffered == 7


def test_bad_body_is_consumed_and_oversize_is_sticky():
    d = P.FrameDecoder(max_frame=100)
    d.feed(struct.pack(">I", 2) + b"[]" + P.encode({"type": "Ack"}))
    with pytest.raises(P.ProtocolError, match="not a JSON object"):
        d.next_message()
    assert d.next_message() == {"type": "Ack"}
    d.feed(struct.pack(">I", 101))
    for _ in range(2):
        with pytest.raises(P.FrameTooLargeError):
            d.next_message()


@pytest.mark.parametrize("msg,text", [
    ({}, "no string 'type'"),
    ({"type": "Nope", "rmID": "r"}, "unknown message type 'Nope'"),
    ({"type": "NodeRequest"}, "NodeRequest.rmID is missing"),
    ({"type": "NodeRequest", "rmID": "r", "id": "7"}, "NodeRequest.id must be an integer"),
    ({"type": "NodeRequest", "rmID": "r", "nodes": [{"nodeID": "n", "action": "FLY"}]},
     "NodeRequest.nodes[0].action 'FLY' is not one of"),
    ({"type": "AllocationRequest", "rmID": "r", "asks": [{"allocationKey": "k"}]},
     "AllocationRequest.asks[0].applicationID is missing"),
    ({"type": "AllocationRequest", "rmID": "r", "asks": [
        {"allocationKey": "k", "applicationID": "a",
         "resourceAsk": {"resources": {"memory": {"value": -1}}}}]},
     "AllocationRequest.asks[0].resourceAsk.resources.memory.value must be a non-negative"),
    ({"type": "AllocationRequest", "rmID": "r", "releases": {"allocationsToRelease": [
        {"applicationID": "a", "terminationType": "BOOM"}]}},
     "AllocationRequest.releases.allocationsToRelease[0].terminationType 'BOOM' is unknown"),
    ({"type": "ApplicationRequest", "rmID": "r", "new": [
        {"applicationID": "a", "gangSchedulingStyle": "Medium"}]},
     "gangSchedulingStyle must be Soft or Hard"),
    ({"type": "ApplicationRequest", "rmID": "r", "new": [
        {"applicationID": "a", "ugi": {"user": "u", "groups": "g"}}]},
     "ApplicationRequest.new[0].ugi.groups must be a list of strings"),
    ({"type": "ApplicationRequest", "rmID": "r", "new": "x"}, "ApplicationRequest.new must be"),
])
def test_validate_names_the_field(msg, text):
    with pytest.raises(P.ProtocolError) as info:
        validate(msg)
    assert text in str(info.value)


def test_valid_messages_pass():
    assert validate({"type": "RegisterResourceManager", "rmID": "r", "version": "1"}) == \
        P.REGISTER_RM
    assert validate({"type": "NodeRequest", "rmID": "r", "nodes": [
        {"nodeID": "n", "action": a} for a in sorted(P.NODE_ACTIONS)]}) == P.NODE_REQUEST


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["type", "rmID", "nodes", "asks", "new", "remove", "releases",
                         "nodeID", "action", "applicationID", "allocationKey", "resourceAsk",
                         "resources", "value", "ugi", "groups", "id"]), inner, max_size=4),
    max_leaves=12)


@given(st.sampled_from(sorted(P.SHIM_MESSAGES)), json_values)
def test_fuzz_validate_only_raises_protocol_error(mtype, body):
    msg = dict(body) if isinstance(body, dict) else {}
    msg["type"] = mtype
    try:
        validate(msg)
    except P.ProtocolError:
        pass


@given(st.binary(max_size=64))
def test_fuzz_decoder_only_raises_protocol_error(data):
    d = P.FrameDecoder(max_frame=1 << 20)
    d.feed(data)
    for _ in range(10):
        try:
            if d.next_message() is None:
                break
        except P.FrameTooLargeError:
            break
        except P.ProtocolError:
            continue
