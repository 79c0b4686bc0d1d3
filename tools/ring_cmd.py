"""`ykshm ring`: create, inspect and feed the shared-memory event ring of one instance.

    ykshm ring create  --name NAME --capacity N [--request-capacity N] [--group G] [--force]
    ykshm ring rm      --name NAME [--force]
    ykshm ring publish --name NAME [--json]          < events.ndjson
    ykshm ring dump    --name NAME [--start S] [--count C] [--json]
    ykshm ring tail    --name NAME [-f] [-n N] [--json]
    ykshm ring stat    --name NAME [--json] [--interval SECONDS]
    ykshm ring verify  --name NAME [--all]

NAME is the prefix of the instance's segments (/dev/shm/NAME.events, NAME.requests, NAME.state);
it defaults to "ykshm", the name `ykshm engine` uses.

Exit codes: 0 ok; 2 usage (bad flag, bad number, bad input line); 1 failure (unknown ring, a live
writer in the way, a verify violation). Every error is one line on stderr, never a traceback.

`publish` never loses what it wrote: events are in the ring the moment `publish` returns, so a bad
line N stops the command after lines 1..N-1 are published, and the error says which ids they got.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from tools import ring_render, shmscan
from common.cliutil import Failure, Parser, UsageError, run_main

PROG = "ykshm ring"
DEFAULT_NAME = "ykshm"
CHUNK = 1000  # events per read when dumping/following


# -- argument types ---------------------------------------------------------------------------


def _int_type(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is less than {minimum}")
        if value > 2**63 - 1:
            raise argparse.ArgumentTypeError(f"{value} is too large")
        return value

    return parse


def _float_type() -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not 0 <= value <= 3600:
            raise argparse.ArgumentTypeError(f"{value} is out of range (0 to 3600)")
        return value

    return parse


# -- shm boundary -------------------------------------------------------------------------------


def _shm():
    """Import the ring lazily (the cffi extension), with a one-line failure if it is missing."""
    try:
        import shm
    except ImportError as exc:
        raise Failure(f"the shared-memory ring is not available ({exc})") from None
    return shm


def _check_name(name: str) -> None:
    problem = shmscan.check_name(name)
    if problem:
        raise UsageError(problem)


def _attach(name: str):
    """A RingReader on NAME, or a one-line Failure (unknown ring, not a ring)."""
    _check_name(name)
    shm = _shm()
    errors = shm.errors
    try:
        return shm.RingReader.attach(name)
    except errors.RingNotFoundError:
        raise Failure(
            f"no ring named {name!r} ({shmscan.segment_path(name)} does not exist)"
        ) from None
    except errors.RingFormatError as exc:
        raise Failure(f"ring {name!r} is not usable: {exc}") from None
    except errors.ShmError as exc:
        raise Failure(f"cannot attach to ring {name!r}: {exc}") from None
    except PermissionError:
        raise Failure(f"permission denied reading {shmscan.segment_path(name)}") from None


def _out(data: bytes | str) -> None:
    if isinstance(data, str):
        data = data.encode("utf-8", "replace")
    sys.stdout.buffer.write(data)


# -- create / rm ---------------------------------------------------------------------------------


def cmd_create(args: argparse.Namespace) -> int:
    _check_name(args.name)
    shm = _shm()
    errors = shm.errors
    path = shmscan.segment_path(args.name)
    if os.path.exists(path) and not args.force:
        raise Failure(f"ring {args.name!r} already exists ({path}); use --force to replace it")
    try:
        writer = shm.RingWriter.create(
            args.name, args.capacity, args.request_capacity, group=args.group
        )
    except errors.RingBusyError as exc:
        raise Failure(f"ring {args.name!r} has a live writer: {exc}") from None
    except errors.ShmError as exc:
        raise Failure(f"cannot create ring {args.name!r}: {exc}") from None
    except (ValueError, OverflowError) as exc:
        raise UsageError(str(exc)) from None
    except KeyError:
        raise UsageError(f"unknown group {args.group!r}") from None
    except PermissionError as exc:
        raise Failure(f"cannot create ring {args.name!r}: {exc.strerror}") from None
    try:
        uuid = writer.instance_uuid
        capacity = writer.capacity
    finally:
        writer.close()
    if args.json:
        _out(orjson.dumps({"name": args.name, "instanceUUID": uuid, "capacity": capacity,
                           "requestCapacity": args.request_capacity}) + b"\n")
    else:
        print(f"created ring {args.name}: instance {uuid}, capacity {capacity}, "
              f"request capacity {args.request_capacity}")
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    _check_name(args.name)
    segments = shmscan.instance_segments(args.name)
    if not segments:
        raise Failure(f"no ring named {args.name!r} (no /dev/shm/{args.name}.* segments)")
    events_path = shmscan.segment_path(args.name)
    writer_pid = 0
    if events_path in segments:
        try:
            reader = _attach(args.name)
        except Failure:
            reader = None  # not a usable ring: nothing can be writing it through our format
        if reader is not None:
            try:
                if reader.writer_alive():
                    writer_pid = reader.writer_pid
            finally:
                reader.close()
    if writer_pid and not args.force:
        raise Failure(
            f"ring {args.name!r} has a live writer (pid {writer_pid}); stop it first or use --force"
        )
    removed = []
    for path in segments:
        try:
            os.unlink(path)
            removed.append(path)
        except FileNotFoundError:
            pass
        except PermissionError:
            raise Failure(f"permission denied removing {path}") from None
    print("removed " + " ".join(removed))
    return 0


# -- publish ---------------------------------------------------------------------------------------


def cmd_publish(args: argparse.Namespace) -> int:
    from tools.ring_input import EventLineError, parse_line

    _check_name(args.name)
    shm = _shm()
    errors = shm.errors
    try:
        writer = shm.RingWriter.open_existing(args.name)
    except errors.RingNotFoundError:
        raise Failure(
            f"no ring named {args.name!r} ({shmscan.segment_path(args.name)} does not exist; "
            f"ykshm ring create)"
        ) from None
    except errors.RingBusyError as exc:
        raise Failure(f"ring {args.name!r} has a live writer, one writer at a time: {exc}") from None
    except errors.ShmError as exc:
        raise Failure(f"cannot open ring {args.name!r} for writing: {exc}") from None
    except PermissionError:
        raise Failure(f"permission denied writing {shmscan.segment_path(args.name)}") from None

    first = last = -1
    count = 0

    def done_so_far() -> str:
        if count == 0:
            return "nothing was published"
        noun = "event" if count == 1 else "events"
        verb = "was" if count == 1 else "were"
        ids = f"id {first}" if count == 1 else f"ids {first}-{last}"
        return f"{count} {noun} before it {verb} published ({ids})"

    try:
        publish = writer.publish
        for lineno, line in enumerate(sys.stdin.buffer, 1):
            try:
                kwargs = parse_line(line)
                if kwargs is None:
                    continue
                event_id = publish(**kwargs)
            except (EventLineError, ValueError, OverflowError, TypeError) as exc:
                raise UsageError(f"line {lineno}: {exc}; {done_so_far()}") from None
            except errors.ShmError as exc:
                raise Failure(f"line {lineno}: the ring refused the event: {exc}; "
                              f"{done_so_far()}") from None
            if count == 0:
                first = event_id
            last = event_id
            count += 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; {done_so_far().replace(' before it', '')}", file=sys.stderr)
        return 130
    finally:
        writer.close()
    if args.json:
        doc: dict[str, Any] = {"published": count}
        if count:
            doc.update(firstID=first, lastID=last)
        _out(orjson.dumps(doc) + b"\n")
    elif count:
        print(f"published {count} event{'s' if count != 1 else ''}: first id {first}, last id {last}")
    else:
        print("published 0 events")
    return 0


# -- dump / tail ----------------------------------------------------------------------------------


def _lost_message(name: str, lost: tuple[int, int]) -> str:
    first, last = lost
    n = last - first + 1
    return (f"{PROG}: lost {n} event{'s' if n != 1 else ''} (ids {first}-{last}): overwritten "
            f"before they were read")


def _emit(cursor, as_json: bool, max_events: int, name: str) -> int:
    """Read up to max_events from the cursor, print them; return how many."""
    if as_json:
        batch = cursor.poll_json(max_events)
        if batch.lost:
            sys.stdout.flush()
            print(_lost_message(name, batch.lost), file=sys.stderr)
        if batch.count:
            _out(batch.lines)
        return batch.count
    batch = cursor.poll(max_events)
    if batch.lost:
        sys.stdout.flush()
        print(_lost_message(name, batch.lost), file=sys.stderr)
    if batch.events:
        _out("".join(ring_render.format_event(e) + "\n" for e in batch.events))
    return len(batch.events)


def _emit_through(cursor, end: int, as_json: bool, name: str) -> None:
    """Print the events from the cursor up to id `end`, CHUNK at a time (stops early if the
    ring has nothing more)."""
    while cursor.next_id <= end:
        if _emit(cursor, as_json, min(CHUNK, end - cursor.next_id + 1), name) == 0:
            break


def cmd_dump(args: argparse.Namespace) -> int:
    reader = _attach(args.name)
    try:
        bounds = reader.bounds()
        if bounds is None:
            return 0
        lowest, highest = bounds
        start = lowest if args.start is None else args.start
        if start > highest:
            print(f"{PROG}: no events from id {start} (highest is {highest})", file=sys.stderr)
            return 0
        if start < lowest:
            print(f"{PROG}: ids {start}-{lowest - 1} are no longer retained; starting at {lowest}",
                  file=sys.stderr)
            start = lowest
        end = highest if args.count is None else min(highest, start + args.count - 1)
        _emit_through(reader.cursor(start), end, args.json, args.name)
        sys.stdout.flush()
    finally:
        reader.close()
    return 0


class _Follower:
    """The state of `tail -f`: one reader and cursor, replaced when the instance changes."""

    def __init__(self, name: str, reader) -> None:
        self.name = name
        self.reader = reader

    def reattach(self, poll_interval: float) -> None:
        old_uuid = self.reader.instance_uuid
        self.reader.close()
        said_gone = False
        shm = _shm()
        errors = shm.errors
        while True:
            try:
                reader = shm.RingReader.attach(self.name)
            except (errors.ShmError, OSError):
                reader = None
            if reader is not None:
                if reader.instance_uuid != old_uuid and not reader.instance_changed():
                    break
                reader.close()
            if not said_gone:
                print(f"{PROG}: ring {self.name!r}: instance {old_uuid} is gone; waiting for the "
                      f"new one", file=sys.stderr)
                said_gone = True
            time.sleep(max(poll_interval, 0.05))
        self.reader = reader
        print(f"{PROG}: ring {self.name!r}: new instance {reader.instance_uuid} (was {old_uuid}); "
              f"re-attached", file=sys.stderr)


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reading end was closed (poll reports POLLERR)."""
    try:
        p = select.poll()
        p.register(sys.stdout.fileno(), 0)
        return any(ev & (select.POLLERR | select.POLLNVAL) for _, ev in p.poll(0))
    except (OSError, ValueError):
        return False


def cmd_tail(args: argparse.Namespace) -> int:
    reader = _attach(args.name)
    follower = _Follower(args.name, reader)
    try:
        bounds = reader.bounds()
        if bounds is None:
            start = 0
        else:
            lowest, highest = bounds
            start = max(lowest, highest - args.lines + 1)
        if bounds is not None and args.lines > 0:
            cursor = reader.cursor(start)
            _emit_through(cursor, bounds[1], args.json, args.name)
            start = cursor.next_id
        elif bounds is not None:
            start = bounds[1] + 1
        sys.stdout.flush()
        if not args.follow:
            return 0
        cursor = reader.cursor(start)
        next_check = time.monotonic() + 0.2
        while True:
            n = _emit(cursor, args.json, CHUNK, args.name)
            if n:
                sys.stdout.flush()
                continue
            now = time.monotonic()
            if now >= next_check:
                # idle: has the instance changed, or has our reader gone (`| head`)?
                next_check = now + 0.2
                if _stdout_closed():
                    return 0
                if follower.reader.instance_changed():   # superseded, replaced or removed
                    follower.reattach(args.poll)
                    bounds = follower.reader.bounds()
                    cursor = follower.reader.cursor(bounds[0] if bounds else 0)
                    continue
            time.sleep(args.poll)
    except KeyboardInterrupt:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            pass
        return 0
    finally:
        follower.reader.close()


# -- stat ------------------------------------------------------------------------------------------


def _next_id(reader) -> int:
    bounds = reader.bounds()
    return 0 if bounds is None else bounds[1] + 1


def collect_stat(name: str, interval: float = 0.5) -> dict[str, Any]:
    """Everything `ring stat` shows, as one JSON-ready dict (also used by `ykshm status`)."""
    reader = _attach(name)
    try:
        t0 = time.perf_counter()
        n0 = _next_id(reader)
        if interval > 0:
            time.sleep(interval)
        n1 = _next_id(reader)
        dt = time.perf_counter() - t0
        rate = (n1 - n0) / dt if interval > 0 and dt > 0 else None
        raw = reader.stats_dict()
    finally:
        reader.close()
    segments = shmscan.instance_segments(name)
    events_path = shmscan.segment_path(name)
    shm_bytes = sum(shmscan.resident_bytes(p) for p in segments
                    if not p.endswith(".state"))
    count = raw["events_retained"]
    capacity = raw["capacity"]
    heartbeat = raw["heartbeat_nano"]
    doc: dict[str, Any] = {
        "name": name,
        "instanceUUID": raw["instance_uuid"],
        "capacity": capacity,
        "lowestID": raw["lowest_id"],
        "highestID": raw["highest_id"],
        "events": count,
        "fill": count / capacity,
        "eventsPerSecond": rate,
        "internStrings": raw["strings_used"] - raw["pairs_used"],
        "internPairs": raw["pairs_used"],  # events with a message and a resource share one
        "internStringsCapacity": raw["strings_capacity"],
        "internBytes": raw["intern_bytes_used"],
        "internBytesCapacity": raw["intern_bytes_capacity"],
        "shmBytes": shm_bytes,
        "shmFileBytes": sum(shmscan.file_size(p) for p in segments),
        "bytesPerEvent": shm_bytes / capacity,  # per slot: the cost when full
        "bytesPerRetainedEvent": shm_bytes / count if count else None,
        "writerPID": raw["writer_pid"],
        "writerAlive": raw["writer_alive"],
        "heartbeatAgeSeconds": (time.time_ns() - heartbeat) / 1e9 if heartbeat else None,
        "segments": segments,
        "mappers": [
            {"pid": m.pid, "name": m.name, "deleted": m.deleted}
            for m in shmscan.mappers(events_path)
        ],
        "counters": raw,
    }
    return doc


def _pct(a: int, b: int) -> str:
    return f"{a} / {b} ({100.0 * a / b:.1f}%)"


def render_stat(doc: dict[str, Any]) -> str:
    fmt = ring_render
    c = doc["counters"]
    if doc["lowestID"] is None:
        id_range = "empty"
    else:
        id_range = f"{doc['lowestID']} - {doc['highestID']}"
    rate = doc["eventsPerSecond"]
    hb = doc["heartbeatAgeSeconds"]
    pairs = [
        ("ring", f"{doc['name']} ({', '.join(doc['segments'])})"),
        ("instance", doc["instanceUUID"]),
        ("created", fmt.format_timestamp(c["created_nano"])),
        ("capacity", f"{doc['capacity']:,}"),
        ("ids", id_range),
        ("events", f"{doc['events']:,} ({100.0 * doc['fill']:.1f}% full)"),
        ("events/s", "-" if rate is None else f"{rate:,.0f}"),
        ("intern strings", _pct(doc["internStrings"] + doc["internPairs"],
                                doc["internStringsCapacity"])),
        ("intern bytes", _pct(doc["internBytes"], doc["internBytesCapacity"])),
        ("shm in use", f"{fmt.format_bytes(doc['shmBytes'])} ({doc['shmBytes']:,} bytes), "
                       f"{doc['bytesPerEvent']:.1f} bytes/event of capacity"),
        ("writer", (f"pid {doc['writerPID']} " if doc["writerPID"] else "")
                   + ("alive" if doc["writerAlive"] else "not running")
                   + ("" if hb is None else f", heartbeat {fmt.format_duration(hb)} ago")),
    ]
    mappers = doc["mappers"]
    if mappers:
        pairs.append(("mapped by", ", ".join(
            f"{m['pid']} ({m['name']}{', old copy' if m['deleted'] else ''})" for m in mappers)))
    else:
        pairs.append(("mapped by", "no other process"))
    pairs.append(("counters", ", ".join(f"{label} {c[key]:,}" for label, key in _COUNTERS)))
    return fmt.key_values(pairs)


_COUNTERS = (
    ("written", "events_written"),
    ("interned", "strings_interned"),
    ("released", "strings_released"),
    ("intern hits", "intern_hits"),
    ("intern-full drops", "intern_full_drops"),
    ("strings cut", "strings_cut"),
    ("messages cut", "messages_cut"),
    ("requests written", "requests_written"),
    ("delivered", "requests_delivered"),
    ("overwritten", "requests_overwritten"),
)


def cmd_stat(args: argparse.Namespace) -> int:
    doc = collect_stat(args.name, args.interval)
    if args.json:
        _out(orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS, default=str) + b"\n")
    else:
        _out(render_stat(doc))
    return 0


# -- verify ----------------------------------------------------------------------------------------


def cmd_verify(args: argparse.Namespace) -> int:
    reader = _attach(args.name)
    errors = _shm().errors
    try:
        report = reader.verify(max_lines=100_000 if args.all else 10)
    except errors.ShmError as exc:
        raise Failure(f"cannot verify ring {args.name!r}: {exc}") from None
    finally:
        reader.close()
    caveats = report.caveats
    if report.ok:
        print(f"ok: {report.records} records, {report.strings} strings")
        for caveat in caveats:
            print(f"{PROG}: note: {caveat}", file=sys.stderr)
        return 0
    note = f" [{caveats[0]}]" if caveats else ""
    n = report.total
    if args.all:
        for v in report:
            print(v)
        sys.stdout.flush()
        raise Failure(f"{n} violation{'s' if n != 1 else ''} in ring {args.name!r}{note}")
    more = f" (and {n - 1} more; --all lists them)" if n > 1 else ""
    raise Failure(f"ring {args.name!r}: {report[0]}{more}{note}")


# -- parser ----------------------------------------------------------------------------------------


def build_parser() -> Parser:
    common = Parser(add_help=False)
    common.add_argument("--name", default=DEFAULT_NAME,
                        help="instance name: segments /dev/shm/NAME.* (default: ykshm)")
    parser = Parser(prog=PROG, description="Create, inspect and feed shared-memory event rings.")
    sub = parser.add_subparsers(dest="command", metavar="<subcommand>")
    sub.required = True

    p = sub.add_parser("create", parents=[common], help="create an empty ring",
                       description="Create NAME.events (ring) and NAME.requests (request store).")
    p.add_argument("--capacity", type=_int_type(1), required=True,
                   help="events the ring retains")
    p.add_argument("--request-capacity", type=_int_type(1), default=1000,
                   help="request-event store slots (default 1000)")
    p.add_argument("--group", default=None,
                   help="make the segments readable by this group (mode 0640)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing ring whose writer is not running")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_create)

    p = sub.add_parser("rm", parents=[common], help="remove an instance's segments",
                       description="Remove /dev/shm/NAME.* (events, requests, state).")
    p.add_argument("--force", action="store_true", help="remove even if its writer is alive")
    p.set_defaults(func=cmd_rm)

    p = sub.add_parser("publish", parents=[common], help="publish NDJSON events from stdin",
                       description="Read one REST event JSON object per line from stdin (no "
                                   "'id'; the ring assigns it) and publish each.")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_publish)

    p = sub.add_parser("dump", parents=[common], help="print retained events",
                       description="Print retained events from --start (default: lowest).")
    p.add_argument("--start", type=_int_type(0), default=None, help="first event id")
    p.add_argument("--count", type=_int_type(1), default=None,
                   help="at most this many events (default: all retained)")
    p.add_argument("--json", action="store_true",
                   help="NDJSON: one REST event JSON object (with id) per line")
    p.set_defaults(func=cmd_dump)

    p = sub.add_parser("tail", parents=[common], help="print the newest events, -f to follow",
                       description="Print the last N events; with -f keep following new ones "
                                   "(lost ranges and instance changes are reported on stderr).")
    p.add_argument("-f", "--follow", action="store_true", help="follow new events until Ctrl-C")
    p.add_argument("-n", "--lines", type=_int_type(0), default=10,
                   help="how many past events first (default 10)")
    p.add_argument("--json", action="store_true", help="NDJSON output")
    p.add_argument("--poll", type=_float_type(), default=0.01,
                   help="seconds between polls when idle (default 0.01)")
    p.set_defaults(func=cmd_tail)

    p = sub.add_parser("stat", parents=[common], help="ring statistics",
                       description="Instance, ids, fill, rate, interning, memory, writer, mappers.")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.add_argument("--interval", type=_float_type(), default=0.5,
                   help="seconds to sample the event rate over (default 0.5; 0 = skip)")
    p.set_defaults(func=cmd_stat)

    p = sub.add_parser("verify", parents=[common], help="check the ring's invariants",
                       description="Run shm's invariant check: exit 0 'ok: N records, M strings' "
                                   "or exit 1 naming the first violation.")
    p.add_argument("--all", action="store_true", help="list every violation")
    p.set_defaults(func=cmd_verify)
    return parser


def _body(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    return args.func(args)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return run_main(PROG, _body, argv)
    except BrokenPipeError:
        pass
    finally:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            # stdout's reader went away (| head): silence the flush at interpreter exit too
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
