"""Cluster-wide views of YuniKorn's core: clusters, node utilisation, history, config, state dump.

- `/ws/v1/clusters`: one ClusterDAOInfo per partition (`clusterName` is always "kubernetes").
- `/ws/v1/scheduler/node-utilizations`: per partition, per resource type, 10 buckets of nodes by
  allocated/capacity (bucket = max(ceil(pct/10) - 1, 0)). YuniKorn indexes past the last bucket
  above 100 % (and would panic); we put such a node in the last bucket.
- `/ws/v1/history/apps`, `/ws/v1/history/containers`: the engine's metrics history
  (engine.history), counts as strings as YuniKorn sends them.
- `/ws/v1/config`: YAML (`application/x-yaml`), or JSON with Go field names iff
  `Accept: application/json` exactly (engine.config_doc).
- `POST /ws/v1/validate-conf`: `{"allowed","reason"}` from the engine's own config parser, run
  in a thread (one per worker at a time) under `VALIDATE_LIMITS` (common.safeyaml): a document
  over a limit (bytes, nodes after alias expansion, depth, aliases, 2 s) is a 400 naming it.
- `/debug/fullstatedump`: YuniKorn's AggregatedStateInfo, indented; `/ws/v1/fullstatedump` is a
  301 to it.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import orjson
import yaml

from engine import config_doc
import trio

from common.safeyaml import YamlLimits
from engine.config import ConfigError, ConfigLimitError, parse_config
from engine.rm_config import queues_document

from .errors import JSON_CONTENT_TYPE, BadRequest, Unavailable
from .responses import accepts_gzip, gzip_parts

if TYPE_CHECKING:
    from .app import App, Request

YAML_CONTENT_TYPE = b"application/x-yaml; charset=UTF-8"
BUCKETS = 10


def _partitions(doc: dict) -> list[dict]:
    return [p for p in doc.get("partitions") or [] if isinstance(p, dict)]


def _engine(doc: dict) -> dict:
    return doc.get("engine") or {}


def clusters_of(doc: dict) -> list[dict]:
    started = _engine(doc).get("startedNano", 0)
    build = doc.get("rmBuildInformation") or []
    result = []
    for part in _partitions(doc):
        info: dict[str, Any] = {}
        if started:
            info["startTime"] = started
        if build:
            info["rmBuildInformation"] = build
        info["partition"] = part.get("name", "")
        info["clusterName"] = "kubernetes"
        result.append(info)
    return result


async def clusters(app: "App", req: "Request", send) -> None:
    await app.send_json(send, 200, app.snapshot.cached("clusters", lambda doc: orjson.dumps(clusters_of(doc))))


def bucket_of(allocated: int, capacity: int) -> int:
    """YuniKorn's bucket for a node using `allocated` of `capacity` (both > 0 checked by caller)."""
    pct = int(allocated / capacity * 100)
    return min(max(math.ceil(pct / 10) - 1, 0), BUCKETS - 1)


def _utilization(nodes: list[dict]) -> list[dict]:
    counts: dict[str, list[list[str]]] = {}
    for node in nodes:
        capacity = node.get("capacity") or {}
        allocated = node.get("allocated") or {}
        for rtype, cap in capacity.items():
            idx = 0
            if rtype in allocated and cap:
                idx = bucket_of(allocated[rtype], cap)
            counts.setdefault(rtype, [[] for _ in range(BUCKETS)])[idx].append(node.get("nodeID", ""))
    result = []
    for rtype in sorted(counts):
        buckets = []
        for k, names in enumerate(counts[rtype]):
            bucket: dict[str, Any] = {"bucketName": f"{k * 10}-{(k + 1) * 10}%"}
            if names:
                bucket["numOfNodes"] = len(names)
                bucket["nodeNames"] = names
            buckets.append(bucket)
        result.append({"type": rtype, "utilization": buckets})
    return result


def utilizations_of(doc: dict) -> list[dict]:
    result = []
    for part in _partitions(doc):
        name = part.get("name", "")
        entry: dict[str, Any] = {"clusterId": part.get("clusterId", ""), "partition": name}
        util = _utilization((doc.get("nodes") or {}).get(name) or [])
        if util:
            entry["utilizations"] = util
        result.append(entry)
    return result


async def node_utilizations(app: "App", req: "Request", send) -> None:
    body = app.snapshot.cached("node-utilizations", lambda doc: orjson.dumps(utilizations_of(doc)))
    await app.send_json(send, 200, body)


def history_of(doc: dict, field: str) -> list[dict]:
    """`field` is totalApplications or totalContainers; the count is sent as a string."""
    column = 1 if field == "totalApplications" else 2
    return [{"timestamp": row[0], field: str(row[column])} for row in doc.get("history") or []]


async def app_history(app: "App", req: "Request", send) -> None:
    body = app.snapshot.cached("history-apps", lambda doc: orjson.dumps(history_of(doc, "totalApplications")))
    await app.send_json(send, 200, body)


async def container_history(app: "App", req: "Request", send) -> None:
    body = app.snapshot.cached("history-containers",
                               lambda doc: orjson.dumps(history_of(doc, "totalContainers")))
    await app.send_json(send, 200, body)


def _wants_json(req: "Request") -> bool:
    for name, value in req.scope.get("headers", ()):
        if name == b"accept":
            return value == b"application/json"
    return False


async def config(app: "App", req: "Request", send) -> None:
    if _wants_json(req):
        body = app.snapshot.cached("config-json", lambda doc: orjson.dumps(
            config_doc.to_json_shape(doc.get("config") or {})))
        await app.send_json(send, 200, body)
        return
    body = app.snapshot.cached("config-yaml", lambda doc: yaml.safe_dump(
        doc.get("config") or {}, sort_keys=False, allow_unicode=True).encode("utf-8"))
    await app.send_body(send, 200, body, YAML_CONTENT_TYPE)


VALIDATE_LIMITS = YamlLimits(max_bytes=512 << 10, max_nodes=50_000, max_depth=64, max_aliases=100,
                             deadline_s=2.0)
"""What one validate-conf document may cost a worker (web.app.MAX_CONFIG_BODY is max_bytes)."""

QUEUE_WAIT_SECONDS = 5.0
"""How long a validate-conf waits for its worker's parse slot before a 503."""

VALIDATE_IN_FLIGHT = 8
"""validate-conf requests a worker reads a body for at once (one parsing, the rest queued): at
most 8 x 512 KiB of bodies per worker, whatever the number of connections. A 9th gets 503 before
its body is read, and its connection is closed with it, so a stalled body holds no memory."""


def _validate(body: bytes) -> dict[str, Any]:
    try:
        parse_config({"partitions": queues_document(body, VALIDATE_LIMITS).get("partitions")})
    except ConfigLimitError:
        raise
    except ConfigError as exc:
        return {"allowed": False, "reason": str(exc)}
    return {"allowed": True, "reason": ""}


async def validate_conf(app: "App", req: "Request", send) -> None:
    """YuniKorn answers 200 either way; `reason` names the key and value the engine refuses.
    Parsing runs off the event loop (streams and other requests keep being served); the parser
    stops itself at the deadline, so an abandoned thread does not run on. A body is read only
    once one of the worker's VALIDATE_IN_FLIGHT slots is free (503 otherwise): bodies of stalled
    connections cannot add up past that."""
    try:
        app.validate_slots.acquire_nowait()
    except trio.WouldBlock:
        raise Unavailable(f"validate-conf: this worker is already reading or validating "
                          f"{VALIDATE_IN_FLIGHT} configurations; retry later") from None
    try:
        body = await app.read_body(req)
        result = await _parse_in_turn(app, body)
    finally:
        app.validate_slots.release()
    await app.send_json(send, 200, orjson.dumps(result))


async def _parse_in_turn(app: "App", body: bytes) -> dict[str, Any]:
    """`_validate` in a thread once the worker's one parse slot is free (503 after a wait)."""
    with trio.move_on_after(QUEUE_WAIT_SECONDS) as waited:
        await app.parse_limiter.acquire()
    if waited.cancelled_caught:
        raise Unavailable(f"validate-conf: this worker is busy validating another configuration "
                          f"(waited {QUEUE_WAIT_SECONDS:g} s)")
    try:
        return await trio.to_thread.run_sync(_validate, body, abandon_on_cancel=True)
    except ConfigLimitError as exc:
        raise BadRequest(f"validate-conf: {exc.reason}") from None
    finally:
        app.parse_limiter.release()


def state_dump_of(doc: dict, streams: list[dict]) -> dict[str, Any]:
    """YuniKorn's AggregatedStateInfo (omitempty keys) from one snapshot, but its `timestamp`."""
    parts = _partitions(doc)
    names = [p.get("name", "") for p in parts]
    apps = [a for n in names for a in (doc.get("applications") or {}).get(n) or []]
    dump: dict[str, Any] = {
        "partitions": parts,
        "applications": apps,
        "appHistory": history_of(doc, "totalApplications"),
        "nodes": [{"partitionName": n, "nodesInfo": (doc.get("nodes") or {}).get(n) or []} for n in names],
        "clusterInfo": clusters_of(doc),
        "containerHistory": history_of(doc, "totalContainers"),
        "queues": [(doc.get("queues") or {}).get(n) for n in names],
        "rmDiagnostics": {"empty": "Resource Manager did not register callback"},
        "logLevel": "info",
        "config": config_doc.to_json_shape(doc.get("config") or {}),
        "placementRules": [{"partition": n, "rules": (doc.get("placementRules") or {}).get(n)}
                           for n in names if (doc.get("placementRules") or {}).get(n)],
        "eventStreams": streams,
    }
    return {k: v for k, v in dump.items() if v}


async def full_state_dump(app: "App", req: "Request", send) -> None:
    """The dump of the newest snapshot is encoded (and, for gzip, deflated) once; each answer is
    its own timestamp line followed by those bytes as they are (4.9 MB at 1,000 apps + 1,000
    nodes: a copy per answer and a compression per answer were most of its CPU, py-spy)."""
    streams = app.open_streams()
    rest = app.snapshot.cached(("fullstatedump", tuple(s["Host"] for s in streams)), lambda doc: orjson.dumps(
        state_dump_of(doc, streams), option=orjson.OPT_INDENT_2)[2:] + b"\n")
    prefix = b'{\n  "timestamp": %d,\n' % time.time_ns()
    headers = [(b"content-type", JSON_CONTENT_TYPE)]
    if accepts_gzip(req.scope):
        parts = gzip_parts(prefix, app.gzip.tail(rest))
        headers += [(b"content-encoding", b"gzip"), (b"vary", b"Accept-Encoding")]
    else:
        parts = [prefix, rest]
    headers.append((b"content-length", b"%d" % sum(map(len, parts))))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for i, part in enumerate(parts):
        await send({"type": "http.response.body", "body": part, "more_body": i < len(parts) - 1})


async def redirect_state_dump(app: "App", req: "Request", send) -> None:
    await app.send_body(send, 301, b"", b"text/plain; charset=utf-8",
                        [(b"location", b"/debug/fullstatedump")])
