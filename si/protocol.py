"""The scheduler interface (SI) between the shim and the engine: schema and framing.

Transport
---------
A UNIX stream socket (mode 0600; default path `RUNTIME/NAME.sock`, see `default_socket_path`;
each end checks the other's uid with SO_PEERCRED, `common.runtimedir`).
A frame is a 4-byte big-endian unsigned length followed by that many bytes of one orjson-encoded
JSON object. A frame longer than `MAX_FRAME` (64 MiB) is a protocol error: the receiver answers
`Error` and closes the connection (it cannot resynchronise without reading the whole body).

Every message is a JSON object with a `"type"` key naming one of the message types below. A shim
request may carry `"id"` (int); the engine then answers it, *after* any responses it caused, with
exactly one `{"type": "Ack", "replyTo": id}` or `{"type": "Error", "replyTo": id, "message": ...,
"messageType": ...}`. Engine messages without `replyTo` are asynchronous (allocations made by the
scheduling cycle, application state updates, request events).

Resources in SI: `{"resources": {"memory": {"value": 1073741824}, "vcore": {"value": 500}}}`
(memory in bytes, vcore in milli-CPU); `si.resources.from_si`/`to_si` convert.

Shim -> engine (`SHIM_MESSAGES`)
--------------------------------
- `RegisterResourceManager {rmID, policyGroup, version}` -> `RegisterResourceManagerResponse
  {replyTo, instanceUUID, ringName}` then `Ack`. Must come first on a connection; a re-register
  of a known rmID wipes that RM's applications, nodes and allocations (the RM replays them).
- `RegisterResourceManager` may also carry `config` (the queue configuration, YAML text) and
  `extraConfig` (an object of strings: YuniKorn's other ConfigMap keys); then the engine applies
  them as `UpdateConfiguration` does, and refuses the registration (Error) if they are invalid.
- `UpdateConfiguration {rmID, policyGroup, config, extraConfig}` -> `Ack`, or `Error` naming why
  the running configuration was kept (si.config: the keys; docs/CONTRACTS.md).
- `ApplicationRequest {rmID, new: [{applicationID, queueName, partitionName, ugi: {user, groups},
  tags, placeholderAsk, gangSchedulingStyle ("Soft"|"Hard"), executionTimeoutMilliSeconds}],
  remove: [{applicationID, partitionName}]}`
- `NodeRequest {rmID, nodes: [{nodeID, action, attributes, schedulableResource,
  occupiedResource}]}`, action in `NODE_ACTIONS`. Recovery creates nodes with CREATE_DRAIN (not
  schedulable), adds existing allocations, then DRAIN_TO_SCHEDULABLE.
- `AllocationRequest {rmID, asks: [{allocationKey, applicationID, partitionName, resourceAsk,
  priority, placeholder, taskGroupName, allocationTags, preemptionPolicy, originator}], allocations:
  [{allocationKey, applicationID, partitionName, nodeID, resourcePerAlloc, placeholder,
  taskGroupName, priority, preemptionPolicy, originator}],
  releases: {allocationsToRelease: [{partitionName, applicationID, allocationKey,
  terminationType, message}], allocationAsksToRelease: [{partitionName, applicationID,
  allocationKey, message}]}}`. `preemptionPolicy` = `{allowPreemptSelf, allowPreemptOther}`
  (booleans); not sent = YuniKorn's nil policy (self true, other false). `originator` (boolean,
  absent = false): the application's first pod (YuniKorn's shim), shown in the REST views. `allocations` are existing (already bound) allocations, accepted
  even above queue max (recovery). terminationType in `TERMINATION_TYPES`.

Engine -> shim (`ENGINE_MESSAGES`)
----------------------------------
- `ApplicationResponse {accepted: [{applicationID}], rejected: [{applicationID, reason}],
  updated: [{applicationID, state, message}]}`
- `NodeResponse {accepted: [{nodeID}], rejected: [{nodeID, reason}]}`
- `AllocationResponse {new: [{allocationKey, applicationID, partitionName, nodeID,
  resourcePerAlloc, placeholder, taskGroupName}], released: [{allocationKey, applicationID,
  partitionName, terminationType, message}], releasedAsks: [{allocationKey, applicationID,
  message}], rejected: [{allocationKey, applicationID, reason}]}`
- `EventRecords {events: [{type: 1, objectID, referenceID, message, timestampNano,
  eventChangeType, eventChangeDetail}]}`: request events (objectID = allocationKey = pod UID,
  referenceID = applicationID) for the shim to post as Kubernetes Events.
- `Ack {replyTo}`, `Error {replyTo?, message, messageType}`.

Using this module
-----------------
Sans-I/O core: `encode(msg) -> bytes` (one frame), `FrameDecoder` (feed bytes, get objects; fed
whole, byte by byte or with trailing data it yields the same messages). Trio helpers:
`send_message(stream, msg)`, `receive_message(stream, decoder)`. The messages of both directions
as typed values are `si.messages`: `parse(msg)` makes a shim message (raising
`ProtocolError` naming the field; the engine answers that with `Error`), `read_engine(msg)` an
engine message, and every message's `to_si()` is its wire form. `si.parse.validate(msg)` runs
`parse`'s checks and returns the type.

Errors::

    ProtocolError            a message is malformed (bad JSON, not an object, missing/ill-typed field)
     +-- FrameTooLargeError  a frame length above MAX_FRAME (the connection is then closed)
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import orjson

MAX_FRAME = 64 << 20
"""Largest frame body accepted, in bytes (64 MiB)."""

_HEADER = struct.Struct(">I")
HEADER_SIZE = _HEADER.size

# --- message type names -------------------------------------------------------------------------
REGISTER_RM = "RegisterResourceManager"
REGISTER_RM_RESPONSE = "RegisterResourceManagerResponse"
APPLICATION_REQUEST = "ApplicationRequest"
NODE_REQUEST = "NodeRequest"
ALLOCATION_REQUEST = "AllocationRequest"
APPLICATION_RESPONSE = "ApplicationResponse"
NODE_RESPONSE = "NodeResponse"
ALLOCATION_RESPONSE = "AllocationResponse"
EVENT_RECORDS = "EventRecords"
UPDATE_CONFIGURATION = "UpdateConfiguration"
ACK = "Ack"
ERROR = "Error"

SHIM_MESSAGES = frozenset({REGISTER_RM, APPLICATION_REQUEST, NODE_REQUEST, ALLOCATION_REQUEST,
                           UPDATE_CONFIGURATION})
ENGINE_MESSAGES = frozenset({REGISTER_RM_RESPONSE, APPLICATION_RESPONSE, NODE_RESPONSE,
                             ALLOCATION_RESPONSE, EVENT_RECORDS, ACK, ERROR})

# --- enumerations carried as strings ------------------------------------------------------------
NODE_CREATE = "CREATE"
NODE_UPDATE = "UPDATE"
NODE_DRAIN = "DRAIN_NODE"
NODE_DECOMISSION = "DECOMISSION"
NODE_DRAIN_TO_SCHEDULABLE = "DRAIN_TO_SCHEDULABLE"
NODE_CREATE_DRAIN = "CREATE_DRAIN"
NODE_ACTIONS = frozenset({NODE_CREATE, NODE_UPDATE, NODE_DRAIN, NODE_DECOMISSION,
                          NODE_DRAIN_TO_SCHEDULABLE, NODE_CREATE_DRAIN})

TERMINATION_UNKNOWN = "UNKNOWN_TERMINATION_TYPE"
TERMINATION_STOPPED_BY_RM = "STOPPED_BY_RM"
TERMINATION_TIMEOUT = "TIMEOUT"
TERMINATION_PREEMPTED = "PREEMPTED_BY_SCHEDULER"
TERMINATION_PLACEHOLDER_REPLACED = "PLACEHOLDER_REPLACED"
TERMINATION_TYPES = frozenset({TERMINATION_UNKNOWN, TERMINATION_STOPPED_BY_RM, TERMINATION_TIMEOUT,
                               TERMINATION_PREEMPTED, TERMINATION_PLACEHOLDER_REPLACED})

GANG_SOFT = "Soft"
GANG_HARD = "Hard"


def default_socket_path(name: str = "ykshm") -> str:
    """The engine's SI socket path for an instance name: `RUNTIME/NAME.sock` in the private
    runtime directory (`common.runtimedir`; /run/ykshm under systemd), never a name in /tmp."""
    from common.runtimedir import runtime_dir

    return str(runtime_dir() / f"{name}.sock")


class ProtocolError(ValueError):
    """A received message is malformed or breaks the schema; `str()` names the field.

    Raised by `FrameDecoder` (bad JSON, not an object) and `si.parse.parse` (missing or ill-typed
    field). The engine turns it into an `Error` answer and keeps the connection.
    """

    def __init__(self, message: str, message_type: str = "") -> None:
        super().__init__(message)
        self.message_type = message_type


class FrameTooLargeError(ProtocolError):
    """A frame header announced more than MAX_FRAME bytes; the connection cannot continue."""


# --- framing ------------------------------------------------------------------------------------

def encode(msg: Mapping[str, Any]) -> bytes:
    """One frame: 4-byte big-endian length + the orjson body."""
    body = orjson.dumps(msg)
    if len(body) > MAX_FRAME:
        raise FrameTooLargeError(f"frame of {len(body)} bytes exceeds {MAX_FRAME}")
    return _HEADER.pack(len(body)) + body


def encode_many(msgs: list[Mapping[str, Any]]) -> bytes:
    """Several frames concatenated (one write for a burst of messages)."""
    return b"".join(encode(m) for m in msgs)


class FrameDecoder:
    """Incremental frame parser. `feed(data)` then iterate `next_message()` until it returns None.

    A body that is not a JSON object raises ProtocolError *after* consuming that frame, so the
    caller can answer Error and keep reading. An oversize header raises FrameTooLargeError and the
    decoder stays broken (sticky): every later call raises it again.
    """

    __slots__ = ("_buf", "_broken", "max_frame")

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self._broken: FrameTooLargeError | None = None
        self.max_frame = max_frame

    def feed(self, data: bytes) -> None:
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def next_message(self) -> dict[str, Any] | None:
        if self._broken is not None:
            raise self._broken
        if len(self._buf) < HEADER_SIZE:
            return None
        (length,) = _HEADER.unpack_from(self._buf, 0)
        if length > self.max_frame:
            self._broken = FrameTooLargeError(
                f"frame length {length} exceeds the maximum of {self.max_frame} bytes")
            raise self._broken
        end = HEADER_SIZE + length
        if len(self._buf) < end:
            return None
        body = bytes(self._buf[HEADER_SIZE:end])
        del self._buf[:end]
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise ProtocolError(f"frame is not valid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise ProtocolError("frame is not a JSON object")
        return obj


async def send_message(stream: Any, msg: Mapping[str, Any]) -> None:
    """Write one message to a trio stream."""
    await stream.send_all(encode(msg))


async def receive_message(stream: Any, decoder: FrameDecoder,
                          chunk: int = 1 << 16) -> dict[str, Any] | None:
    """Read the next message from a trio stream; None at EOF. Raises ProtocolError."""
    while True:
        msg = decoder.next_message()
        if msg is not None:
            return msg
        data = await stream.receive_some(chunk)
        if not data:
            return None
        decoder.feed(data)
