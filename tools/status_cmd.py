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

A process belongs to the instance of the nearest `ykshm run` above it, through any process in
between: a Streams PE pod's `ykshm pe-sim` is a child of sim-cluster's fork server, not of a role,
and used to fall back to the default name and show up under another instance. Without a `run`
above it, its own `--name` (default "ykshm") decides.

Expected roles: under a `ykshm run` every role it starts (sim-cluster, engine, shim, streams,
admission, web; export with `--export`; under `--manifests` the deployment's engine, shim,
admission and web as sim-cluster's process pods) and the web's `--workers` workers. A missing
role, a missing worker, a stale engine or a shim that is not Running is a problem: listed under
"problems" and exit 1, as `systemctl is-active` is non-zero for a degraded unit.

Exit codes: 0 when the instance is found and has no problem; 1 when it has problems or nothing
of it is found.
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
ROLES = ("run", "engine", "web", "shim", "admission", "sim-cluster", "export", "streams", "cr-operator", "pe-sim")
RUN_ROLES = ("sim-cluster", "engine", "shim", "streams", "admission", "web")
DEPLOYED_ROLES = ("sim-cluster", "engine", "shim", "admission", "web")
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
    """Every process of instance NAME, with its web workers; sorted by role then pid (see the
    module docstring for which instance a process belongs to)."""
    roles: dict[int, tuple[str, str]] = {}  # pid -> (role, name)
    procs: dict[int, psutil.Process] = {}
    parents: dict[int, int] = {}
    cmdlines: dict[int, list[str]] = {}
    for proc in psutil.process_iter(["pid", "ppid", "cmdline"]):
        parents[proc.pid] = proc.info.get("ppid") or 0
        parsed = parse_cmdline(proc.info.get("cmdline") or [])
        if parsed is not None:
            roles[proc.pid] = parsed
            procs[proc.pid] = proc
            cmdlines[proc.pid] = proc.info.get("cmdline") or []

    def instance_of(pid: int) -> str:
        ppid, seen = parents.get(pid, 0), {pid}
        while ppid > 1 and ppid not in seen:
            seen.add(ppid)
            if roles.get(ppid, ("",))[0] == "run":
                return roles[ppid][1]
            ppid = parents.get(ppid, 0)
        return roles[pid][1]

    found: list[dict[str, Any]] = []
    listed: set[int] = set()
    now = time.time()
    for pid in sorted(roles):
        if instance_of(pid) != name:
            continue
        role = roles[pid][0]
        proc = procs[pid]
        found.append(_describe(proc, role, now) | {"argv": cmdlines[pid][1:]})
        listed.add(pid)
        if role != "web":
            continue
        try:
            children = proc.children(recursive=True)
        except psutil.Error:
            children = []
        for child in children:
            if child.pid in roles or child.pid in listed or _is_resource_tracker(child):
                continue
            listed.add(child.pid)
            found.append(_describe(child, "web-worker", now))
    order = {r: i for i, r in enumerate(ROLES)}
    found.sort(key=lambda p: (order.get(p["role"].removesuffix("-worker"), 99), p["role"], p["pid"]))
    return found


def _is_resource_tracker(proc: psutil.Process) -> bool:
    """multiprocessing's resource tracker: a child of the web, not one of its --workers."""
    try:
        return any("resource_tracker" in arg for arg in proc.cmdline())
    except psutil.Error:
        return False


def _flag(argv: Sequence[str], flag: str) -> str | None:
    """The value of `flag` in a command line (`--flag V` or `--flag=V`), or None."""
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg[len(flag) + 1:]
    return None


def expected_roles(processes: list[dict[str, Any]]) -> tuple[str, ...]:
    """The roles a `ykshm run` of the instance starts (none without a run: each role then runs
    on its own, under systemd, and only what runs can be judged)."""
    run = next((p for p in processes if p["role"] == "run"), None)
    if run is None:
        return ()
    if _flag(run["argv"], "--manifests") is not None:
        return DEPLOYED_ROLES
    return RUN_ROLES + (("export",) if _flag(run["argv"], "--export") else ())


def problems_of(doc: dict[str, Any]) -> list[str]:
    """What makes the instance degraded (module docstring); empty when healthy."""
    processes = doc["processes"]
    present = {p["role"] for p in processes if p["alive"]}
    problems = [f"{role} is not running" for role in expected_roles(processes) if role not in present]
    problems += [f"{p['role']} (pid {p['pid']}) is {p['health']}" for p in processes if p["health"] != "ok"]
    for web in (p for p in processes if p["role"] == "web"):
        want = int(_flag(web["argv"], "--workers") or 2)
        have = sum(1 for p in processes if p["role"] == "web-worker" and p["alive"])
        if have < want:
            problems.append(f"web has {have} of its {want} workers")
    if "engine" in present and doc["ring"] is None:
        problems.append("the engine runs but its ring was not found")
    shim = doc.get("shim")
    standby = ((shim or {}).get("leaderElection") or {}).get("role") == "standby"
    if "shim" in present and shim is not None and not standby and \
            shim.get("state") not in ("Running", "Recovering", "Starting"):
        problems.append(f"shim is {shim.get('state')}" + (f": {shim['failure']}" if shim.get("failure") else ""))
    return problems


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


def ring_name(name: str, processes: list[dict[str, Any]]) -> str:
    """The ring the instance's engine writes: its own --name (under `ykshm run --manifests` the
    deployment names it, not the run), else the instance name."""
    engine = next((p for p in processes if p["role"] == "engine"), None)
    return (_flag(engine["argv"], "--name") or "ykshm") if engine is not None else name


def engine_shm_dir(processes: list[dict[str, Any]]) -> tuple[str, int] | None:
    """Where the instance's engine keeps its segments when not in /dev/shm, and the uid it runs
    as: its $YKSHM_SHM_DIR (a pod's in-memory emptyDir under `ykshm run --manifests`, where the
    shim's status file is too; the pod runs under a uid of its own, simcluster.sandbox). Of two
    scheduler pods (active/standby), the leader's."""
    from shm.segment import SHM_DIR_ENV

    found: list[tuple[str, int]] = []
    for p in processes:
        if p["role"] == "engine" and p["alive"]:
            try:
                proc = psutil.Process(p["pid"])
                shared = proc.environ().get(SHM_DIR_ENV)
                if not shared:
                    return None
                found.append((shared, proc.uids().effective))
            except psutil.Error:
                return None
    # active/standby (two scheduler pods): the leader's, whose shim says so in its status file
    ring = ring_name("ykshm", processes)
    return next((f for f in found if _role_in(os.path.join(f[0], f"{ring}.shim.json")) == "leader"),
                found[0] if found else None)


def _role_in(path: str) -> str | None:
    """The leader-election role a shim status file states (None: none, or unreadable)."""
    try:
        with open(path, "rb") as fh:
            return (orjson.loads(fh.read()).get("leaderElection") or {}).get("role")
    except (OSError, ValueError, AttributeError):
        return None


def collect(name: str) -> dict[str, Any]:
    processes = find_processes(name)
    shared = engine_shm_dir(processes)
    if shared:      # read the segments where the engine writes them (this CLI's own environment),
        from shm.segment import OWNER_ENV, SHM_DIR_ENV

        os.environ[SHM_DIR_ENV] = shared[0]
        os.environ[OWNER_ENV] = str(shared[1])  # owned by the engine this run started (found by pid)
    ring = ring_summary(ring_name(name, processes))
    snapshot = snapshot_summary(ring_name(name, processes))
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
    doc = {"name": name, "processes": processes, "ring": ring, "engine": snapshot, "export": export,
           "shim": _shim_status(ring_name(name, processes))}
    doc["problems"] = problems_of(doc)
    return doc


def _shim_status(name: str) -> dict[str, Any] | None:
    """The shim's own status file (`ykshm shim status` reads the same), if it wrote one."""
    path = status_path(name)
    try:
        with open(path, "rb") as fh:
            doc = orjson.loads(fh.read())
    except (OSError, ValueError):
        return None
    return {k: doc.get(k) for k in ("state", "failure", "registrations", "recoveries", "stopped", "pid",
                                     "configMaps", "leaderElection")}


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
        lead = shim.get("leaderElection")
        if lead:
            out.append(f"leader election: {lead.get('role')} of lease {lead.get('lease')} as "
                       f"{lead.get('identity')} (holder {lead.get('holder') or 'none'}, "
                       f"{_count(lead.get('leaseTransitions') or 0, 'transition')})\n")
    if doc.get("export") is not None:
        from export.status import summary_line

        refused = doc["export"].get("refused")
        out.append("export: " + (refused or summary_line(doc["export"])) + "\n")
    out.append("problems: " + ("; ".join(doc["problems"]) if doc["problems"] else "none") + "\n")
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
    if doc["problems"]:
        raise Failure(f"instance {args.name!r} is degraded: {'; '.join(doc['problems'])}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(PROG, _body, list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
