"""SI batching: what the core decided since the last `take()`, sent as few messages as possible.

The order of the messages matters to the engine: new applications, nodes, releases, existing
allocations and asks, application removals (after their releases), then recovery's drains.
A message carrying the allocations of recovering nodes gets an `id`, so its Ack marks them
recovered.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import msgspec

from si import messages

if TYPE_CHECKING:
    from .coordinator import ShimCore


@dataclasses.dataclass(slots=True)
class Batch:
    """The parts of the next SI messages."""

    apps: list[messages.AddApplication] = dataclasses.field(default_factory=list)
    nodes: list[messages.NodeChange] = dataclasses.field(default_factory=list)
    releases: list[messages.AllocationRelease] = dataclasses.field(default_factory=list)
    ask_releases: list[messages.AskRelease] = dataclasses.field(default_factory=list)
    allocations: list[messages.ExistingAllocation] = dataclasses.field(default_factory=list)
    asks: list[messages.AllocationAsk] = dataclasses.field(default_factory=list)
    late_nodes: list[messages.NodeChange] = dataclasses.field(default_factory=list)
    recovering: list[str] = dataclasses.field(default_factory=list)  # nodes awaiting an Ack
    touched_apps: set[str] = dataclasses.field(default_factory=set)  # may be removable now


def flush(core: ShimCore) -> None:
    """Turn the batch into SI messages on `core.actions.si`."""
    if not core.connected:
        core.reset_batch()
        return
    # An application the engine accepted is never removed by the shim, as YuniKorn's shim: when
    # its last pod ends the engine moves it to Completing, Completed (30 s) and Expired. Only one
    # whose pods all ended before the engine accepted it is removed (after its releases).
    removes = []
    for app in sorted(core.batch.touched_apps):
        if not core.app_live.get(app):
            core.app_origin.pop(app, None)
            core.placeholders_made.discard(app)
            core.gang_started.discard(app)
        if app in core.e_apps and not core.app_live.get(app) and app not in core.e_accepted:
            if any(a == app for a in core.e_asks.values()) or any(
                    a.app_id == app for a in core.e_allocs.values()):
                continue
            del core.e_apps[app]
            removes.append(messages.RemoveApplication(app, core.partition))
    for app in list(core.rejected_apps):
        if not core.app_live.get(app):
            del core.rejected_apps[app]
    rm_id = core.rm_id
    msgs: list[messages.ShimMessage] = []
    if core.batch.apps:
        msgs.append(messages.ApplicationRequest(rm_id, new=tuple(core.batch.apps)))
    if core.batch.nodes:
        msgs.append(messages.NodeRequest(rm_id, tuple(core.batch.nodes)))
    if core.batch.releases or core.batch.ask_releases:
        msgs.append(messages.AllocationRequest(
            rm_id, allocations_to_release=tuple(core.batch.releases),
            asks_to_release=tuple(core.batch.ask_releases)))
    if core.batch.allocations or core.batch.asks:
        msgs.append(messages.AllocationRequest(rm_id, asks=tuple(core.batch.asks),
                                               allocations=tuple(core.batch.allocations)))
    if removes:
        msgs.append(messages.ApplicationRequest(rm_id, remove=tuple(removes)))
    if core.batch.recovering:
        if not msgs:
            msgs.append(messages.NodeRequest(rm_id))
        rid = core.next_request_id()
        msgs[-1] = msgspec.structs.replace(msgs[-1], id=rid)
        core.awaiting[rid] = ("recover", list(core.batch.recovering))
    if core.running_id == -1:
        rid = core.next_request_id()
        msgs.append(messages.NodeRequest(rm_id, tuple(core.batch.late_nodes), rid))
        core.batch.late_nodes = []
        core.running_id = rid
        core.awaiting[rid] = ("running", None)
    elif core.batch.late_nodes:
        msgs.append(messages.NodeRequest(rm_id, tuple(core.batch.late_nodes)))
    core.actions.si.extend(msg.to_si() for msg in msgs)
    core.reset_batch()
