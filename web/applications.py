"""Applications by queue, by state and one by one, as YuniKorn's core serves them.

- `/ws/v1/partition/{p}/applications/{state}`: `active` (every app not yet finished, `?status=`
  narrows to one of new, accepted, running, completing, failing, resuming), `rejected`, or
  `completed` (Completed and Failed: YuniKorn moves both to its completed list).
- `/ws/v1/partition/{p}/queue/{q}/applications[/active]`: the queue's apps (only `active` is a
  state a queue answers for).
- `/ws/v1/partition/{p}/application/{a}` and `.../queue/{q}/application/{a}`: one app.
  Decision: finished apps are found too (YuniKorn's core looks only at running ones there, yet
  lists finished ones by state); the queue form needs the app to be in that queue.

The order of checks and the messages are the core's: partition (404), queue name (400), queue
(404), state (400), status (400), app (404).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from .errors import BadRequest, NotFound
from .views import find_queue, partition_doc, queue_path

if TYPE_CHECKING:
    from .app import App, Request

ApplicationDoesNotExist = "Application not found"

ACTIVE_STATUSES = ("new", "accepted", "running", "completing", "failing", "resuming")
"""What `?status=` may name (YuniKorn's allowedAppActiveStatuses)."""

COMPLETED_STATES = {"Completed", "Failed"}
REJECTED_STATES = {"Rejected"}
GONE_STATES = {"Expired"}

STATES_MESSAGE = "Only following application states are allowed: active, rejected, completed"
QUEUE_STATES_MESSAGE = "Only following application states are allowed: active"
STATUS_MESSAGE = "Only following active statuses are allowed: " + ",".join(ACTIVE_STATUSES)


def _apps(doc: dict, partition: str) -> list[dict]:
    return (doc.get("applications") or {}).get(partition) or []


def _state(app: dict) -> str:
    return str(app.get("applicationState", ""))


def is_active(app: dict) -> bool:
    state = _state(app)
    return state not in COMPLETED_STATES and state not in REJECTED_STATES and state not in GONE_STATES


def _status(req: "Request") -> str:
    status = req.query.get("status", "").lower()
    if status and status not in ACTIVE_STATUSES:
        raise BadRequest(STATUS_MESSAGE)
    return status


def _select(apps: list[dict], state: str, status: str) -> list[Any]:
    if state == "active":
        return [a for a in apps if is_active(a) and (not status or _state(a).lower() == status)]
    wanted = REJECTED_STATES if state == "rejected" else COMPLETED_STATES
    return [a for a in apps if _state(a) in wanted]


async def by_state(app: "App", req: "Request", send) -> None:
    name, _doc = partition_doc(app, req)
    state = req.params["state"].lower()
    if state not in ("active", "rejected", "completed"):
        raise BadRequest(STATES_MESSAGE)
    status = _status(req) if state == "active" else ""
    body = app.snapshot.cached(("apps-by-state", name, state, status),
                               lambda doc: orjson.dumps(_select(_apps(doc, name), state, status)))
    await app.send_json(send, 200, body)


def _in_queue(apps: list[dict], queue: dict) -> list[dict]:
    path = str(queue.get("queuename", "")).lower()
    return [a for a in apps if str(a.get("queueName", "")).lower() == path and is_active(a)]


async def of_queue(app: "App", req: "Request", send) -> None:
    """`.../queue/{q}/applications` and `.../queue/{q}/applications/{state}` (state: active)."""
    name, doc = partition_doc(app, req)
    path = queue_path(req.params["queue"])
    find_queue(doc, name, path)
    status = ""
    if "state" in req.params:
        if req.params["state"].lower() != "active":
            raise BadRequest(QUEUE_STATES_MESSAGE)
        status = _status(req)

    def build(doc: dict) -> bytes:
        apps = _in_queue(_apps(doc, name), find_queue(doc, name, path))
        return orjson.dumps([a for a in apps if not status or _state(a).lower() == status])

    await app.send_json(send, 200, app.snapshot.cached(("queue-apps", name, path.lower(), status), build))


async def one(app: "App", req: "Request", send) -> None:
    """`.../application/{a}` and `.../queue/{q}/application/{a}`."""
    name, doc = partition_doc(app, req)
    queue = None
    if "queue" in req.params:
        queue = find_queue(doc, name, queue_path(req.params["queue"]))
    wanted = req.params["application"]
    for item in _apps(doc, name):
        if item.get("applicationID") != wanted:
            continue
        if queue is not None and str(item.get("queueName", "")).lower() != str(queue.get("queuename", "")).lower():
            continue
        await app.send_json(send, 200, orjson.dumps(item))
        return
    raise NotFound(ApplicationDoesNotExist)
