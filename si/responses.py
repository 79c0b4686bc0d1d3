"""What the engine sends the shim: responses, request events, Ack and Error, as frozen structs.

Built by the engine (`engine.partition.outbox`, `engine.scheduler`, `engine.si_server`) and sent
as `to_si()`; read back by the shim with `read_engine(msg)`, which is lenient (the engine is
trusted: a missing field reads as its default, an item that is not an object is skipped).
Releases use the request's types (`AllocationRelease`, `AskRelease`), as SI does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import msgspec

from si import resources
from si.protocol import (ACK, ALLOCATION_RESPONSE, APPLICATION_RESPONSE, ERROR,
                         EVENT_RECORDS, NODE_RESPONSE, REGISTER_RM_RESPONSE)
from si.requests import AllocationRelease, AskRelease, FrozenMessage, put_optional
from si.resources import Resource


class NewAllocation(FrozenMessage):
    """AllocationResponse.new[]: an ask allocated on a node (the shim binds the pod)."""

    allocation_key: str
    application_id: str
    partition_name: str
    node_id: str
    resource_per_alloc: Resource = msgspec.field(default_factory=dict)
    placeholder: bool = False
    task_group_name: str = ""

    def to_si(self) -> dict[str, Any]:
        return {"allocationKey": self.allocation_key, "applicationID": self.application_id,
                "partitionName": self.partition_name, "nodeID": self.node_id,
                "resourcePerAlloc": resources.to_si(self.resource_per_alloc),
                "placeholder": self.placeholder, "taskGroupName": self.task_group_name}


class RejectedAllocation(FrozenMessage):
    """AllocationResponse.rejected[]: an ask or existing allocation the engine refused."""

    allocation_key: str
    application_id: str
    reason: str

    def to_si(self) -> dict[str, Any]:
        return {"allocationKey": self.allocation_key, "applicationID": self.application_id,
                "reason": self.reason}


class AllocationResponse(FrozenMessage):
    """New allocations, engine-side releases of allocations and asks, rejections.
    `released` and `released_asks` use the request's release types, as SI does."""

    TYPE: ClassVar[str] = ALLOCATION_RESPONSE

    new: tuple[NewAllocation, ...] = ()
    released: tuple[AllocationRelease, ...] = ()
    released_asks: tuple[AskRelease, ...] = ()
    rejected: tuple[RejectedAllocation, ...] = ()

    def to_si(self) -> dict[str, Any]:
        return {"type": self.TYPE, "new": [a.to_si() for a in self.new],
                "released": [r.to_si() for r in self.released],
                "releasedAsks": [r.to_si() for r in self.released_asks],
                "rejected": [r.to_si() for r in self.rejected]}


class RejectedApplication(FrozenMessage):
    application_id: str
    reason: str

    def to_si(self) -> dict[str, Any]:
        return {"applicationID": self.application_id, "reason": self.reason}


class UpdatedApplication(FrozenMessage):
    """An application's new state (`engine.app_state.AppState` value) and why."""

    application_id: str
    state: str
    message: str = ""

    def to_si(self) -> dict[str, Any]:
        return {"applicationID": self.application_id, "state": self.state,
                "message": self.message}


class ApplicationResponse(FrozenMessage):
    """Accepted and rejected applications of a request, and state updates."""

    TYPE: ClassVar[str] = APPLICATION_RESPONSE

    accepted: tuple[str, ...] = ()  # applicationIDs
    rejected: tuple[RejectedApplication, ...] = ()
    updated: tuple[UpdatedApplication, ...] = ()

    def to_si(self) -> dict[str, Any]:
        return {"type": self.TYPE,
                "accepted": [{"applicationID": app_id} for app_id in self.accepted],
                "rejected": [r.to_si() for r in self.rejected],
                "updated": [u.to_si() for u in self.updated]}


class RejectedNode(FrozenMessage):
    node_id: str
    reason: str

    def to_si(self) -> dict[str, Any]:
        return {"nodeID": self.node_id, "reason": self.reason}


class NodeResponse(FrozenMessage):
    TYPE: ClassVar[str] = NODE_RESPONSE

    accepted: tuple[str, ...] = ()  # nodeIDs
    rejected: tuple[RejectedNode, ...] = ()

    def to_si(self) -> dict[str, Any]:
        return {"type": self.TYPE, "accepted": [{"nodeID": node_id} for node_id in self.accepted],
                "rejected": [r.to_si() for r in self.rejected]}


class EventRecord(FrozenMessage):
    """A request event for the shim to post as a Kubernetes Event (object = the pod's UID)."""

    type: int
    object_id: str
    reference_id: str
    message: str
    timestamp_nano: int
    event_change_type: int
    event_change_detail: int

    def to_si(self) -> dict[str, Any]:
        return {"type": self.type, "objectID": self.object_id,
                "referenceID": self.reference_id, "message": self.message,
                "timestampNano": self.timestamp_nano, "eventChangeType": self.event_change_type,
                "eventChangeDetail": self.event_change_detail}


class EventRecords(FrozenMessage):
    TYPE: ClassVar[str] = EVENT_RECORDS

    events: tuple[EventRecord, ...] = ()

    def to_si(self) -> dict[str, Any]:
        return {"type": self.TYPE, "events": [e.to_si() for e in self.events]}


class RegisterResourceManagerResponse(FrozenMessage):
    TYPE: ClassVar[str] = REGISTER_RM_RESPONSE

    instance_uuid: str = ""
    ring_name: str = ""
    reply_to: int | None = None

    def to_si(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.TYPE, "instanceUUID": self.instance_uuid,
                               "ringName": self.ring_name}
        put_optional(out, "replyTo", self.reply_to)
        return out


class Ack(FrozenMessage):
    TYPE: ClassVar[str] = ACK

    reply_to: int

    def to_si(self) -> dict[str, Any]:
        return {"type": self.TYPE, "replyTo": self.reply_to}


class Error(FrozenMessage):
    """A request the engine could not apply (`reply_to` set), or a frame it could not read."""

    TYPE: ClassVar[str] = ERROR

    message: str
    message_type: str = ""
    reply_to: int | None = None

    def to_si(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.TYPE, "message": self.message,
                               "messageType": self.message_type}
        put_optional(out, "replyTo", self.reply_to)
        return out


EngineMessage = (AllocationResponse | ApplicationResponse | NodeResponse | EventRecords
                 | RegisterResourceManagerResponse | Ack | Error)


def read_engine(msg: Mapping[str, Any]) -> EngineMessage | None:
    """The typed message of a decoded engine -> shim object; None for a type the shim does not
    know. The engine is trusted: a missing field reads as its default, a value as its string,
    an item that is not an object is skipped."""
    mtype = msg.get("type")
    if mtype == ALLOCATION_RESPONSE:
        return AllocationResponse(
            tuple(NewAllocation(_str(i, "allocationKey"), _str(i, "applicationID"),
                                _str(i, "partitionName"), _str(i, "nodeID"),
                                _resource(i, "resourcePerAlloc"), i.get("placeholder") is True,
                                _str(i, "taskGroupName"))
                  for i in _objects(msg, "new")),
            tuple(AllocationRelease(_str(i, "applicationID"), _str(i, "allocationKey"),
                                    _str(i, "partitionName"), _str(i, "terminationType"),
                                    _str(i, "message"))
                  for i in _objects(msg, "released")),
            tuple(AskRelease(_str(i, "applicationID"), _str(i, "allocationKey"),
                             _str(i, "partitionName"), _str(i, "message"))
                  for i in _objects(msg, "releasedAsks")),
            tuple(RejectedAllocation(_str(i, "allocationKey"), _str(i, "applicationID"),
                                     _str(i, "reason"))
                  for i in _objects(msg, "rejected")))
    if mtype == ACK:
        return Ack(_int(msg, "replyTo", -1))
    if mtype == ERROR:
        return Error(_str(msg, "message"), _str(msg, "messageType"),
                     _int(msg, "replyTo", -1) if "replyTo" in msg else None)
    if mtype == REGISTER_RM_RESPONSE:
        return RegisterResourceManagerResponse(
            _str(msg, "instanceUUID"), _str(msg, "ringName"),
            _int(msg, "replyTo", -1) if "replyTo" in msg else None)
    if mtype == APPLICATION_RESPONSE:
        return ApplicationResponse(
            tuple(_str(i, "applicationID") for i in _objects(msg, "accepted")),
            tuple(RejectedApplication(_str(i, "applicationID"), _str(i, "reason"))
                  for i in _objects(msg, "rejected")),
            tuple(UpdatedApplication(_str(i, "applicationID"), _str(i, "state"),
                                     _str(i, "message"))
                  for i in _objects(msg, "updated")))
    if mtype == NODE_RESPONSE:
        return NodeResponse(tuple(_str(i, "nodeID") for i in _objects(msg, "accepted")),
                            tuple(RejectedNode(_str(i, "nodeID"), _str(i, "reason"))
                                  for i in _objects(msg, "rejected")))
    if mtype == EVENT_RECORDS:
        return EventRecords(tuple(
            EventRecord(_int(i, "type", 0), _str(i, "objectID"), _str(i, "referenceID"),
                        _str(i, "message"), _int(i, "timestampNano", 0),
                        _int(i, "eventChangeType", 0), _int(i, "eventChangeDetail", 0))
            for i in _objects(msg, "events")))
    return None


def _objects(msg: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = msg.get(key)
    return [i for i in value if isinstance(i, dict)] if isinstance(value, list) else []


def _str(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    return "" if value is None else str(value)


def _resource(obj: Mapping[str, Any], key: str) -> Resource:
    try:
        return resources.from_si(obj.get(key))
    except ValueError:
        return {}


def _int(obj: Mapping[str, Any], key: str, default: int) -> int:
    value = obj.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else default
