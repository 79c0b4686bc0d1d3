"""The queue tree: configured and dynamic queues, placement of applications, queue limits.

Placement
---------
`place_app` asks the partition's placement rules (engine.placement: YuniKorn's rules, or its
implicit `provided create:false` when none are configured) and creates what they ask for: every
missing level of the path as a dynamic queue (parents, then the leaf), each with a QUEUE ADD
QUEUE_DYNAMIC event. A dynamic queue is removed (QUEUE REMOVE QUEUE_DYNAMIC) when its last
application leaves, and so are its dynamic parents that become empty.

Limits
------
`fits` (a queue's `max` resources, checked up the hierarchy), `headroom` (what is left under
them) and `room_for_running_app` (a queue's `maxapplications`, checked up the hierarchy before an
application's first allocation, i.e. when it would start running).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from engine import placement
from engine.config import PartitionConfig, QueueConfig
from engine.objects import Queue
from engine.partition.eventcodes import ADD, QUEUE, REMOVE, SET
from shm.events import EventChangeDetail as Detail
from si import resources

if TYPE_CHECKING:
    from engine.objects import Application
    from engine.partition.state import PartitionState


def build(part: PartitionState, cfg: QueueConfig, parent: Queue | None) -> Queue:
    """A configured queue and its configured descendants."""
    q = _add_configured(part, cfg, parent)
    for child in cfg.children:
        build(part, child, q)
    return q


def _add_configured(part: PartitionState, cfg: QueueConfig, parent: Queue | None) -> Queue:
    """A configured queue (without its children): registered, QUEUE / ADD emitted."""
    q = Queue(cfg.name, cfg.path, parent, leaf=cfg.is_leaf)
    _configure(q, cfg)
    part.queues[q.path] = q
    if parent is not None:
        parent.children[q.name] = q
    part.emit(QUEUE, ADD, int(Detail.DETAILS_NONE), q.path, "", "configured queue added")
    return q


def _configure(q: Queue, cfg: QueueConfig) -> None:
    q.guaranteed = dict(cfg.guaranteed)
    q.max = dict(cfg.max)
    q.max_apps = cfg.max_applications
    q.properties = dict(cfg.properties)
    q.limits = list(cfg.limits)
    q.template = cfg.child_template
    q.update_share()


def push_limits(part: PartitionState) -> None:
    """Hand the queues' user/group limits to the UGM."""
    part.ugm.update_limits({q.path: q.limits for q in part.queues.values() if q.limits})


def update_config(part: PartitionState, config: PartitionConfig) -> None:
    """Apply a changed queue configuration (SIGHUP reload); emits the QUEUE SET rows."""
    seen: set[str] = set()
    for cfg in config.root.walk():
        seen.add(cfg.path)
        q = part.queues.get(cfg.path)
        if q is None:
            parent = part.queues.get(cfg.path.rsplit(".", 1)[0])
            if parent is None:
                continue
            if parent.is_leaf:
                parent.parent_flag = True
                part.emit(QUEUE, SET, int(Detail.QUEUE_TYPE), parent.path, "", "leaf -> parent")
            _add_configured(part, cfg, parent)
            continue
        _reconfigure(part, q, cfg)
    for path in sorted(part.queues, key=lambda p: -p.count(".")):
        q = part.queues[path]
        if path not in seen and not q.dynamic and q.parent is not None:
            q.draining = True
            maybe_remove(part, q)
    push_limits(part)
    part.version += 1


def _reconfigure(part: PartitionState, q: Queue, cfg: QueueConfig) -> None:
    """An existing queue takes its new configuration; the changes are emitted."""
    if q.max != cfg.max:
        part.emit(QUEUE, SET, int(Detail.QUEUE_MAX), q.path, "", "max resource changed",
                  cfg.max or None)
    if q.guaranteed != cfg.guaranteed:
        part.emit(QUEUE, SET, int(Detail.QUEUE_GUARANTEED), q.path, "",
                  "guaranteed resource changed", cfg.guaranteed or None)
    if q.is_leaf != cfg.is_leaf and (cfg.is_leaf is False or not q.children):
        q.parent_flag = not cfg.is_leaf
        part.emit(QUEUE, SET, int(Detail.QUEUE_TYPE), q.path, "",
                  "leaf -> parent" if q.parent_flag else "parent -> leaf")
    _configure(q, cfg)
    q.dynamic = False
    q.draining = False


def maybe_remove(part: PartitionState, q: Queue) -> None:
    """Remove an empty dynamic or draining queue, and its parents that become so."""
    while q.parent is not None and (q.dynamic or q.draining) and not q.apps \
            and not q.children and not q.pending_count and resources.is_zero(q.allocated):
        parent = q.parent
        del parent.children[q.name]
        del part.queues[q.path]
        if q.dynamic:
            part.emit(QUEUE, REMOVE, int(Detail.QUEUE_DYNAMIC), q.path, "",
                      "dynamic queue removed")
        else:
            part.emit(QUEUE, REMOVE, int(Detail.DETAILS_NONE), q.path, "",
                      "configured queue removed")
        q = parent


def _dynamic_leaf(part: PartitionState, parent: Queue, name: str) -> Queue:
    q = Queue(name, f"{parent.path}.{name}", parent, leaf=True, dynamic=True)
    if parent.template is not None:
        _configure(q, parent.template)
    elif parent.properties.get("application.sort.policy"):
        q.properties = {"application.sort.policy":
                        parent.properties["application.sort.policy"]}
    parent.children[name] = q
    part.queues[q.path] = q
    part.emit(QUEUE, ADD, int(Detail.QUEUE_DYNAMIC), q.path, "", "dynamic queue added")
    return q


def place_app(part: PartitionState, app: Application) -> tuple[Queue | None, str]:
    """The leaf for `app`, by the partition's placement rules (engine.placement)."""
    rules = part.placement_rules
    ugi = app.ugi
    request = placement.Request(app.queue_name or "", ugi.user, tuple(ugi.groups), app.tags)
    decision = placement.place(rules, request, lambda path: _kind(part, path))
    if not decision.path:
        return None, f"failed to place application {app.app_id}: {decision.reason}"
    if decision.create:
        return create_path(part, decision.path), ""
    return part.queues[decision.path], ""


def _kind(part: PartitionState, path: str) -> str | None:
    q = part.queues.get(path)
    if q is None:
        return None
    if q.draining:
        return "draining"
    return "leaf" if q.is_leaf else "parent"


def create_path(part: PartitionState, path: str) -> Queue:
    """Create every missing level of `path` as a dynamic queue: parents, then the leaf."""
    names = path.split(".")
    parent = part.root
    for depth in range(1, len(names)):
        q = part.queues.get(".".join(names[:depth + 1]))
        if q is not None:
            parent = q
            continue
        if depth == len(names) - 1:
            return _dynamic_leaf(part, parent, names[depth])
        q = Queue(names[depth], f"{parent.path}.{names[depth]}", parent, leaf=False, dynamic=True)
        parent.children[q.name] = q
        part.queues[q.path] = q
        part.emit(QUEUE, ADD, int(Detail.QUEUE_DYNAMIC), q.path, "", "dynamic queue added")
        parent = q
    return parent


# --- limits ------------------------------------------------------------------------------------

def fits(q: Queue | None, res: Mapping[str, int]) -> bool:
    """Whether `res` more fits under the `max` of the queue and each of its parents."""
    while q is not None:
        mx = q.max
        if mx:
            qa = q.allocated
            for name, value in res.items():
                limit = mx.get(name)
                if limit is not None and qa.get(name, 0) + value > limit:
                    return False
        q = q.parent
    return True


def headroom(q: Queue) -> dict[str, int]:
    """What is left under the `max` of the queue and its parents, per limited resource."""
    room: dict[str, int] = {}
    for anc in q.ancestors():
        for name, limit in anc.max.items():
            free = max(0, limit - anc.allocated.get(name, 0))
            room[name] = min(room.get(name, free), free)
    return room


def room_for_running_app(q: Queue) -> bool:
    """A queue's `maxapplications` rule: one more application may start running in `q`
    only while it and every parent run fewer than their limit (0 = no limit)."""
    for anc in q.ancestors():
        if anc.max_apps and anc.running_apps >= anc.max_apps:
            return False
    return True
