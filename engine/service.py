"""The engine process's tasks under trio: SI server, scheduling loop, snapshot publisher.

`EngineService.run()` owns one nursery with every task. The scheduling loop runs a cycle when
something changed (an SI message arrived) or every `interval` seconds (timers), and straight
again while a cycle made progress and asks are still pending. Each cycle ends with the ring
heartbeat, the sd_notify watchdog ping (from inside the loop, so a hung cycle stops the pings),
and the delivery of what the cycle produced (allocations, state updates, request events) to the
shims. The snapshot task publishes the state document at most every 200 ms, only if something
changed, backing off when building it gets expensive.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import trio

from engine.history import SAMPLE_SECONDS
from engine.scheduler import Scheduler
from engine.sdnotify import Notifier
from engine.si_server import SIServer
from engine.snapshot import SnapshotPublisher

log = logging.getLogger("ykshm.engine")


class EngineService:
    def __init__(self, scheduler: Scheduler, socket_path: str, *, ring: Any = None,
                 snapshot: Any = None, notifier: Notifier | None = None,
                 interval: float = 0.1, budget: float = 0.05,
                 snapshot_interval: float = 0.2) -> None:
        self.scheduler = scheduler
        self.ring = ring
        self.notifier = notifier or Notifier("")
        self.interval = interval
        self.budget = budget
        self.server = SIServer(scheduler, socket_path, on_change=self.wake)
        self.publisher = SnapshotPublisher(scheduler, snapshot,
                                           min_interval=snapshot_interval) if snapshot else None
        self._wake = trio.Event()
        self.allocations = 0
        self.cycle_time = 0.0

    def wake(self) -> None:
        self._wake.set()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            path = await nursery.start(self.server.serve)
            nursery.start_soon(self._history)
            if self.publisher is not None:
                self.publisher.maybe_publish(force=True)
                nursery.start_soon(self._snapshots)
            nursery.start_soon(self._schedule_loop)
            self.notifier.ready(f"listening on {path}")
            log.info("engine ready: SI socket %s", path)
            task_status.started(path)

    async def _schedule_loop(self) -> None:
        sched = self.scheduler
        last_status = 0.0
        while True:
            if not self._wake.is_set():
                with trio.move_on_after(self.interval):
                    await self._wake.wait()
            self._wake = trio.Event()
            if self.ring is not None:
                self.ring.wake()  # events of the SI messages handled since the last cycle
            start = time.perf_counter()
            made = sched.cycle(self.budget)
            self.cycle_time += time.perf_counter() - start
            self.allocations += made
            if self.ring is not None:
                self.ring.heartbeat()
            self.notifier.watchdog()
            self.server.deliver(sched.take_outgoing())
            now = time.monotonic()
            if self.notifier.enabled and now - last_status > 5:
                last_status = now
                self.notifier.status(
                    f"cycles={sched.cycles} allocations={self.allocations} "
                    f"rms={len(sched.rms)}")
            if made and sched.pending():
                self._wake.set()
            await trio.sleep(0)

    async def _history(self) -> None:
        """YuniKorn's metrics history: one sample now, then one a minute (engine.history)."""
        while True:
            self.scheduler.sample_history()
            await trio.sleep(SAMPLE_SECONDS)

    async def _snapshots(self) -> None:
        publisher = self.publisher
        assert publisher is not None
        while True:
            await trio.sleep(publisher.interval)
            try:
                publisher.maybe_publish()
            except Exception:  # a too-large snapshot must not stop scheduling
                log.exception("snapshot publish failed")
                await trio.sleep(1.0)
