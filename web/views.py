"""Read-only views of the engine's state snapshot: partitions, queues, applications, nodes, usage.

The engine writes the YuniKorn DAO shapes into the snapshot (docs/CONTRACTS.md); these handlers
pick the part a path names and send it as it is. Names in paths are validated first (400), then
looked up (404). Without a snapshot every view answers 503 (the event endpoints still work).

Name rules (YuniKorn's `configs` regular expressions, engine.ugm.security):
- user:  `^[_a-zA-Z][a-zA-Z0-9:#/_.@-]*[$]?$`, no length limit of its own (as YuniKorn)
- group: `^[_a-zA-Z][a-zA-Z0-9:_.-]*$`, likewise
- partition: letters, digits, `_ . - [ ]` (`[rm]default` is a YuniKorn internal name), at most
  256 characters; the usage routes ignore it as YuniKorn does (`usage_partition`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import orjson

from engine.ugm.security import GROUP_RE, USER_RE

from .errors import BadRequest, NotFound

if TYPE_CHECKING:
    from .app import App, Request

PARTITION_RE = re.compile(r"^[a-zA-Z0-9_.\[\]-]+$")
MAX_NAME = 256

QUEUE_NAME_RE = re.compile(r"^[a-zA-Z0-9_:#/@-]{1,64}$")

PartitionDoesNotExist = "Partition not found"
QueueDoesNotExist = "Queue not found"
NodeDoesNotExist = "Node not found"
UserDoesNotExist = "User not found"
GroupDoesNotExist = "Group not found"


def _check(value: str, pattern: re.Pattern[str], what: str, max_len: int | None = MAX_NAME) -> str:
    if (max_len is not None and len(value) > max_len) or not pattern.fullmatch(value):
        raise BadRequest(f"Invalid {what} name")
    return value


def _partition_names(doc: dict) -> set[str]:
    names: set[str] = set()
    for item in doc.get("partitions") or []:
        if isinstance(item, dict):
            name = item.get("name") or item.get("partitionName")
            if isinstance(name, str):
                names.add(name)
    for key in ("queues", "applications", "nodes", "usage"):
        section = doc.get(key)
        if isinstance(section, dict):
            names.update(section)
    return names


def partition_doc(app: "App", req: "Request") -> tuple[str, dict]:
    """The `{partition}` of the path (400 if malformed, 404 if unknown) and the snapshot."""
    name = _check(req.params["partition"], PARTITION_RE, "partition")
    doc = app.snapshot.doc()
    if name not in _partition_names(doc):
        raise NotFound(PartitionDoesNotExist)
    return name, doc


def _dump(value: Any) -> bytes:
    return orjson.dumps(value)


def queue_path(text: str) -> str:
    """A queue path from a URL (each dot-separated name checked as YuniKorn's `validateQueue`)."""
    for name in text.split("."):
        if not QUEUE_NAME_RE.fullmatch(name):
            raise BadRequest(
                f"problem in queue query parameter parsing as queue param {text} contains invalid "
                f"queue name {name}. Queue name must only have alphanumeric characters, - or _, "
                "and be no longer than 64 characters")
    return text


def find_queue(doc: dict, partition: str, path: str) -> dict:
    """The queue DAO at `path` in the partition's tree (names compare case-insensitively, as
    YuniKorn's lower-cased queue names do); NotFound if there is none."""
    node = (doc.get("queues") or {}).get(partition) or {}
    wanted = path.lower().split(".")
    if not isinstance(node, dict) or str(node.get("queuename", "")).lower() != wanted[0]:
        raise NotFound(QueueDoesNotExist)
    for depth in range(1, len(wanted)):
        prefix = ".".join(wanted[: depth + 1])
        for child in node.get("children") or []:
            if str(child.get("queuename", "")).lower() == prefix:
                node = child
                break
        else:
            raise NotFound(QueueDoesNotExist)
    return node


async def queue(app: "App", req: "Request", send) -> None:
    """One queue; its children only with `?subtree` (YuniKorn's GetPartitionQueueDAOInfo)."""
    name, doc = partition_doc(app, req)
    path = queue_path(req.params["queue"])
    find_queue(doc, name, path)
    subtree = "subtree" in req.query

    def build(doc: dict) -> bytes:
        dao = find_queue(doc, name, path)
        if not subtree:
            dao = {k: v for k, v in dao.items() if k != "children"}
        return _dump(dao)

    await app.send_json(send, 200, app.snapshot.cached(("queue", name, path.lower(), subtree), build))


async def node(app: "App", req: "Request", send) -> None:
    name, doc = partition_doc(app, req)
    node_id = req.params["node"]
    for item in (doc.get("nodes") or {}).get(name) or []:
        if item.get("nodeID") == node_id:
            await app.send_json(send, 200, _dump(item))
            return
    raise NotFound(NodeDoesNotExist)


async def partitions(app: "App", req: "Request", send) -> None:
    body = app.snapshot.cached("partitions", lambda doc: _dump(doc.get("partitions") or []))
    await app.send_json(send, 200, body)


async def queues(app: "App", req: "Request", send) -> None:
    name, _doc = partition_doc(app, req)
    body = app.snapshot.cached(("queues", name), lambda doc: _dump((doc.get("queues") or {}).get(name, {})))
    await app.send_json(send, 200, body)


async def applications(app: "App", req: "Request", send) -> None:
    name, _doc = partition_doc(app, req)
    body = app.snapshot.cached(
        ("applications", name), lambda doc: _dump((doc.get("applications") or {}).get(name) or [])
    )
    await app.send_json(send, 200, body)


async def nodes(app: "App", req: "Request", send) -> None:
    name, _doc = partition_doc(app, req)
    body = app.snapshot.cached(("nodes", name), lambda doc: _dump((doc.get("nodes") or {}).get(name) or []))
    await app.send_json(send, 200, body)


async def placement_rules(app: "App", req: "Request", send) -> None:
    """GET /ws/v1/partition/{partition}/placementrules: YuniKorn's RuleDAO list (engine.placement)."""
    name, _doc = partition_doc(app, req)
    body = app.snapshot.cached(("placementrules", name),
                               lambda doc: _dump((doc.get("placementRules") or {}).get(name) or []))
    await app.send_json(send, 200, body)


def usage_partition(app: "App", req: "Request") -> tuple[str, dict]:
    """The usage routes' `{partition}`: YuniKorn keeps one usage manager for the whole scheduler
    and ignores it (any name answers). Here usage is kept per partition: a partition that exists
    answers its own; any other name the default partition's (with one partition, YuniKorn's
    answer)."""
    name = req.params["partition"]
    doc = app.snapshot.doc()
    names = _partition_names(doc)
    if name not in names:
        name = "default" if "default" in names or not names else sorted(names)[0]
    return name, doc


def _usage(doc: dict, partition: str) -> dict:
    usage = (doc.get("usage") or {}).get(partition) or {}
    return usage if isinstance(usage, dict) else {}


async def users_usage(app: "App", req: "Request", send) -> None:
    name, _doc = usage_partition(app, req)
    body = app.snapshot.cached(("users", name), lambda doc: _dump(_usage(doc, name).get("users") or []))
    await app.send_json(send, 200, body)


async def groups_usage(app: "App", req: "Request", send) -> None:
    name, _doc = usage_partition(app, req)
    body = app.snapshot.cached(("groups", name), lambda doc: _dump(_usage(doc, name).get("groups") or []))
    await app.send_json(send, 200, body)


async def user_usage(app: "App", req: "Request", send) -> None:
    await _send_member(app, req, send, _check(req.params["user"], USER_RE, "user", None), "users", "userName", UserDoesNotExist)


async def group_usage(app: "App", req: "Request", send) -> None:
    await _send_member(app, req, send, _check(req.params["group"], GROUP_RE, "group", None), "groups", "groupName", GroupDoesNotExist)


async def _send_member(app: "App", req: "Request", send, wanted: str, kind: str, field: str, missing: str) -> None:
    """Send the `kind` ("users"/"groups") usage entry whose `field` is `wanted`; 404 `missing` if none."""
    name, doc = usage_partition(app, req)
    for item in _usage(doc, name).get(kind) or []:
        if isinstance(item, dict) and item.get(field) == wanted:
            await app.send_json(send, 200, _dump(item))
            return
    raise NotFound(missing)
