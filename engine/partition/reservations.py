"""Reservations: a node held for one ask that fits its capacity but not its free space.

An ask that fits no node's free space but fits a node's capacity reserves that node (NODE /
ADD / NODE_RESERVATION); the reserved node serves only that ask until it is allocated, the ask
goes, or the node stops being usable.

`reserve` and `unreserve` are the only places a reservation starts and ends (the cycle, the
preemption that frees a node for an ask, and an ask that leaves all call them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.partition.eventcodes import ADD, NODE, REMOVE
from shm.events import EventChangeDetail as Detail

if TYPE_CHECKING:
    from engine.objects import Application, Ask, Node
    from engine.partition.state import PartitionState


def reserve(part: PartitionState, app: Application, ask: Ask, node: Node) -> None:
    """The node serves only this ask from now on (NODE / ADD / NODE_RESERVATION)."""
    node.reserved_for = (app.app_id, ask.key)
    node.ver += 1
    app.ver += 1
    ask.reserved_node = node.node_id
    part.reservations[ask.key] = (app, ask, node)
    part.emit(NODE, ADD, int(Detail.NODE_RESERVATION), node.node_id, ask.key,
              f"reserved for application {app.app_id}", ask.resource)
    part.version += 1


def unreserve(part: PartitionState, ask: Ask) -> None:
    """The ask's reservation, if any, ends; the node is free for others again."""
    entry = part.reservations.pop(ask.key, None)
    ask.reserved_node = None
    if entry is None:
        return
    node = entry[2]
    node.reserved_for = None
    node.ver += 1
    entry[0].ver += 1
    part.emit(NODE, REMOVE, int(Detail.NODE_RESERVATION), node.node_id, ask.key, "",
              ask.resource)
    if node.index_pos >= 0:
        part.index.freed(node)
    part.version += 1


def unreserve_node(part: PartitionState, node: Node) -> None:
    if node.reserved_for is not None:
        app_id, key = node.reserved_for
        app = part.apps.get(app_id)
        ask = app.asks.get(key) if app else None
        if ask is not None:
            unreserve(part, ask)
        else:
            node.reserved_for = None
            node.ver += 1
