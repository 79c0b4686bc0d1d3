"""Process side of `ykshm web`: one listening socket, N hypercorn trio workers, a supervisor.

Resource handling
    The supervisor (the `ykshm web` process) creates the listening socket (or takes `fd://N` from
    systemd), sets TCP_USER_TIMEOUT on it — accepted connections inherit it, so a peer that stops
    reading is reset by the kernel after `stall_timeout` seconds of unacknowledged/zero-window data
    and its stream's disconnect watcher fires — and creates the shared segment `/dev/shm/NAME.web`
    before spawning workers (multiprocessing "spawn"; they inherit the socket as hypercorn does).
    It unlinks the segment when it exits.

Error handling
    hypercorn's own supervisor stops every worker when one dies; ours does not: a worker that dies
    (even by SIGKILL) has its stream slots freed and is replaced, while the other workers keep
    accepting on the shared socket. Workers that keep dying within a second of starting (5 in a
    row) make the supervisor give up with exit 1. SIGINT/SIGTERM: the shared shutdown event is set,
    each worker ends its streams with a last line, hypercorn closes connections gracefully
    (graceful_timeout), and stragglers are terminated.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from functools import partial
from multiprocessing import get_context
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess

from hypercorn.config import Config, Sockets

from common import logsetup
from common.http1.listener import tune

from .app import App, WebOptions
from .heap import keep_freed_heap
from .segment import WebSegment
from .settings import stream_slots

log = logging.getLogger("ykshm.web")


LOG_ENV = "YKSHM_WEB_LOG"


def setup_logging(level: str | None = None, fmt: str | None = None) -> None:
    """The common line format (common.logsetup) at --log-level/--log-format. The spawned workers
    get no argv of ours: the parent leaves both in $YKSHM_WEB_LOG, which they inherit."""
    if level is None:
        level, _, fmt = os.environ.get(LOG_ENV, "INFO,text").partition(",")
    else:
        os.environ[LOG_ENV] = f"{level},{fmt}"
    logsetup.configure("web", level, fmt or "text")


def build_config(bind: str, workers: int, *, graceful_timeout: float = 3.0,
                 keep_alive_timeout: float = 5.0) -> Config:
    config = Config()
    config.bind = [bind]
    config.worker_class = "trio"
    config.workers = workers
    config.graceful_timeout = graceful_timeout
    config.h11_max_incomplete_size = 64 * 1024
    config.keep_alive_timeout = keep_alive_timeout
    config.backlog = 1024
    config.include_server_header = False
    return logsetup.hypercorn_loggers(config)


def create_sockets(config: Config, stall_timeout: float) -> Sockets:
    """hypercorn's sockets for the bind, with TCP_USER_TIMEOUT (inherited by accepted sockets)."""
    workers, config.workers = config.workers, 1  # no SO_REUSEPORT: one socket shared, not N
    try:
        sockets = config.create_sockets()
    finally:
        config.workers = workers
    tune(sockets, stall_timeout)
    return sockets


def worker_main(options: WebOptions, config: Config, sockets: Sockets, shutdown_event) -> None:
    """Entry point of one spawned worker process."""
    import trio

    from .listener import worker_serve

    setup_logging()
    if options.nice > 0:
        # Readers yield the CPU to the engine: a flooded web must not slow the writer.
        try:
            os.nice(options.nice)
        except OSError:
            pass
    keep_freed_heap()
    for sock in sockets.insecure_sockets:
        sock.listen(config.backlog)
    app = App(options)

    parent = os.getppid()

    async def shutdown_trigger() -> None:
        # The supervisor asks (SIGINT/SIGTERM), or it died (SIGKILL): no orphan keeps serving.
        while not shutdown_event.is_set() and os.getppid() == parent:
            await trio.sleep(0.1)
        app.stopping.set()  # streams end themselves with a last line, then hypercorn closes
        await trio.sleep(0.05)

    trio.run(
        partial(
            worker_serve,
            app,
            config,
            options.limits,
            sockets=sockets,
            shutdown_trigger=shutdown_trigger,
            tls=options.tls.context() if options.tls is not None else None,
        )
    )


class Supervisor:
    """Spawns, watches and replaces workers; owns the socket and the shared segment."""

    def __init__(self, options: WebOptions, config: Config, sockets: Sockets, workers: int) -> None:
        self.options = options
        self.config = config
        self.sockets = sockets
        self.workers = workers
        self.ctx = get_context("spawn")
        self.shutdown_event = self.ctx.Event()
        self.processes: dict[BaseProcess, float] = {}  # worker -> when it was started (monotonic)
        self.active = True
        self.quick_deaths = 0

    def _spawn(self) -> None:
        process = self.ctx.Process(
            target=worker_main,
            kwargs={
                "options": self.options,
                "config": self.config,
                "sockets": self.sockets,
                "shutdown_event": self.shutdown_event,
            },
            name="ykshm-web-worker",
        )
        process.daemon = True
        process.start()
        self.processes[process] = time.monotonic()

    def _stop(self, *_args: object) -> None:
        self.active = False
        self.shutdown_event.set()

    def run(self, segment: WebSegment) -> int:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for _ in range(self.workers):
            self._spawn()
        signal.signal(signal.SIGINT, self._stop)
        signal.signal(signal.SIGTERM, self._stop)
        exit_code = 0
        while self.active:
            wait([p.sentinel for p in self.processes], timeout=0.5)
            for process in list(self.processes):
                if process.exitcode is None:
                    continue
                process.join()
                lived = time.monotonic() - self.processes.pop(process)
                freed = segment.release_pid(process.pid)
                if not self.active:
                    continue
                log.warning(
                    "worker %d exited with %s after %.1fs (freed %d stream slots); starting a new one",
                    process.pid, process.exitcode, lived, freed,
                )
                self.quick_deaths = self.quick_deaths + 1 if lived < 1.0 else 0
                if self.quick_deaths >= 5:
                    log.error("workers keep dying at start; giving up")
                    self.active = False
                    self.shutdown_event.set()
                    exit_code = 1
                    break
                self._spawn()
        deadline = time.monotonic() + self.config.graceful_timeout + 2.0
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
        for process in self.processes:
            if process.exitcode is None:
                process.terminate()
                process.join(2.0)
            if process.exitcode is None:
                process.kill()
                process.join()
        return exit_code


def serve(options: WebOptions, bind: str, workers: int, stall_timeout: float,
          idle_timeout: float = 5.0) -> int:
    """Run `ykshm web` in this process until SIGINT/SIGTERM; returns the exit code."""
    config = build_config(bind, workers, keep_alive_timeout=idle_timeout)
    sockets = create_sockets(config, stall_timeout)
    segment = WebSegment.create(options.name, stream_slots(options.settings))
    try:
        for sock in sockets.insecure_sockets:
            host = sock.getsockname()
            log.info(
                "serving instance %r on %s with %d worker(s) (pid %d)",
                options.name, _addr(host, options.tls is not None), workers, os.getpid(),
            )
        return Supervisor(options, config, sockets, workers).run(segment)
    finally:
        segment.close()
        segment.unlink()
        for sock in sockets.insecure_sockets:
            sock.close()


def _addr(name, tls: bool = False) -> str:
    scheme = "https" if tls else "http"
    if isinstance(name, tuple):
        host, port = name[0], name[1]
        return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"
    return str(name)
