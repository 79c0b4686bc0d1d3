"""Typed SI messages: what the shim sends (`to_si`) the engine parses back to the same value,
and the parser keeps the schema's distinctions (absent vs empty) and error wording."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from si import messages
from si.protocol import NODE_ACTIONS, TERMINATION_TYPES, ProtocolError

names = st.text("abc-1", min_size=1, max_size=4)
text = st.text("xyz", max_size=3)
res = st.dictionaries(st.sampled_from(["memory", "vcore", "pods"]), st.integers(0, 1 << 40),
                      max_size=3)
attrs = st.dictionaries(names, text, max_size=3)

apps = st.builds(messages.AddApplication, names, text, st.sampled_from(["", "default"]),
                 st.none() | st.builds(messages.UserGroupInfo, text, st.tuples(names)),
                 st.none() | st.dictionaries(names, text, max_size=2), st.none() | res,
                 st.sampled_from(["", "Soft", "Hard"]), st.integers(0, 10_000))
nodes = st.builds(messages.NodeChange, names, st.sampled_from(sorted(NODE_ACTIONS)),
                  st.none() | attrs, st.none() | res.filter(bool), st.none() | res)
asks = st.builds(messages.AllocationAsk, names, names, text, res, st.integers(-5, 5),
                 st.booleans(), text, st.dictionaries(names, text, max_size=2))
existing = st.builds(messages.ExistingAllocation, names, names, names, text, res, st.booleans(),
                     text, st.integers(-5, 5))
releases = st.builds(messages.AllocationRelease, names, text, text,
                     st.sampled_from(["", *sorted(TERMINATION_TYPES)]), text)
ask_releases = st.builds(messages.AskRelease, names, text, text, text)
ids = st.none() | st.integers(0, 1000)
shim_messages = st.one_of(
    st.builds(messages.RegisterResourceManager, names, text, text, ids),
    st.builds(messages.ApplicationRequest, names, st.lists(apps, max_size=2).map(tuple),
              st.lists(st.builds(messages.RemoveApplication, names, text),
                       max_size=2).map(tuple), ids),
    st.builds(messages.NodeRequest, names, st.lists(nodes, max_size=3).map(tuple), ids),
    st.builds(messages.AllocationRequest, names, st.lists(asks, max_size=2).map(tuple),
              st.lists(existing, max_size=2).map(tuple),
              st.lists(releases, max_size=2).map(tuple),
              st.lists(ask_releases, max_size=2).map(tuple), ids))


engine_messages = st.one_of(
    st.builds(messages.AllocationResponse,
              st.lists(st.builds(messages.NewAllocation, names, names, text, names, res,
                                 st.booleans(), text), max_size=2).map(tuple),
              st.lists(releases, max_size=2).map(tuple),
              st.lists(ask_releases, max_size=2).map(tuple),
              st.lists(st.builds(messages.RejectedAllocation, names, names, text),
                       max_size=2).map(tuple)),
    st.builds(messages.ApplicationResponse, st.lists(names, max_size=2).map(tuple),
              st.lists(st.builds(messages.RejectedApplication, names, text),
                       max_size=2).map(tuple),
              st.lists(st.builds(messages.UpdatedApplication, names, text, text),
                       max_size=2).map(tuple)),
    st.builds(messages.NodeResponse, st.lists(names, max_size=2).map(tuple),
              st.lists(st.builds(messages.RejectedNode, names, text), max_size=2).map(tuple)),
    st.builds(messages.EventRecords, st.lists(st.builds(
        messages.EventRecord, st.integers(0, 5), names, names, text, st.integers(0, 1 << 62),
        st.integers(0, 4), st.integers(0, 400)), max_size=2).map(tuple)),
    st.builds(messages.RegisterResourceManagerResponse, text, text, ids),
    st.builds(messages.Ack, st.integers(0, 1000)),
    st.builds(messages.Error, text, text, ids))


@given(shim_messages)
def test_what_the_shim_sends_parses_back_to_the_same_message(message):
    assert messages.parse(message.to_si()) == message


@given(engine_messages)
def test_what_the_engine_sends_reads_back_to_the_same_message(message):
    assert messages.read_engine(message.to_si()) == message


def test_update_without_capacity_or_attributes_keeps_them_absent():
    node = messages.parse({"type": "NodeRequest", "rmID": "r", "nodes": [
        {"nodeID": "n", "action": "UPDATE", "schedulableResource": {},
         "occupiedResource": None}]}).nodes[0]
    assert node.schedulable_resource is None and node.attributes is None
    assert node.occupied_resource == {}  # sent as null: the occupation is cleared


def test_attribute_values_become_strings_and_name_the_partition():
    node = messages.parse({"type": "NodeRequest", "rmID": "r", "nodes": [
        {"nodeID": "n", "action": "CREATE",
         "attributes": {"ready": False, "si/node-partition": "[r]gpu"}}]}).nodes[0]
    assert node.attributes == {"ready": "False", "si/node-partition": "[r]gpu"}
    assert node.partition_name == "[r]gpu"


@pytest.mark.parametrize("msg, error", [
    ({"type": "AllocationRequest", "rmID": "r", "asks": [
        {"allocationKey": "k", "applicationID": "a", "priority": True}]},
     "AllocationRequest.asks[0].priority must be int, got bool"),
    ({"type": "AllocationRequest", "rmID": "r", "allocations": [
        {"allocationKey": "k", "applicationID": "a"}]},
     "AllocationRequest.allocations[0].nodeID is missing"),
    ({"type": "ApplicationRequest", "rmID": "r", "new": [
        {"applicationID": "a", "executionTimeoutMilliSeconds": -1}]},
     "ApplicationRequest.new[0].executionTimeoutMilliSeconds must be >= 0"),
])
def test_errors_name_the_field(msg, error):
    with pytest.raises(ProtocolError) as info:
        messages.parse(msg)
    assert str(info.value) == error
    assert info.value.message_type == msg["type"]


@given(st.none() | text, st.none() | attrs)
def test_register_with_a_configuration_round_trips(config, extra):
    msg = messages.RegisterResourceManager("rm", "queues", "v", 1, config, extra)
    assert messages.parse(msg.to_si()) == msg
    assert ("config" in msg.to_si()) is (config is not None)  # absent: the engine's own file


@given(text, attrs)
def test_update_configuration_round_trips(config, extra):
    msg = messages.UpdateConfiguration("rm", "queues", config, extra, 7)
    assert messages.parse(msg.to_si()) == msg


@pytest.mark.parametrize("extra, error", [
    ({"event.maxStreams": 5}, "UpdateConfiguration.extraConfig.event.maxStreams must be str"),
    ([], "UpdateConfiguration.extraConfig must be dict"),
])
def test_update_configuration_extra_must_be_strings(extra, error):
    wire = {"type": "UpdateConfiguration", "rmID": "rm", "config": "", "extraConfig": extra}
    with pytest.raises(ProtocolError, match=error):
        messages.parse(wire)
