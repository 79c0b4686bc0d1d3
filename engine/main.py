"""`ykshm engine --config FILE [--name NAME] [--socket PATH]`: the scheduler process.

Creates the event ring (`NAME.events`, capacity `service.event.ringBufferCapacity`) and request
store (`NAME.requests`, `requestStoreCapacity`), the state snapshot (`NAME.state`), and the SI
socket (default `RUNTIME/NAME.sock` in the private runtime directory, mode 0600); then runs the scheduler under trio with
every task in one nursery. With NOTIFY_SOCKET set it sends READY=1 once the socket listens and
the ring exists, STATUS= lines, and WATCHDOG=1 from the scheduling loop.

SIGTERM / SIGINT: clean shutdown. The socket file is removed. The ring and snapshot segments are
kept (unless `--unlink-on-exit`): readers (the web) keep serving the event history and the last
state while the engine restarts, and the next engine marks the old ring superseded when it
creates its own, which is how readers learn of the restart. SIGHUP re-reads the queue
configuration (partitions, queues, limits); service settings change only on restart. Once a shim
has sent its configuration (ConfigMaps, SI UpdateConfiguration) that is in force and SIGHUP is
ignored (logged); the file still gives what is fixed at start (ring and request store sizes).

Exit codes: 0 clean shutdown, 2 bad command line or configuration (one line naming key and
value), 1 any other failure to start (one line).
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Sequence

import trio

from common import logsetup
from common.cliutil import Failure, Parser, UsageError, run_main
from engine.config import ConfigError, load_config
from engine.events_out import RingEventSink
from engine.scheduler import Scheduler
from engine.sdnotify import Notifier
from engine.service import EngineService
from engine.snapshot import snapshot_size
from si.protocol import default_socket_path

log = logging.getLogger("ykshm.engine")


def _parser() -> Parser:
    p = Parser(prog="ykshm engine", description="Run the scheduler engine.")
    p.add_argument("--config", help="YAML configuration file (queues.yaml + service.event)")
    p.add_argument("--name", default="ykshm", help="instance name (shared-memory prefix)")
    p.add_argument("--socket", help="SI socket path (default RUNTIME/NAME.sock in the private runtime directory)")
    p.add_argument("--group", help="group that may read the shared memory (mode 0640)")
    p.add_argument("--snapshot-size", type=int, default=None,
                   help="size of NAME.state in bytes (default: from the partitions and "
                        "service.maxRetainedApplications, engine.snapshot.snapshot_size)")
    p.add_argument("--unlink-on-exit", action="store_true",
                   help="remove the ring and snapshot segments on shutdown")
    logsetup.add_flags(p)
    return p


def _body(argv: Sequence[str]) -> int:
    args = _parser().parse_args(list(argv))
    logsetup.configure_from(args)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    socket_path = args.socket or default_socket_path(args.name)
    from shm import RingWriter, ShmError, SnapshotWriter
    settings = config.event
    try:
        ring = RingWriter.create(args.name, max(1, settings.ring_buffer_capacity),
                                 settings.request_store_capacity, group=args.group)
    except (ShmError, OSError, ValueError) as exc:
        raise Failure(f"cannot create the event ring {args.name!r}: {exc}") from None
    try:
        size = args.snapshot_size or snapshot_size(len(config.partitions), config.max_retained_apps)
        snap = SnapshotWriter.create(args.name, size, group=args.group)
    except (ShmError, OSError, ValueError) as exc:
        ring.close()
        raise Failure(f"cannot create the snapshot {args.name!r}: {exc}") from None
    sink = RingEventSink(ring, tracking=settings.tracking_active,
                         requests_enabled=settings.request_events_enabled
                         and settings.request_store_capacity > 0)
    scheduler = Scheduler(config, sink, instance_uuid=ring.instance_uuid, ring_name=args.name)
    notifier = Notifier()
    service = EngineService(scheduler, socket_path, ring=ring, snapshot=snap, notifier=notifier)
    try:
        trio.run(_run, service, args.config)
    except (OSError, BaseExceptionGroup) as exc:
        first = _first_oserror(exc)
        if first is None:
            raise
        raise Failure(f"SI socket {socket_path}: {first}") from None
    finally:
        notifier.stopping()
        ring.close()
        snap.close()
        if args.unlink_on_exit:
            ring.unlink()
            snap.unlink()
    return 0


def _first_oserror(exc: BaseException) -> OSError | None:
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _first_oserror(inner)
            if found is not None:
                return found
    return None


async def _run(service: EngineService, config_path: str | None) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(service.run)
            async for signum in signals:
                if signum == signal.SIGHUP and service.scheduler.config_origin != "file":
                    log.warning("SIGHUP ignored: the configuration comes from %s (its "
                                "ConfigMaps), not from the file",
                                service.scheduler.config_origin)
                    continue
                if signum == signal.SIGHUP:
                    try:
                        service.scheduler.reload(load_config(config_path))
                        service.wake()
                        log.info("configuration reloaded")
                    except ConfigError as exc:
                        log.error("reload refused: %s", exc)
                        service.scheduler.refuse_reload(str(exc))
                        service.wake()
                    continue
                log.info("signal %d: shutting down", signum)
                nursery.cancel_scope.cancel()
                break


def main(argv: Sequence[str] | None = None) -> int:
    return run_main("ykshm engine", _body, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
