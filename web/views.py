"""Read-only views of the engine's state snapshot: partitions, queues, applications, nodes, usage.

The engine writes the YuniKorn DAO shapes into the snapshot (docs/CONTRACTS.md); these handlers
pick the part a path names and send it as it is. Names in paths are validated first (400), then
looked up (404). Without a snapshot every view answers 503 (the event endpoints still work).

Name rules (YuniKorn's `configs` regular expressions):
- user:  `^[_a-zA-Z][a-zA-Z0-9:#/_.@-]*[$]?$`
- group: `^[_a-zA-Z][a-zA-Z0-9:#/_.-]*$`
- partition: letters, digits, `_ . - [ ]` (`[rm]default` is a YuniKorn internal name)
each at most 256 characters.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import orjson

from .errors import BadRequest, NotFound

if TYPE_CHECKING:
    from .app import App, Request

USER_RE = re.compile(r"^[_a-zA-Z][a-zA-Z0-9:#/_.@-]*[$]?$")
GROUP_RE = re.compile(r"^[_a-zA-Z][a-zA-Z0-9:#/_.-]*$")
PARTITION_RE = re.compile(r"^[a-zA-Z0-9_.\[\]-]+$")
MAX_NAME = 256

PartitionDoesNotExist = "Partition not found"
UserDoesNotExist = "User not found"
GroupDoesNotExist = "Group not found"


def _check(value: str, pattern: re.Pattern[str], what: str) -> str:
    if len(value) > MAX_NAME or not pattern.fullmatch(value):
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


def _partition(app: "App", req: "Request") -> tuple[str, dict]:
    name = _check(req.params["partition"], PARTITION_RE, "partition")
    doc = app.snapshot.doc()
    if name not in _partition_names(doc):
        raise NotFound(PartitionDoesNotExist)
    return name, doc


def _dump(value: Any) -> bytes:
    return orjson.dumps(value)


async def partitions(app: "App", req: "Request", send) -> None:
    body = app.snapshot.cached("partitions", lambda doc: _dump(doc.get("partitions") or []))
    await app.send_json(send, 200, body)


async def queues(app: "App", req: "Request", send) -> None:
    name, _doc = _partition(app, req)
    body = app.snapshot.cached(("queues", name), lambda doc: _dump((doc.get("queues") or {}).get(name, {})))
    await app.send_json(send, 200, body)


async def applications(app: "App", req: "Request", send) -> None:
    name, _doc = _partition(app, req)
    body = app.snapshot.cached(
        ("applications", name), lambda doc: _dump((doc.get("applications") or {}).get(name) or [])
    )
    await app.send_json(send, 200, body)


async def nodes(app: "App", req: "Request", send) -> None:
    name, _doc = _partition(app, req)
    body = app.snapshot.cached(("nodes", name), lambda doc: _dump((doc.get("nodes") or {}).get(name) or []))
    await app.send_json(send, 200, body)


def _usage(doc: dict, partition: str) -> dict:
    usage = (doc.get("usage") or {}).get(partition) or {}
    return usage if isinstance(usage, dict) else {}


async def users_usage(app: "App", req: "Request", send) -> None:
    name, _doc = _partition(app, req)
    body = app.snapshot.cached(("users", name), lambda doc: _dump(_usage(doc, name).get("users") or []))
    await app.send_json(send, 200, body)


async def groups_usage(app: "App", req: "Request", send) -> None:
    name, _doc = _partition(app, req)
    body = app.snapshot.cached(("groups", name), lambda doc: _dump(_usage(doc, name).get("groups") or []))
    await app.send_json(send, 200, body)


async def user_usage(app: "App", req: "Request", send) -> None:
    await _send_member(app, req, send, _check(req.params["user"], USER_RE, "user"), "users", "userName", UserDoesNotExist)


async def group_usage(app: "App", req: "Request", send) -> None:
    await _send_member(app, req, send, _check(req.params["group"], GROUP_RE, "group"), "groups", "groupName", GroupDoesNotExist)


async def _send_member(app: "App", req: "Request", send, wanted: str, kind: str, field: str, missing: str) -> None:
    """Send the `kind` ("users"/"groups") usage entry whose `field` is `wanted`; 404 `missing` if none."""
    name, doc = _partition(app, req)
    for item in _usage(doc, name).get(kind) or []:
        if isinstance(item, dict) and item.get(field) == wanted:
            await app.send_json(send, 200, _dump(item))
            return
    raise NotFound(missing)
