"""The consistent-region operators: a Deployment per job (`PodOperators`, `--operators pod`), or one
supervised local process per job (`Supervisor`, `--operators process`, e.g. under systemd).

PodOperators: for every ConsistentRegionOperator, the Deployment and Service of `croobjects` and
the job's own ServiceAccount, Role and RoleBinding, created idempotently, owned by the CRO; a failed
write is retried after a second. Kubernetes restarts the pod; the garbage collector removes them.
Every REPAIR_SECONDS each of them is looked for, and one a user deleted is made again (as
streams.repair does for a job's own objects): a job whose operator Deployment is gone would never
drain again. A Deployment with no ready pod for `unready_after` seconds (`ykshm streams
--operator-unready-after`, default 30) is an operator the PEs cannot reach: its regions cannot
drain. The ConsistentRegionOperator then says so, condition `OperatorReachable` False (reason
`OperatorNotReady`) and a Warning event `OperatorUnreachable`; once a pod is ready again, the
condition turns True and a Normal event `OperatorReachable` says so.

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
from .conditions import now, with_condition

log = logging.getLogger("ykshm.streams.operators")
REPAIR_SECONDS = 10.0
UNREADY_SECONDS = 30.0
REACHABLE = "OperatorReachable"

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

    def __init__(self, client: httpx.AsyncClient, image: str, source_argv: Sequence[str],
                 unready_after: float = UNREADY_SECONDS) -> None:
        self.client, self.image, self.source_argv = client, image, list(source_argv)
        self.unready_after = unready_after
        self._unready_since: dict[str, float] = {}
        self._said: dict[str, bool] = {}        # key -> the reachability last written
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
            with trio.move_on_after(min(REPAIR_SECONDS, self.unready_after / 2)):
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
                croobjects.service(cro), croobjects.network_policy(cro),
                croobjects.deployment(cro, self.image, self.source_argv)]

    async def _make(self, cro: Mapping[str, Any]) -> None:
        for obj in self._objects(cro):
            await kube.create(self.client, obj)     # a repeat finds it made

    async def _repair(self) -> None:
        """Make again what a user deleted of the objects made; a failure waits for the next pass."""
        for key, cro in list(self._made.items()):
            for obj in self._objects(cro):
                meta = obj["metadata"]
                try:
                    found = await kube.get(self.client, obj["kind"], meta["namespace"], meta["name"])
                    if found is None:
                        await kube.create(self.client, obj)
                        self.repaired += 1
                        log.warning("cr-operator %s: %s %s was deleted; made again", key, obj["kind"], meta["name"])
                    elif obj["kind"] == "Deployment":
                        await self._reachability(key, cro, found)
                except (ApiStatusError, httpx.HTTPError) as exc:
                    log.warning("cr-operator %s: checking %s %s: %s", key, obj["kind"], meta["name"], exc)

    async def _reachability(self, key: str, cro: Mapping[str, Any], deployment: Mapping[str, Any]) -> None:
        """Whether the operator's Deployment has a ready pod; said on the CRO when it changes."""
        ready = int((deployment.get("status") or {}).get("readyReplicas") or 0) > 0
        if ready:
            self._unready_since.pop(key, None)
            if self._said.get(key) is False:
                await self._say(key, cro, True, f"Deployment {deployment['metadata']['name']} has a ready pod again")
            return
        since = self._unready_since.setdefault(key, trio.current_time())
        if trio.current_time() - since >= self.unready_after and self._said.get(key) is not False:
            await self._say(key, cro, False,
                            f"Deployment {deployment['metadata']['name']} has had no ready pod for "
                            f"{self.unready_after:g}s: the PEs cannot reach the consistent-region "
                            f"operator, and its regions cannot drain")

    async def _say(self, key: str, cro: Mapping[str, Any], reachable: bool, message: str) -> None:
        meta = cro["metadata"]
        current = await kube.get(self.client, "ConsistentRegionOperator",
                                 meta.get("namespace") or "default", meta["name"])
        if current is None:
            return
        status = dict(current.get("status") or {})
        status["conditions"] = with_condition(status.get("conditions") or [], {
            "type": REACHABLE, "status": "True" if reachable else "False",
            "reason": "OperatorReady" if reachable else "OperatorNotReady", "message": message,
            "lastTransitionTime": now()})
        if await kube.put_status(self.client, current, status) is None:
            return                                   # changed meanwhile: the next pass says it
        self._said[key] = reachable
        (log.info if reachable else log.warning)("cr-operator %s: %s", key, message)
        await kube.post_event(self.client, current, REACHABLE if reachable else "OperatorUnreachable",
                              message, "Normal" if reachable else "Warning")
