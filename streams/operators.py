"""The consistent-region operators: a Deployment per job (`PodOperators`, `--operators pod`), or one
supervised local process per job (`Supervisor`, `--operators process`, e.g. under systemd).

PodOperators: for every ConsistentRegionOperator, the Deployment and Service of `croobjects` and
the job's own ServiceAccount, Role and RoleBinding, created idempotently, owned by the CRO; a failed
write is retried after a second. Kubernetes restarts the pod; the garbage collector removes them.
Every REPAIR_SECONDS each of them is looked for, and one a user deleted is made again (as
streams.repair does for a job's own objects): a job whose operator Deployment is gone would never
drain again.

Supervisor:

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

import httpx
import trio

from common.backoff import Backoff
from kube.client import ApiStatusError
from . import croobjects, kubecalls as kube

log = logging.getLogger("ykshm.streams.operators")
REPAIR_SECONDS = 10.0

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


class PodOperators:
    """Makes each ConsistentRegionOperator's Deployment and Service; `update` as Supervisor's."""

    def __init__(self, client: httpx.AsyncClient, image: str, source_argv: Sequence[str]) -> None:
        self.client, self.image, self.source_argv = client, image, list(source_argv)
        self._pending: dict[str, Mapping[str, Any]] = {}
        self._made: dict[str, Mapping[str, Any]] = {}
        self._changed = trio.Event()
        self.repaired = 0
        """Objects made again after they were deleted (a figure for tests and logs)."""

    def update(self, operators: Iterable[Mapping[str, Any]]) -> None:
        live = set()
        for cro in operators:
            meta = cro["metadata"]
            key = f"{meta.get('namespace') or 'default'}/{meta['name']}/{meta.get('uid')}"
            if not meta.get("deletionTimestamp"):
                live.add(key)
                if key not in self._made:
                    self._pending[key] = cro
        for key in set(self._made) - live:    # its job is gone: nothing of it to keep
            del self._made[key]
        if self._pending:
            self._changed.set()

    async def run(self) -> None:
        while True:
            with trio.move_on_after(REPAIR_SECONDS):
                await self._changed.wait()
            self._changed = trio.Event()
            for key, cro in list(self._pending.items()):
                try:
                    await self._make(cro)
                except (ApiStatusError, httpx.HTTPError) as exc:
                    log.warning("cr-operator objects for %s: %s; trying again", key, exc)
                    self._changed.set()
                    continue
                self._made[key] = cro
                self._pending.pop(key, None)
            await self._repair()
            if self._changed.is_set():
                await trio.sleep(1.0)

    def _objects(self, cro: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The job's own identity first (kube-apiserver refuses a pod whose ServiceAccount does not
        exist yet), then the Service, then the Deployment."""
        return [croobjects.service_account(cro), croobjects.role(cro), croobjects.role_binding(cro),
                croobjects.service(cro), croobjects.deployment(cro, self.image, self.source_argv)]

    async def _make(self, cro: Mapping[str, Any]) -> None:
        for obj in self._objects(cro):
            await kube.create(self.client, obj)     # a repeat finds it made

    async def _repair(self) -> None:
        """Make again what a user deleted of the objects made; a failure waits for the next pass."""
        for key, cro in list(self._made.items()):
            for obj in self._objects(cro):
                meta = obj["metadata"]
                try:
                    if await kube.get(self.client, obj["kind"], meta["namespace"], meta["name"]) is None:
                        await kube.create(self.client, obj)
                        self.repaired += 1
                        log.warning("cr-operator %s: %s %s was deleted; made again", key, obj["kind"], meta["name"])
                except (ApiStatusError, httpx.HTTPError) as exc:
                    log.warning("cr-operator %s: checking %s %s: %s", key, obj["kind"], meta["name"], exc)
