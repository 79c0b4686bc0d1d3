"""Every SI message, both ways, as typed frozen values: the one name to import them by.

    requests   what the shim sends: RegisterResourceManager, ApplicationRequest, NodeRequest,
               AllocationRequest, UpdateConfiguration and their parts (built by the shim,
               `to_si()` on the wire)
    parse      `parse(msg)`: a received dict -> a request, every field checked (`ProtocolError`
               names the field); the engine's entrance
    responses  what the engine sends: AllocationResponse, ApplicationResponse, NodeResponse,
               EventRecords, RegisterResourceManagerResponse, Ack, Error; `read_engine(msg)`
               is the shim's entrance

Each field of the wire format is spelled once, in a `to_si()` and its reader.
"""

from si.parse import parse
from si.requests import (AddApplication, AllocationAsk, AllocationRelease,
                         AllocationRequest, ApplicationRequest, AskRelease,
                         DEFAULT_PREEMPTION, ExistingAllocation, NodeChange,
                         NodeRequest, PreemptionPolicy, RegisterResourceManager,
                         RemoveApplication, ShimMessage, UpdateConfiguration,
                         UserGroupInfo)
from si.responses import (Ack, AllocationResponse, ApplicationResponse, EngineMessage,
                          Error, EventRecord, EventRecords, NewAllocation, NodeResponse,
                          RegisterResourceManagerResponse, RejectedAllocation,
                          RejectedApplication, RejectedNode, UpdatedApplication,
                          read_engine)

__all__ = [
    "DEFAULT_PREEMPTION", "PreemptionPolicy",
    "Ack", "AddApplication", "AllocationAsk", "AllocationRelease", "AllocationRequest",
    "AllocationResponse", "ApplicationRequest", "ApplicationResponse", "AskRelease",
    "EngineMessage", "Error", "EventRecord", "EventRecords", "ExistingAllocation",
    "NewAllocation", "NodeChange", "NodeRequest", "NodeResponse", "RegisterResourceManager",
    "RegisterResourceManagerResponse", "RejectedAllocation", "RejectedApplication",
    "RejectedNode", "RemoveApplication", "ShimMessage", "UpdateConfiguration",
    "UpdatedApplication", "UserGroupInfo",
    "parse", "read_engine",
]
