"""One `ykshm cr-operator` process per job with consistent regions, supervised.

The seed runs a Deployment per job; here `ykshm streams` starts `ykshm cr-operator --job NS/NAME`
for every ConsistentRegionOperator object and restarts it when it exits, with backoff (0.5 s
doubling to 10 s, reset after 30 s up), so a crash touches one job only. An operator whose object
is gone (its job was deleted) is stopped: SIGTERM, then SIGKILL after 5 s (trio's
`run_process` cancellation).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import trio

from common.backoff import Backoff

log = logging.getLogger("ykshm.streams.operators")

BACKOFF_START, BACKOFF_MAX, STABLE_SECONDS = 0.5, 10.0, 30.0


class Supervisor:
    """Keeps one child per wanted job; `update` gives the current ConsistentRegionOperators."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.argv = list(argv)
        self.running: dict[str, trio.CancelScope] = {}
        self.restarts: dict[str, int] = {}
        self._wanted: set[str] = set()
        self._changed = trio.Event()

    def update(self, operators: Iterable[Mapping[str, Any]]) -> None:
        wanted = set()
        for cro in operators:
            meta = cro["metadata"]
            if not meta.get("deletionTimestamp"):
                job = (cro.get("spec") or {}).get("jobName") or meta["name"]
                wanted.add(f"{meta.get('namespace') or 'default'}/{job}")
        if wanted != self._wanted:
            self._wanted = wanted
            self._changed.set()

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                for job in sorted(self._wanted - set(self.running)):
                    scope = trio.CancelScope()
                    self.running[job] = scope
                    nursery.start_soon(self._keep, job, scope)
                for job in sorted(set(self.running) - self._wanted):
                    self.running.pop(job).cancel()
                await self._changed.wait()
                self._changed = trio.Event()

    async def _keep(self, job: str, scope: trio.CancelScope) -> None:
        backoff = Backoff(BACKOFF_START, BACKOFF_MAX)
        with scope:
            while True:
                began = trio.current_time()
                try:
                    result = await trio.run_process([*self.argv, "--job", job], check=False)
                    log.warning("cr-operator for %s exited with %s; restarting in %.1fs",
                                job, result.returncode, backoff.current)
                except OSError as exc:
                    log.warning("cr-operator for %s could not start: %s", job, exc)
                self.restarts[job] = self.restarts.get(job, 0) + 1
                if trio.current_time() - began > STABLE_SECONDS:
                    backoff.reset()
                await trio.sleep(backoff.next())
