"""`ykshm export --redis URL [--name NAME] [--maxlen N | --max-age DURATION] [--state-interval S]`.

No secret on the command line: the password comes from a file, a systemd credential or the
environment, and a `--redis` URL carrying one is refused (`export.redisauth`).

Start-up checks, each one line on stderr and exit 2: a URL that is not redis://host[:port][/db], a
server that cannot be reached (refused, timed out, a Cluster that is down), a refused password,
and a key of ours holding another type (the stream key must be a stream or absent, the others
hashes or absent). Once running, the same failures are retried with backoff and shown in the log
and in `ykshm status`; the ring keeps the events meanwhile.

The process is one plain loop (no threads, no event loop): read the ring, send a batch, repeat.
SIGTERM / SIGINT end it after the batch in flight; the status file then says "stopped".
It runs with `--nice 10` by default, like the web readers: it yields the CPU to the engine;
`--cpu-idle` (SCHED_IDLE) goes further: it never takes CPU time the engine wants (measured by
`ykshm bench export`), at the price of lag while the host is saturated.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
from collections.abc import Sequence

from common import logsetup
from common.cliutil import Failure, Parser, UsageError, run_main

PROG = "ykshm export"
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
KEY_TYPES = (("events", "stream"), ("instances", "hash"), ("state", "hash"), ("exporter", "hash"))


def parse_duration(text: str) -> float:
    """Seconds of "90", "90s", "15m", "12h", "7d"; ValueError otherwise."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not match:
        raise ValueError(text)
    return float(match.group(1)) * _UNITS[match.group(2)]


def _parser() -> Parser:
    p = Parser(prog=PROG, description="Append the event ring and the state snapshot to Redis Streams.")
    p.add_argument("--redis", metavar="URL",
                   help="redis[s]://[user@]host[:port][/db] (a Cluster node works too); no password "
                        "here (ps shows it): see --redis-password-file. Default: --redis-url-file, "
                        "else $CREDENTIALS_DIRECTORY/redis-url, else $YKSHM_REDIS_URL")
    p.add_argument("--redis-url-file", metavar="FILE",
                   help="read the whole Redis URL (which may carry the password) from FILE")
    p.add_argument("--redis-password-file", metavar="FILE",
                   help="read the Redis password from FILE (else $CREDENTIALS_DIRECTORY/"
                        "redis-password, else $REDISCLI_AUTH)")
    p.add_argument("--redis-ca", metavar="FILE",
                   help="CA certificate(s) that sign a rediss:// server's certificate")
    p.add_argument("--name", default="ykshm", help="instance name, prefix of the /dev/shm segments")
    p.add_argument("--redis-name", metavar="NAME",
                   help="the instance name of the keys in Redis (default --name): the replicas of "
                        "an active/standby pair export under one name, with --leader-only")
    p.add_argument("--leader-only", action="store_true",
                   help="export the engine only once a shim registered with it (the leader's): a "
                        "standby's idle engine writes nothing, and the pair's history is one stream")
    p.add_argument("--maxlen", type=int, default=0, metavar="N",
                   help="keep about N entries (approximate trimming; 0: no limit)")
    p.add_argument("--max-age", default="0", metavar="DURATION",
                   help="drop entries whose event is older than this (90s, 15m, 12h, 7d; 0: keep)")
    p.add_argument("--state-interval", type=float, default=1.0, metavar="SECONDS",
                   help="export the state snapshot on change at most this often (default 1; 0: never)")
    p.add_argument("--wait-replicas", type=int, default=0, metavar="N",
                   help="count a batch as exported only once N replicas acknowledged it (Redis WAIT; "
                        "default 0: the master's reply is enough)")
    p.add_argument("--wait-timeout", type=int, default=1000, metavar="MS",
                   help="how long WAIT waits for the replicas before the batch is retried (default 1000)")
    p.add_argument("--batch", type=int, default=2000, help="events per pipelined round trip (default 2000)")
    p.add_argument("--nice", type=int, default=10, help="niceness of the exporter (default 10)")
    p.add_argument("--cpu-idle", action="store_true",
                   help="run in the SCHED_IDLE class: only on CPU time nothing else wants (the engine "
                        "never shares a core with it; the lag grows while the host is saturated)")
    logsetup.add_flags(p)
    return p


def options_from(argv: Sequence[str]):
    """The validated ExportOptions of a command line (UsageError with one line otherwise)."""
    from shm.segment import validate_name

    from .exporter import ExportOptions
    from .keys import Keys
    from .redisauth import AuthProblem, resolve
    from .redisconn import RedisProblem, check_url

    args = _parser().parse_args(list(argv))
    try:
        validate_name(args.name)
    except ValueError:
        raise UsageError(f"--name {args.name!r}: not a valid instance name") from None
    if args.redis_name is not None:
        try:
            validate_name(args.redis_name)
        except ValueError:
            raise UsageError(f"--redis-name {args.redis_name!r}: not a valid instance name") from None
    flag, redis_name = ("--redis-name", args.redis_name) if args.redis_name is not None else ("--name", args.name)
    if not Keys.hash_tag_safe(redis_name):
        raise UsageError(f"{flag} {redis_name!r}: no '{{' or '}}' in a name in Redis (its keys share "
                         f"the hash tag {{NAME}}, so a Redis Cluster keeps them in one slot)")
    try:
        url, auth = resolve(args.redis, args.redis_password_file, args.redis_ca,
                            url_file=args.redis_url_file)
        check_url(url)
    except (AuthProblem, RedisProblem) as exc:
        raise UsageError(str(exc)) from None
    try:
        max_age = parse_duration(args.max_age)
    except ValueError:
        raise UsageError(f"--max-age {args.max_age!r}: expected a duration such as 90s, 15m, 12h or 7d") from None
    if args.maxlen < 0:
        raise UsageError(f"--maxlen {args.maxlen}: must be >= 0")
    if args.maxlen and max_age:
        raise UsageError("--maxlen and --max-age: choose one")
    if args.state_interval < 0:
        raise UsageError(f"--state-interval {args.state_interval}: must be >= 0")
    if args.wait_replicas < 0:
        raise UsageError(f"--wait-replicas {args.wait_replicas}: must be >= 0")
    if args.wait_timeout < 1:
        raise UsageError(f"--wait-timeout {args.wait_timeout}: must be >= 1 (ms)")
    if not 1 <= args.batch <= 100000:
        raise UsageError("--batch must be between 1 and 100000")
    if not 0 <= args.nice <= 19:
        raise UsageError("--nice must be between 0 and 19")
    options = ExportOptions(name=args.name, url=url, maxlen=args.maxlen, max_age=max_age,
                            state_interval=args.state_interval, batch=args.batch, auth=auth,
                            wait_replicas=args.wait_replicas, wait_timeout_ms=args.wait_timeout,
                            redis_name=args.redis_name or "", leader_only=args.leader_only)
    return options, args


def preflight(url: str, name: str, auth=None):
    """Connect and check our keys' types; the open Link, or UsageError naming the problem."""
    from .keys import Keys
    from .redisconn import Link, RedisProblem, describe, redact

    keys = Keys.for_instance(name)
    try:
        link = Link.open(url, keys.events, auth)
    except RedisProblem as exc:
        raise UsageError(f"{redact(url)}: {exc}") from None
    try:
        for attr, wanted in KEY_TYPES:
            key = getattr(keys, attr)
            kind = link.node.type(key)
            kind = kind.decode() if isinstance(kind, bytes) else str(kind)
            if kind not in ("none", wanted):
                raise UsageError(f"{redact(url)}: key {key} holds a {kind}, not a {wanted}; "
                                 f"delete it or use another --name")
    except UsageError:
        link.close()
        raise
    except Exception as exc:  # redis errors of the TYPE calls (NOAUTH on some servers, CLUSTERDOWN)
        link.close()
        raise UsageError(f"{redact(url)}: {describe(exc)}") from None
    return link


def _body(argv: Sequence[str]) -> int:
    options, args = options_from(argv)
    nice, cpu_idle = args.nice, args.cpu_idle
    link = preflight(options.url, options.redis_name or options.name, options.auth)
    from .exporter import CorruptGeneration, Exporter

    logsetup.configure_from(args)
    if nice:
        try:
            os.nice(nice)
        except OSError:
            pass
    if cpu_idle:
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        except OSError as exc:
            logging.getLogger("ykshm.export").warning("--cpu-idle: %s", exc.strerror)
    stopping = []

    def on_signal(signum, frame):  # noqa: ARG001 - signal handler signature
        stopping.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log = logging.getLogger("ykshm.export")
    log.info("exporting instance %r to %s", options.name, link.where)
    try:
        Exporter(options, link).run(lambda: bool(stopping))
    except CorruptGeneration as exc:
        raise Failure(str(exc)) from None
    except Exception as exc:  # a bug: its traceback goes to the log, the user gets one line
        log.exception("export stopped by a bug")
        raise Failure(f"internal error: {exc}") from None
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(PROG, _body, list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    raise SystemExit(main())
