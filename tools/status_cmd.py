"""`ykshm status`: the processes, ring and engine state of one running ykshm instance.

    ykshm status [--name NAME] [--json]

Processes are found by their command line: `ykshm <role> ... --name NAME` (also `python -m
tools.cli <role>` and `python .../ykshm <role>`), role one of run, engine, web, shim,
sim-cluster, export; a process without `--name` belongs to the default instance "ykshm". The children of
a web process (its hypercorn workers) are listed as role "web-worker".

Health: a process is "ok" while it runs; the engine is "stale" when the ring's heartbeat is older
than 10 s (the systemd watchdog interval) and "ok" otherwise. The ring summary is `ykshm ring stat`
without the rate sample; the engine summary counts the partitions, applications and nodes of the
engine's latest state snapshot (/dev/shm/NAME.state); the exporter line (`ykshm export`) comes
from its status file /dev/shm/NAME.export: lag in events and ms, last exported stream ID, gaps,
and the last Redis error while it retries.

Exit codes: 0 when the instance has a ring or a process, 1 when nothing of it is found.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import orjson
import psutil

from tools import ring_render, shmscan
from common.cliutil import Failure, Parser, UsageError, run_main
from common.shimstatus import config_notes, status_path

PROG = "ykshm status"
ROLES = ("run", "engine", "web", "shim", "sim-cluster", "export", "streams", "cr-operator", "pe-sim")
HEARTBEAT_STALE_SECONDS = 10.0


def parse_cmdline(cmdline: Sequence[str]) -> tuple[str, str] | None:
    """(role, instance name) of a `ykshm <role>` command line, or None if it is not one."""
    args = list(cmdline)
    role_at = None
    for i, arg in enumerate(args[:4]):
        base = os.path.basename(arg)
        if base == "ykshm":
            role_at = i + 1
            break
        if arg == "tools.cli" and i > 0 and args[i - 1] == "-m":
            role_at = i + 1
            break
    if role_at is None or role_at >= len(args) or args[role_at] not in ROLES:
        return None
    name = "ykshm"
    rest = args[role_at + 1 :]
    for i, arg in enumerate(rest):
        if arg == "--name" and i + 1 < len(rest):
            name = rest[i + 1]
        elif arg.startswith("--name="):
            name = arg[len("--name="):]
    return args[role_at], name


def find_processes(name: str) -> list[dict[str, Any]]:
    """Every process of instance NAME, with its web workers; sorted by role then pid.

    A role process started by `ykshm run` belongs to the run's instance (the run passes its
    --name on, but sim-cluster has none).
    """
    roles: dict[int, tuple[str, str, int]] = {}  # pid -> (role, name, ppid)
    procs: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["pid", "ppid", "cmdline"]):
        parsed = parse_cmdline(proc.info.get("cmdline") or [])
        if parsed is not None:
            roles[proc.pid] = (parsed[0], parsed[1], proc.info.get("ppid") or 0)
            procs[proc.pid] = proc

    def instance_of(pid: int) -> str:
        role, own, ppid = roles[pid]
        seen = {pid}
        while ppid in roles and ppid not in seen:
            seen.add(ppid)
            if roles[ppid][0] == "run":
                return roles[ppid][1]
            ppid = roles[ppid][2]
        return own

    found: list[dict[str, Any]] = []
    listed: set[int] = set()
    now = time.time()
    for pid in sorted(roles):
        if instance_of(pid) != name:
            continue
        role = roles[pid][0]
        proc = procs[pid]
        found.append(_describe(proc, role, now))
        listed.add(pid)
        if role != "web":
            continue
        try:
            children = proc.children(recursive=True)
        except psutil.Error:
            children = []
        for child in children:
            if child.pid in roles or child.pid in listed:
                continue
            listed.add(child.pid)
            found.append(_describe(child, "web-worker", now))
    order = {r: i for i, r in enumerate(ROLES)}
    found.sort(key=lambda p: (order.get(p["role"].removesuffix("-worker"), 99), p["role"], p["pid"]))
    return found


def _describe(proc: psutil.Process, role: str, now: float) -> dict[str, Any]:
    try:
        with proc.oneshot():
            created = proc.create_time()
            rss = proc.memory_info().rss
            status = proc.status()
    except psutil.Error:
        return {"pid": proc.pid, "role": role, "uptimeSeconds": None, "rssBytes": None,
                "alive": False, "health": "gone"}
    alive = status != psutil.STATUS_ZOMBIE
    return {
        "pid": proc.pid,
        "role": role,
        "uptimeSeconds": round(max(0.0, now - created), 1),
        "rssBytes": rss,
        "alive": alive,
        "health": "ok" if alive else "zombie",
    }


def ring_summary(name: str) -> dict[str, Any] | None:
    if not os.path.exists(shmscan.segment_path(name)):
        return None
    from tools.ring_cmd import collect_stat

    try:
        doc = collect_stat(name, interval=0.0)
    except Failure as exc:
        return {"error": str(exc)}
    keep = ("instanceUUID", "capacity", "lowestID", "highestID", "events", "fill", "shmBytes",
            "bytesPerEvent", "writerPID", "writerAlive", "heartbeatAgeSeconds", "internStrings")
    summary = {k: doc[k] for k in keep}
    summary["readers"] = [m["pid"] for m in doc["mappers"] if m["pid"] != doc["writerPID"]]
    return summary


def snapshot_summary(name: str) -> dict[str, Any] | None:
    if not os.path.exists(shmscan.segment_path(name, "state")):
        return None
    try:
        from shm import SnapshotReader
        from shm.errors import ShmError
    except ImportError as exc:
        return {"error": f"snapshot reader not available ({exc})"}
    try:
        reader = SnapshotReader.attach(name)
    except (ShmError, OSError) as exc:
        return {"error": f"cannot read {shmscan.segment_path(name, 'state')}: {exc}"}
    try:
        doc = reader.read()
        published = reader.published_nano()
    except (ShmError, OSError, ValueError) as exc:
        return {"error": f"cannot read the snapshot: {exc}"}
    finally:
        reader.close()
    if doc is None:
        return {"published": False}
    engine = doc.get("engine") or {}
    partitions = doc.get("partitions") or []
    apps = doc.get("applications") or {}
    nodes = doc.get("nodes") or {}
    return {
        "published": True,
        "ageSeconds": round((time.time_ns() - published) / 1e9, 3) if published else None,
        "enginePID": engine.get("pid"),
        "instanceUUID": engine.get("instanceUUID"),
        "cycles": engine.get("cycles"),
        "partitions": len(partitions),
        "applications": sum(len(v) for v in apps.values()) if isinstance(apps, dict) else 0,
        "nodes": sum(len(v) for v in nodes.values()) if isinstance(nodes, dict) else 0,
        "reloadError": engine.get("reloadError"),
        "configSource": engine.get("configSource"),
        "configWarnings": engine.get("configWarnings") or [],
    }


def collect(name: str) -> dict[str, Any]:
    processes = find_processes(name)
    ring = ring_summary(name)
    snapshot = snapshot_summary(name)
    hb = ring.get("heartbeatAgeSeconds") if ring else None
    writer = ring.get("writerPID") if ring else None
    for p in processes:
        if p["role"] in ("engine", "run") and p["alive"] and ring and "error" not in ring:
            if writer == p["pid"] or p["role"] == "engine":
                p["heartbeatAgeSeconds"] = hb
                if hb is None or hb > HEARTBEAT_STALE_SECONDS:
                    p["health"] = "stale"
    from export.status import StatusFileRefused, exporter_alive, read_file

    try:
        export = read_file(name)
    except StatusFileRefused as exc:  # planted: say so, never show what it claims
        export = {"refused": str(exc)}
    if export is not None and "refused" not in export:
        export["alive"] = exporter_alive(export)
    return {"name": name, "processes": processes, "ring": ring, "engine": snapshot, "export": export,
            "shim": _shim_status(name)}


def _shim_status(name: str) -> dict[str, Any] | None:
    """The shim's own status file (`ykshm shim status` reads the same), if it wrote one."""
    path = status_path(name)
    try:
        with open(path, "rb") as fh:
            doc = orjson.loads(fh.read())
    except (OSError, ValueError):
        return None
    return {k: doc.get(k) for k in ("state", "failure", "registrations", "recoveries", "stopped", "pid",
                                     "configMaps")}


def config_line(snap: dict[str, Any] | None, shim: dict[str, Any] | None) -> str:
    """One line: where the configuration in force comes from and what was refused or not applied."""
    cms = (shim or {}).get("configMaps")
    snap = snap or {}
    if cms:
        where = (f"ConfigMaps yunikorn-defaults/yunikorn-configs in namespace {cms['namespace']} "
                 f"(hot refresh {'on' if cms.get('hotRefresh') else 'off'})")
    else:
        where = "the engine's --config file" if snap.get("configSource") in (None, "file") \
            else str(snap["configSource"])
    parts = [f"config: {where}"]
    refused = (cms or {}).get("refused")
    if refused:
        when = time.strftime("%H:%M:%S", time.localtime(refused["time"]))
        parts.append(f"change refused at {when}, the previous configuration stays in force: "
                     f"{refused['reason']}")
    notes = config_notes(shim, snap)
    if notes:
        parts.append("not applied: " + "; ".join(notes))
    if (cms or {}).get("ignoredKeys"):
        parts.append("keys of no ykshm role, ignored: " + ", ".join(cms["ignoredKeys"]))
    if (cms or {}).get("ignoredChanges"):
        parts.append(f"{cms['ignoredChanges']} change(s) ignored (hot refresh off)")
    return "; ".join(parts) + "\n"


def _recoveries(n: int) -> str:
    return f"{n} recover{'y' if n == 1 else 'ies'}"


def _count(n: int, noun: str, plural_suffix: str = "s") -> str:
    return f"{n} {noun}{plural_suffix if n != 1 else ''}"


def render(doc: dict[str, Any]) -> str:
    fmt = ring_render
    out = [f"ykshm instance {doc['name']!r}\n\n"]
    if doc["processes"]:
        rows = []
        for p in doc["processes"]:
            health = p["health"]
            if p.get("heartbeatAgeSeconds") is not None:
                health += f" (heartbeat {fmt.format_duration(p['heartbeatAgeSeconds'])} ago)"
            rows.append([
                str(p["pid"]), p["role"],
                "-" if p["uptimeSeconds"] is None else fmt.format_duration(p["uptimeSeconds"]),
                "-" if p["rssBytes"] is None else fmt.format_bytes(p["rssBytes"]),
                health,
            ])
        out.append(fmt.table(rows, ["PID", "ROLE", "UPTIME", "RSS", "HEALTH"]))
    else:
        out.append("no processes\n")
    ring = doc["ring"]
    out.append("\nring: ")
    if ring is None:
        out.append(f"none ({shmscan.segment_path(doc['name'])} does not exist)\n")
    elif "error" in ring:
        out.append(ring["error"] + "\n")
    else:
        ids = "empty" if ring["lowestID"] is None else f"ids {ring['lowestID']}-{ring['highestID']}"
        bpe = ring["bytesPerEvent"]
        out.append(
            f"instance {ring['instanceUUID']}, {ids}, {ring['events']:,} of "
            f"{ring['capacity']:,} ({100 * ring['fill']:.1f}%), "
            f"{fmt.format_bytes(ring['shmBytes'])}"
            + ("" if bpe is None else f" ({bpe:.1f} B/event of capacity)")
            + (f", writer {ring['writerPID']}" if ring["writerPID"] else ", writer")
            + (" alive" if ring["writerAlive"] else " not running")
            + f", {_count(len(ring['readers']), 'reader process', 'es')}\n"
        )
    snap = doc["engine"]
    out.append("engine: ")
    if snap is None:
        out.append("no state snapshot\n")
    elif "error" in snap:
        out.append(snap["error"] + "\n")
    elif not snap["published"]:
        out.append("snapshot not yet published\n")
    else:
        age = snap["ageSeconds"]
        out.append(
            f"{_count(snap['partitions'], 'partition')}, "
            f"{_count(snap['applications'], 'application')}, "
            f"{_count(snap['nodes'], 'node')}"
            + ("" if age is None else f", snapshot {fmt.format_duration(age)} old")
            + ("" if snap.get("cycles") is None else f", {snap['cycles']} cycles")
            + "\n"
        )
        refused = snap.get("reloadError")
        if refused and not (doc.get("shim") or {}).get("configMaps"):  # else: the config line
            when = time.strftime("%H:%M:%S", time.localtime(refused["timeNano"] / 1e9))
            out.append(f"  config reload refused at {when} (the old configuration stays in force): "
                       f"{refused['message']}\n")
    shim = doc.get("shim")
    if (snap and "error" not in snap and snap.get("published")) or (shim or {}).get("configMaps"):
        out.append(config_line(snap, shim))
    if shim is not None:
        out.append(f"shim: {shim['state']}" + (f" ({shim['failure']})" if shim.get("failure") else "")
                   + f", {_count(shim.get('registrations') or 0, 'registration')}, "
                   + _recoveries(shim.get("recoveries") or 0)
                   + (", stopped" if shim.get("stopped") else "") + "\n")
    if doc.get("export") is not None:
        from export.status import summary_line

        refused = doc["export"].get("refused")
        out.append("export: " + (refused or summary_line(doc["export"])) + "\n")
    return "".join(out)


def _body(argv: Sequence[str]) -> int:
    parser = Parser(prog=PROG, description="Processes, ring and engine state of a ykshm instance.")
    parser.add_argument("--name", default="ykshm", help="instance name (default: ykshm)")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args(list(argv))
    problem = shmscan.check_name(args.name)
    if problem:
        raise UsageError(problem)
    doc = collect(args.name)
    nothing = not doc["processes"] and doc["ring"] is None and doc["engine"] is None and doc["export"] is None \
        and doc["shim"] is None
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(doc) + b"\n")
    elif not nothing:
        sys.stdout.write(render(doc))
    if nothing:
        raise Failure(f"no ykshm instance named {args.name!r} (no processes, no /dev/shm/"
                      f"{args.name}.* segments)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(PROG, _body, list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
