"""A received dict becomes a typed shim request (`si.requests`), every field checked.

`parse(msg)` is the engine's entrance: a malformed message raises `ProtocolError` naming the
field, in the wording of the schema (`si.protocol`), before anything is applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from si.protocol import (APPLICATION_REQUEST, GANG_HARD, GANG_SOFT, NODE_ACTIONS,
                         NODE_REQUEST, REGISTER_RM, SHIM_MESSAGES,
                         TERMINATION_TYPES, UPDATE_CONFIGURATION, ProtocolError)
from si.requests import (AddApplication, AllocationAsk, AllocationRelease,
                         AllocationRequest, ApplicationRequest, AskRelease,
                         ExistingAllocation, NodeChange, NodeRequest, PreemptionPolicy,
                         RegisterResourceManager, RemoveApplication, ShimMessage,
                         UpdateConfiguration, UserGroupInfo)
from si.resources import Resource
from si.tags import PARTITION_ATTRIBUTE


class _Fields:
    """Typed reads from one JSON object; errors name `where`.`key` (the schema's wording)."""

    __slots__ = ("obj", "where", "mtype")

    def __init__(self, obj: Mapping[str, Any], where: str, mtype: str) -> None:
        self.obj = obj
        self.where = where
        self.mtype = mtype

    def need(self, key: str, kind: type | tuple[type, ...], *, required: bool = True,
             nonempty: bool = False) -> Any:
        value = self.obj.get(key)
        if value is None:
            if required:
                raise ProtocolError(f"{self.where}.{key} is missing", self.mtype)
            return None
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            name = kind.__name__ if isinstance(kind, type) else "/".join(
                k.__name__ for k in kind)
            raise ProtocolError(f"{self.where}.{key} must be {name}, "
                                f"got {type(value).__name__}", self.mtype)
        if nonempty and not value:
            raise ProtocolError(f"{self.where}.{key} must not be empty", self.mtype)
        return value

    def text(self, key: str) -> str:
        """An optional string; "" when not sent."""
        return self.need(key, str, required=False) or ""

    def items(self, key: str) -> list[Mapping[str, Any]]:
        """An optional list of objects; [] when not sent."""
        value = self.obj.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise ProtocolError(f"{self.where}.{key} must be a list", self.mtype)
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                raise ProtocolError(f"{self.where}.{key}[{i}] must be an object", self.mtype)
        return value

    def resource(self, key: str) -> Resource | None:
        """An optional SI resource, parsed; None when not sent."""
        value = self.obj.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise ProtocolError(f"{self.where}.{key} must be an object", self.mtype)
        entries = value.get("resources") or {}
        if not isinstance(entries, dict):
            raise ProtocolError(f"{self.where}.{key}.resources must be an object", self.mtype)
        out: Resource = {}
        for name, quantity in entries.items():
            v = quantity.get("value", 0) if isinstance(quantity, dict) else None
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ProtocolError(f"{self.where}.{key}.resources.{name}.value must be a "
                                    f"non-negative integer", self.mtype)
            out[name] = v
        return out

    def at(self, obj: Mapping[str, Any], where: str) -> _Fields:
        return _Fields(obj, where, self.mtype)


def parse(msg: Mapping[str, Any]) -> ShimMessage:
    """The typed message of a decoded shim -> engine object; ProtocolError names the field."""
    mtype = msg.get("type")
    if not isinstance(mtype, str):
        raise ProtocolError("message has no string 'type'")
    if mtype not in SHIM_MESSAGES:
        raise ProtocolError(f"unknown message type {mtype!r}", mtype)
    msg_id = msg.get("id")
    if "id" in msg and (not isinstance(msg_id, int) or isinstance(msg_id, bool)):
        raise ProtocolError(f"{mtype}.id must be an integer", mtype)
    fields = _Fields(msg, mtype, mtype)
    rm_id = fields.need("rmID", str, nonempty=True)
    if mtype == REGISTER_RM:
        return RegisterResourceManager(rm_id, fields.text("policyGroup"), fields.text("version"),
                                       msg_id, fields.need("config", str, required=False),
                                       _extra_config(fields, required=False))
    if mtype == UPDATE_CONFIGURATION:
        return UpdateConfiguration(rm_id, fields.text("policyGroup"), fields.text("config"),
                                   _extra_config(fields, required=False) or {}, msg_id)
    if mtype == APPLICATION_REQUEST:
        return ApplicationRequest(
            rm_id, tuple(_add_application(fields.at(app, f"{mtype}.new[{i}]"))
                         for i, app in enumerate(fields.items("new"))),
            tuple(_remove_application(fields.at(app, f"{mtype}.remove[{i}]"))
                  for i, app in enumerate(fields.items("remove"))), msg_id)
    if mtype == NODE_REQUEST:
        return NodeRequest(rm_id, tuple(_node(fields.at(node, f"{mtype}.nodes[{i}]"))
                                        for i, node in enumerate(fields.items("nodes"))), msg_id)
    return _allocation_request(fields, rm_id, msg_id)


def _extra_config(f: _Fields, required: bool) -> dict[str, str] | None:
    """`extraConfig`: an object of strings (YuniKorn's map<string,string>)."""
    raw = f.need("extraConfig", dict, required=required)
    if raw is None:
        return None
    for key, value in raw.items():
        if not isinstance(value, str):
            raise ProtocolError(f"{f.where}.extraConfig.{key} must be str, "
                                f"got {type(value).__name__}", f.mtype)
    return dict(raw)


def _add_application(f: _Fields) -> AddApplication:
    app_id = f.need("applicationID", str, nonempty=True)
    queue = f.text("queueName")
    partition = f.text("partitionName")
    ugi_raw = f.need("ugi", dict, required=False)
    ugi = None
    if ugi_raw is not None:
        user = f.at(ugi_raw, f"{f.where}.ugi").text("user")
        groups = ugi_raw.get("groups")
        if groups is not None and (not isinstance(groups, list)
                                   or not all(isinstance(g, str) for g in groups)):
            raise ProtocolError(f"{f.where}.ugi.groups must be a list of strings", f.mtype)
        ugi = UserGroupInfo(user, tuple(groups or ()))
    tags = f.need("tags", dict, required=False)
    placeholder_ask = f.resource("placeholderAsk")
    style = f.need("gangSchedulingStyle", str, required=False)
    if style not in (None, "", GANG_SOFT, GANG_HARD):
        raise ProtocolError(f"{f.where}.gangSchedulingStyle must be Soft or Hard, got {style!r}",
                            f.mtype)
    timeout = f.need("executionTimeoutMilliSeconds", int, required=False)
    if timeout is not None and timeout < 0:
        raise ProtocolError(f"{f.where}.executionTimeoutMilliSeconds must be >= 0", f.mtype)
    return AddApplication(app_id, queue, partition, ugi, tags, placeholder_ask, style or "",
                          timeout or 0)


def _remove_application(f: _Fields) -> RemoveApplication:
    return RemoveApplication(f.need("applicationID", str, nonempty=True),
                             f.text("partitionName"))


def _node(f: _Fields) -> NodeChange:
    node_id = f.need("nodeID", str, nonempty=True)
    action = f.need("action", str)
    if action not in NODE_ACTIONS:
        raise ProtocolError(f"{f.where}.action {action!r} is not one of "
                            f"{', '.join(sorted(NODE_ACTIONS))}", f.mtype)
    raw_attributes = f.need("attributes", dict, required=False)
    attributes = None
    if raw_attributes is not None:
        f.at(raw_attributes, f"{f.where}.attributes").need(PARTITION_ATTRIBUTE, str,
                                                           required=False)
        attributes = {str(k): str(v) for k, v in raw_attributes.items()}
    schedulable = f.resource("schedulableResource")
    if not f.obj.get("schedulableResource"):
        schedulable = None  # not sent, null or {}: an UPDATE keeps the capacity
    occupied = f.resource("occupiedResource")
    if occupied is None and "occupiedResource" in f.obj:
        occupied = {}  # sent as null: no occupation
    return NodeChange(node_id, action, attributes, schedulable, occupied)


def _allocation_request(fields: _Fields, rm_id: str, msg_id: int | None) -> AllocationRequest:
    mtype = fields.mtype
    asks = tuple(_ask(fields.at(ask, f"{mtype}.asks[{i}]"))
                 for i, ask in enumerate(fields.items("asks")))
    allocations = tuple(_existing(fields.at(alloc, f"{mtype}.allocations[{i}]"))
                        for i, alloc in enumerate(fields.items("allocations")))
    releases = fields.obj.get("releases")
    to_release: tuple[AllocationRelease, ...] = ()
    asks_to_release: tuple[AskRelease, ...] = ()
    if releases is not None:
        if not isinstance(releases, dict):
            raise ProtocolError(f"{mtype}.releases must be an object", mtype)
        rel = fields.at(releases, f"{mtype}.releases")
        to_release = tuple(_release(rel.at(r, f"{rel.where}.allocationsToRelease[{i}]"))
                           for i, r in enumerate(rel.items("allocationsToRelease")))
        asks_to_release = tuple(
            _ask_release(rel.at(r, f"{rel.where}.allocationAsksToRelease[{i}]"))
            for i, r in enumerate(rel.items("allocationAsksToRelease")))
    return AllocationRequest(rm_id, asks, allocations, to_release, asks_to_release, msg_id)


def _ask(f: _Fields) -> AllocationAsk:
    key = f.need("allocationKey", str, nonempty=True)
    app_id = f.need("applicationID", str, nonempty=True)
    res = f.resource("resourceAsk") or {}
    priority = f.need("priority", int, required=False) or 0
    placeholder = f.need("placeholder", bool, required=False) or False
    task_group = f.text("taskGroupName")
    partition = f.text("partitionName")
    tags = f.need("allocationTags", dict, required=False) or {}
    return AllocationAsk(key, app_id, partition, res, priority, placeholder, task_group, tags,
                         _preemption_policy(f), f.need("originator", bool, required=False) or False)


def _preemption_policy(f: _Fields) -> PreemptionPolicy | None:
    """`preemptionPolicy: {allowPreemptSelf, allowPreemptOther}` (booleans, absent = false, as
    in protobuf); None when not sent at all."""
    raw = f.need("preemptionPolicy", dict, required=False)
    if raw is None:
        return None
    pf = f.at(raw, f"{f.where}.preemptionPolicy")
    return PreemptionPolicy(pf.need("allowPreemptSelf", bool, required=False) or False,
                            pf.need("allowPreemptOther", bool, required=False) or False)


def _existing(f: _Fields) -> ExistingAllocation:
    key = f.need("allocationKey", str, nonempty=True)
    app_id = f.need("applicationID", str, nonempty=True)
    node_id = f.need("nodeID", str, nonempty=True)
    res = f.resource("resourcePerAlloc") or {}
    placeholder = f.need("placeholder", bool, required=False) or False
    task_group = f.text("taskGroupName")
    priority = f.need("priority", int, required=False) or 0
    partition = f.text("partitionName")
    tags = f.need("allocationTags", dict, required=False) or {}
    return ExistingAllocation(key, app_id, node_id, partition, res, placeholder, task_group,
                              priority, tags, _preemption_policy(f),
                              f.need("originator", bool, required=False) or False)


def _release(f: _Fields) -> AllocationRelease:
    app_id = f.need("applicationID", str, nonempty=True)
    key = f.text("allocationKey")
    partition = f.text("partitionName")
    message = f.text("message")
    term = f.need("terminationType", str, required=False)
    if term is not None and term not in TERMINATION_TYPES:
        raise ProtocolError(f"{f.where}.terminationType {term!r} is unknown", f.mtype)
    return AllocationRelease(app_id, key, partition, term or "", message)


def _ask_release(f: _Fields) -> AskRelease:
    app_id = f.need("applicationID", str, nonempty=True)
    return AskRelease(app_id, f.text("allocationKey"), f.text("partitionName"), f.text("message"))


def validate(msg: Mapping[str, Any]) -> str:
    """Check a shim -> engine message; return its type. Raises ProtocolError naming the field
    (the checks of `parse`, the typed message dropped)."""
    return parse(msg).TYPE
