"""What the shim sends the engine: the four SI requests and their parts, as frozen structs.

Built by the shim (and the engine's test builders) and sent as `to_si()`; made from a received
dict by `si.parse.parse`, which checks every field. The values are frozen
`msgspec.Struct`s (see `FrozenMessage` for why not frozen dataclasses). An optional field that
was not sent is None where "absent" and "empty" mean different things (a node UPDATE without
`attributes` keeps the node's; with `{}` it clears them), else its SI default ("" / 0 / False);
`to_si()` leaves out exactly the fields that are None.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import msgspec

from si import resources
from si.protocol import (ALLOCATION_REQUEST, APPLICATION_REQUEST, NODE_REQUEST, REGISTER_RM,
                         UPDATE_CONFIGURATION)
from si.resources import Resource
from si.tags import PARTITION_ATTRIBUTE


class FrozenMessage(msgspec.Struct, frozen=True):
    """A frozen value. msgspec's Struct, not a frozen dataclass: made for every ask and node
    the engine receives, and ten times cheaper to construct (~0.4 vs ~3.6 us for an ask)."""


def put_optional(out: dict[str, Any], key: str, value: Any) -> None:
    """Set `key` unless `value` is None (a field that was not sent stays out of the wire)."""
    if value is not None:
        out[key] = value


def _resource_si(res: Resource | None) -> dict[str, Any] | None:
    return None if res is None else resources.to_si(res)


# --- parts -------------------------------------------------------------------------------------

class UserGroupInfo(FrozenMessage):
    """The submitting user and their groups (SI UserGroupInformation)."""

    user: str = ""
    groups: tuple[str, ...] = ()

    def to_si(self) -> dict[str, Any]:
        return {"user": self.user, "groups": list(self.groups)}


class AddApplication(FrozenMessage):
    """ApplicationRequest.new[]: an application to add."""

    application_id: str
    queue_name: str = ""
    partition_name: str = ""
    ugi: UserGroupInfo | None = None
    tags: Mapping[str, Any] | None = None
    placeholder_ask: Resource | None = None
    gang_scheduling_style: str = ""
    execution_timeout_ms: int = 0

    def to_si(self) -> dict[str, Any]:
        out: dict[str, Any] = {"applicationID": self.application_id,
                               "queueName": self.queue_name,
                               "partitionName": self.partition_name}
        put_optional(out, "ugi", self.ugi.to_si() if self.ugi is not None else None)
        put_optional(out, "tags", dict(self.tags) if self.tags is not None else None)
        put_optional(out, "placeholderAsk", _resource_si(self.placeholder_ask))
        if self.gang_scheduling_style:
            out["gangSchedulingStyle"] = self.gang_scheduling_style
        if self.execution_timeout_ms:
            out["executionTimeoutMilliSeconds"] = self.execution_timeout_ms
        return out


class RemoveApplication(FrozenMessage):
    """ApplicationRequest.remove[]: an application the RM removed."""

    application_id: str
    partition_name: str = ""

    def to_si(self) -> dict[str, Any]:
        return {"applicationID": self.application_id, "partitionName": self.partition_name}


class NodeChange(FrozenMessage):
    """NodeRequest.nodes[] (SI NodeInfo): a node and what to do with it (`action`).

    `attributes` are strings (labels, `ready`, `ykshm.io/taints`, `si/node-partition`);
    None = not sent. `schedulable_resource` None = not sent (an UPDATE keeps the capacity);
    `occupied_resource` None = not sent (an UPDATE keeps the occupation)."""

    node_id: str
    action: str
    attributes: Mapping[str, str] | None = None
    schedulable_resource: Resource | None = None
    occupied_resource: Resource | None = None

    @property
    def partition_name(self) -> str:
        return (self.attributes or {}).get(PARTITION_ATTRIBUTE, "")

    def to_si(self) -> dict[str, Any]:
        out: dict[str, Any] = {"nodeID": self.node_id, "action": self.action}
        put_optional(out, "attributes",
                     dict(self.attributes) if self.attributes is not None else None)
        put_optional(out, "schedulableResource", _resource_si(self.schedulable_resource))
        put_optional(out, "occupiedResource", _resource_si(self.occupied_resource))
        return out


class PreemptionPolicy(FrozenMessage):
    """SI PreemptionPolicy of an ask or allocation: may it be preempted (`allow_preempt_self`,
    the pod annotation yunikorn.apache.org/allow-preemption), may it preempt others
    (`allow_preempt_other`, the pod's preemptionPolicy is not Never). Not sent at all means
    YuniKorn's defaults: self true, other false (`si.requests.DEFAULT_PREEMPTION`)."""

    allow_preempt_self: bool = False
    allow_preempt_other: bool = False

    def to_si(self) -> dict[str, Any]:
        return {"allowPreemptSelf": self.allow_preempt_self,
                "allowPreemptOther": self.allow_preempt_other}


DEFAULT_PREEMPTION = PreemptionPolicy(allow_preempt_self=True, allow_preempt_other=False)
"""What an ask or allocation sent without `preemptionPolicy` gets (YuniKorn's nil policy)."""


class AllocationAsk(FrozenMessage):
    """AllocationRequest.asks[]: a pending request for one allocation (a pod)."""

    allocation_key: str
    application_id: str
    partition_name: str = ""
    resource_ask: Resource = msgspec.field(default_factory=dict)
    priority: int = 0
    placeholder: bool = False
    task_group_name: str = ""
    allocation_tags: Mapping[str, Any] = msgspec.field(default_factory=dict)
    preemption_policy: PreemptionPolicy | None = None
    originator: bool = False
    """The application's first pod, which owns it (YuniKorn's shim: the driver of a Spark job)."""

    def to_si(self) -> dict[str, Any]:
        out = {"allocationKey": self.allocation_key, "applicationID": self.application_id,
               "partitionName": self.partition_name,
               "resourceAsk": resources.to_si(self.resource_ask), "priority": self.priority,
               "placeholder": self.placeholder, "taskGroupName": self.task_group_name,
               "allocationTags": dict(self.allocation_tags)}
        if self.preemption_policy is not None:
            out["preemptionPolicy"] = self.preemption_policy.to_si()
        if self.originator:
            out["originator"] = True
        return out


class ExistingAllocation(FrozenMessage):
    """AllocationRequest.allocations[]: an allocation already bound (recovery)."""

    allocation_key: str
    application_id: str
    node_id: str
    partition_name: str = ""
    resource_per_alloc: Resource = msgspec.field(default_factory=dict)
    placeholder: bool = False
    task_group_name: str = ""
    priority: int = 0
    allocation_tags: Mapping[str, Any] = msgspec.field(default_factory=dict)
    preemption_policy: PreemptionPolicy | None = None
    originator: bool = False
    """As AllocationAsk.originator."""

    def to_si(self) -> dict[str, Any]:
        out = {"allocationKey": self.allocation_key, "applicationID": self.application_id,
               "partitionName": self.partition_name, "nodeID": self.node_id,
               "resourcePerAlloc": resources.to_si(self.resource_per_alloc),
               "placeholder": self.placeholder, "taskGroupName": self.task_group_name,
               "priority": self.priority, "allocationTags": dict(self.allocation_tags)}
        if self.preemption_policy is not None:
            out["preemptionPolicy"] = self.preemption_policy.to_si()
        if self.originator:
            out["originator"] = True
        return out


class AllocationRelease(FrozenMessage):
    """releases.allocationsToRelease[]: allocations the RM ended (all of the app's if no key)."""

    application_id: str
    allocation_key: str = ""
    partition_name: str = ""
    termination_type: str = ""
    message: str = ""

    def to_si(self) -> dict[str, Any]:
        out = {"partitionName": self.partition_name, "applicationID": self.application_id,
               "allocationKey": self.allocation_key}
        if self.termination_type:
            out["terminationType"] = self.termination_type
        out["message"] = self.message
        return out


class AskRelease(FrozenMessage):
    """releases.allocationAsksToRelease[]: asks the RM withdrew (all of the app's if no key);
    AllocationResponse.releasedAsks[]: asks the engine gave up (no partitionName)."""

    application_id: str
    allocation_key: str = ""
    partition_name: str = ""
    message: str = ""

    def to_si(self) -> dict[str, Any]:
        out = {"partitionName": self.partition_name} if self.partition_name else {}
        out.update({"applicationID": self.application_id, "allocationKey": self.allocation_key,
                    "message": self.message})
        return out


# --- messages ----------------------------------------------------------------------------------

class RegisterResourceManager(FrozenMessage):
    """The RM's registration. `config` (the queue configuration, YAML text) and `extra_config`
    (every other ConfigMap key) as YuniKorn's RegisterResourceManagerRequest: None = not sent,
    the engine keeps the configuration of its own file; sent (even "") = the RM's configuration
    replaces it ("" is YuniKorn's default configuration)."""

    TYPE: ClassVar[str] = REGISTER_RM

    rm_id: str
    policy_group: str = ""
    version: str = ""
    id: int | None = None
    config: str | None = None
    extra_config: Mapping[str, str] | None = None

    def to_si(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.TYPE}
        put_optional(out, "id", self.id)
        out.update({"rmID": self.rm_id, "policyGroup": self.policy_group,
                    "version": self.version})
        put_optional(out, "config", self.config)
        put_optional(out, "extraConfig",
                     dict(self.extra_config) if self.extra_config is not None else None)
        return out


class UpdateConfiguration(FrozenMessage):
    """A changed configuration (YuniKorn's UpdateConfigurationRequest): the engine applies it as
    a reload and answers Ack, or Error naming why it kept the running configuration."""

    TYPE: ClassVar[str] = UPDATE_CONFIGURATION

    rm_id: str
    policy_group: str = ""
    config: str = ""
    extra_config: Mapping[str, str] = msgspec.field(default_factory=dict)
    id: int | None = None

    def to_si(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.TYPE}
        put_optional(out, "id", self.id)
        out.update({"rmID": self.rm_id, "policyGroup": self.policy_group,
                    "config": self.config, "extraConfig": dict(self.extra_config)})
        return out


class ApplicationRequest(FrozenMessage):
    TYPE: ClassVar[str] = APPLICATION_REQUEST

    rm_id: str
    new: tuple[AddApplication, ...] = ()
    remove: tuple[RemoveApplication, ...] = ()
    id: int | None = None

    def to_si(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.TYPE, "rmID": self.rm_id}
        put_optional(out, "id", self.id)
        if self.new:
            out["new"] = [a.to_si() for a in self.new]
        if self.remove:
            out["remove"] = [a.to_si() for a in self.remove]
        return out


class NodeRequest(FrozenMessage):
    TYPE: ClassVar[str] = NODE_REQUEST

    rm_id: str
    nodes: tuple[NodeChange, ...] = ()
    id: int | None = None

    def to_si(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.TYPE, "rmID": self.rm_id}
        put_optional(out, "id", self.id)
        out["nodes"] = [n.to_si() for n in self.nodes]
        return out


class AllocationRequest(FrozenMessage):
    TYPE: ClassVar[str] = ALLOCATION_REQUEST

    rm_id: str
    asks: tuple[AllocationAsk, ...] = ()
    allocations: tuple[ExistingAllocation, ...] = ()
    allocations_to_release: tuple[AllocationRelease, ...] = ()
    asks_to_release: tuple[AskRelease, ...] = ()
    id: int | None = None

    def to_si(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.TYPE, "rmID": self.rm_id}
        put_optional(out, "id", self.id)
        if self.asks:
            out["asks"] = [a.to_si() for a in self.asks]
        if self.allocations:
            out["allocations"] = [a.to_si() for a in self.allocations]
        if self.allocations_to_release or self.asks_to_release:
            out["releases"] = {
                "allocationsToRelease": [r.to_si() for r in self.allocations_to_release],
                "allocationAsksToRelease": [r.to_si() for r in self.asks_to_release]}
        return out


ShimMessage = (RegisterResourceManager | ApplicationRequest | NodeRequest | AllocationRequest
               | UpdateConfiguration)
