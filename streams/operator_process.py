"""`ykshm cr-operator --job NS/NAME`: the consistent-region operator of one job, on Kubernetes.

The state machine, REST API, notifications and metrics are `regions/` (no Kubernetes there); this
module gives them the cluster, as OpenStreams' per-job operator Deployment does:

- start: read the job's ConsistentRegionOperator (`JOB`); `status.hasStarted` already true (or a
  ConsistentRegion with a state past STARTED: the operator object was made again) means
  this is a restart, and every region is forced through a reset on its next healthy report
  (`RegionOperator(restarted=True)`). Each region is rebuilt from its ConsistentRegion's spec and
  last status (`JOB-INDEX`), so sequence ids continue where they were (lastCompletedSeqID never
  goes back). Then `status.hasStarted: true` and `status.address` (the REST URL) are written.
- monitors: informers on the job's PEs and pods; any change re-checks the health of every region
  the PE belongs to (`regions.health`): every PE exists with connectivity Full and its current pod
  (`JOB-N-LAUNCH`, owned by the PE) is Running. A PE relaunched since the last look makes the
  region unhealthy once (then it resets), even if the monitors never saw it down.
- status writer: `PUT .../streamscrs/JOB-INDEX/status`, then wait until the ConsistentRegion
  informer has seen that resourceVersion (the seed's consistency rule) before the region takes its
  next event; a 409 (someone else wrote) re-reads and writes again.
- UDP notifications go to an address a PE announced in its annotation
  `streams.ibm.com/notify-address: HOST:PORT` (what `ykshm pe-sim --job` writes); with
  `--notify-pods` (the operator's Deployment) every other PE is notified as OpenStreams does, at
  `JOB-N.NS:10001`: the address that name resolves to, the PE's current pod's IP once it runs,
  read from the pod informer (no name lookup per datagram). PEs without either poll.
- authentication: the job's Secret `JOB-token` (its PEs mount it) is read at start; every API
  request under the base then needs `Authorization: Bearer TOKEN` (regions.rest). Fail closed:
  while the Secret is missing nothing is served (no socket, so the Deployment is not ready and no
  request gets an answer); the operator writes `status.phase: WaitingForSecret` on its
  ConsistentRegionOperator, which the controller's repair answers by making the Secret again (a
  new token: PEs started with the old one are refused until they are relaunched), and then
  serves.
- `--advertise URL` (the Deployment: its Service's URL) is written as `status.address` instead of
  the bound socket's.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping
from functools import partial
from typing import Any

import httpx
import trio

from common.backoff import Backoff
from common.http1.limits import Limits
from kube import args as kubeargs
from kube.client import ApiStatusError, Informer
from . import kubecalls as kube
from .croobjects import WAITING_FOR_SECRET as WAITING
from .objects import LABEL_JOB, pe_name, pod_name
from .peobjects import TOKEN_KEY, token_secret_name
from .regions.docs import region_from_status
from .regions.errors import RegionError
from .regions.fsm import Region, RegionSpec
from .regions.health import Health, PeView, Relaunches, region_health
from .regions.operator import RegionOperator
from .regions.rest import serve
from .regions.udp import PE_NOTIFICATION_PORT

log = logging.getLogger("ykshm.cr-operator")

NOTIFY_ADDRESS = "streams.ibm.com/notify-address"


class OperatorError(Exception):
    """The job has no usable ConsistentRegionOperator or ConsistentRegion objects."""


def _rv(obj: Mapping[str, Any]) -> int:
    try:
        return int(obj["metadata"].get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


class JobRegions:
    """The Kubernetes side of one job's operator: caches, health, status writes, addresses."""

    def __init__(self, client: httpx.AsyncClient, namespace: str, job: str, *,
                 notify_pods: bool = False) -> None:
        self.client, self.namespace, self.job = client, namespace, job
        self.notify_pods = notify_pods
        selector = f"?labelSelector={LABEL_JOB}%3D{job}"
        self.informers = {kind: Informer(client, kube.KINDS[kind].collection(namespace) + selector, kind)
                          for kind in ("ProcessingElement", "Pod", "ConsistentRegion")}
        self.region_pes: dict[int, frozenset[int]] = {}
        self._seen = trio.Condition()
        self.operator: RegionOperator | None = None
        self.relaunches = Relaunches()

    def _objects(self, kind: str) -> list[dict[str, Any]]:
        return list(self.informers[kind].store)

    def _pe(self, index: int) -> dict[str, Any] | None:
        """The PE `JOB-N` from the informer's cache (its name is the controller's, deterministic)."""
        return self.informers["ProcessingElement"].store.items.get(
            f"{self.namespace}/{pe_name(self.job, index)}")

    # --- what the regions/ operator is given ------------------------------------------------

    async def health(self, region: int) -> Health:
        views: dict[int, PeView] = {}
        pods = self.informers["Pod"].store.items
        for index in self.region_pes.get(region, ()):
            pe = self._pe(index)
            if pe is None:
                continue
            launch = int(pe["spec"].get("launchCount") or 1)
            pod = pods.get(f"{self.namespace}/{pod_name(self.job, index, launch)}")
            owned = pod is not None and any(r.get("uid") == pe["metadata"].get("uid")
                                            for r in pod["metadata"].get("ownerReferences") or ())
            phase = ((pod.get("status") or {}).get("phase") or "Pending") if owned and pod else None
            views[index] = PeView((pe.get("status") or {}).get("connectivity") or "None", launch, phase)
        health = region_health(self.region_pes.get(region, ()), views)
        if self.relaunches.moved(region, views) and self.operator is not None:
            self.operator.recheck_all([region])    # unhealthy now; the next look resets it
            return Health(False, health.clean_start)
        return health

    async def write_status(self, region: int, status: dict) -> None:
        """Write the region's status; a deleted ConsistentRegion is waited for (the controller
        makes it again) and gets the running region's status, so its sequence ids go on.

        The write is made at the resourceVersion the informer holds (after our own last write
        it holds that one, as each write waits until it is visible there), so a status write is
        one request; a conflict (the controller changed the object meanwhile) or an object the
        cache lacks reads it from the API. Reading it first every time put a GET, 2-8 ms on a
        loaded machine, in front of every drain's first notification."""
        name = f"{self.job}-{region}"
        conflicts, backoff = 0, Backoff(0.2, 5.0, jitter=0.1)
        cached = self.informers["ConsistentRegion"].store.items.get(f"{self.namespace}/{name}")
        while conflicts < 10:
            current = cached or await kube.get(self.client, "ConsistentRegion", self.namespace, name)
            cached = None
            if current is None:
                log.warning("ConsistentRegion %s/%s is gone; waiting for it to be made again",
                            self.namespace, name)
                await trio.sleep(backoff.next())
                continue
            written = await kube.put_status(self.client, current, status)
            if written is not None:
                await self._visible("ConsistentRegion", name, _rv(written))
                return
            conflicts += 1
        raise OperatorError(f"ConsistentRegion {self.namespace}/{name}: status write kept conflicting")

    async def _visible(self, kind: str, name: str, rv: int) -> None:
        """Return once the informer cache holds `name` at resourceVersion >= rv."""
        async with self._seen:
            while True:
                obj = self.informers[kind].store.items.get(f"{self.namespace}/{name}")
                if obj is not None and _rv(obj) >= rv:
                    return
                await self._seen.wait()

    def address(self, pe: int) -> tuple[str, int] | None:
        found = self._pe(pe)
        raw = ((found or {}).get("metadata", {}).get("annotations") or {}).get(NOTIFY_ADDRESS)
        if not raw:
            return self._pod_address(found) if self.notify_pods and found is not None else None
        host, _, port = raw.rpartition(":")
        try:
            return (host, int(port))
        except ValueError:
            return None

    def pe_peer(self, ip: str) -> bool:
        """Whether `ip` is one of this job's own PE pods (streams.pepeers), from the caches."""
        from .pepeers import job_at

        return job_at(ip, self.informers["Pod"].store,
                      self.informers["ProcessingElement"].store.items) == (self.namespace, self.job)

    def _pod_address(self, pe: Mapping[str, Any]) -> tuple[str, int] | None:
        """Where `JOB-N.NS` points: the PE's current pod's IP (its headless Service's endpoint)."""
        launch = int(pe["spec"].get("launchCount") or 1)
        pod = self.informers["Pod"].store.items.get(
            f"{self.namespace}/{pod_name(self.job, int(pe['spec']['id']), launch)}")
        status = (pod or {}).get("status") or {}
        if status.get("phase") != "Running" or not status.get("podIP"):
            return None
        return (status["podIP"], PE_NOTIFICATION_PORT)

    async def token(self) -> bytes | None:
        secret = await kube.get(self.client, "Secret", self.namespace, token_secret_name(self.job))
        raw = ((secret or {}).get("data") or {}).get(TOKEN_KEY)
        try:
            return (base64.b64decode(raw, validate=True) or None) if raw else None
        except ValueError:
            return None

    async def wait_token(self, cro: Mapping[str, Any]) -> bytes:
        """The job's token; until its Secret exists, say so on the ConsistentRegionOperator (the
        controller re-makes the Secret) and wait: never serve without one."""
        backoff = Backoff(0.2, 5.0, jitter=0.1)
        while (token := await self.token()) is None:
            if (cro.get("status") or {}).get("phase") != WAITING:
                log.warning("cr-operator for %s/%s: no Secret %s: serving nothing until it exists",
                            self.namespace, self.job, token_secret_name(self.job))
                cro = await kube.put_status(self.client, cro, {
                    **(cro.get("status") or {}), "phase": WAITING,
                    "message": f"Secret {token_secret_name(self.job)} is missing"}) or \
                    await kube.get(self.client, "ConsistentRegionOperator", self.namespace, self.job) or cro
            await trio.sleep(backoff.next())
        return token

    # --- the process ------------------------------------------------------------------------

    async def load(self) -> tuple[list[Region], bool, dict[str, Any]]:
        cro = await kube.get(self.client, "ConsistentRegionOperator", self.namespace, self.job)
        if cro is None:
            raise OperatorError(f"no ConsistentRegionOperator {self.namespace}/{self.job}")
        restarted = bool((cro.get("status") or {}).get("hasStarted"))
        regions = []
        crs = self._objects("ConsistentRegion")
        if any((cr.get("status") or {}).get("state") not in (None, "STARTED") for cr in crs):
            # a region already ran: its operator object was made again (a user deleted it) and
            # has no `hasStarted`, but this is a restart all the same; a fresh start would restore
            # the region's state with no timer armed, and its drains would stop for good (P3)
            restarted = True
        for cr in crs:
            try:
                region = Region(RegionSpec.from_doc(cr.get("spec") or {}))
                region_from_status(region, cr.get("status") or {})
            except RegionError as exc:
                raise OperatorError(f"ConsistentRegion {cr['metadata']['name']}: {exc}") from None
            self.region_pes[region.index] = region.spec.pes
            regions.append(region)
        wanted = int((cro.get("spec") or {}).get("numRegions") or 0)
        if len(regions) < wanted:
            raise OperatorError(f"job {self.job}: {len(regions)} of {wanted} ConsistentRegions exist")
        return regions, restarted, cro

    async def run(self, bind: str = "127.0.0.1:0", *, limits: Limits = Limits(),
                  idle_timeout: float = 30.0, advertise: str | None = None,
                  task_status=trio.TASK_STATUS_IGNORED) -> None:
        send, receive = trio.open_memory_channel(1000)
        async with trio.open_nursery() as nursery:
            for informer in self.informers.values():
                await nursery.start(informer.run, send)
            regions, restarted, cro = await self.load()
            token = await self.wait_token(cro)
            cro = await kube.get(self.client, "ConsistentRegionOperator", self.namespace, self.job) or cro
            self.operator = RegionOperator(f"{self.namespace}/{self.job}", regions,
                                           status_writer=self.write_status, health_source=self.health,
                                           addresses=self.address, restarted=restarted)
            nursery.start_soon(self._route, receive)
            url = await nursery.start(partial(serve, self.operator, bind, limits=limits,
                                              idle_timeout=idle_timeout, token=token,
                                              pe_peer=self.pe_peer))
            status = {k: v for k, v in (cro.get("status") or {}).items() if k != "message"}
            await kube.put_status(self.client, cro, {**status, "hasStarted": True, "phase": "Running",
                                                     "address": advertise or f"{url}/api/consistentregion"})
            log.info("cr-operator for %s/%s: %d regions, %s, API at %s", self.namespace, self.job,
                     len(regions), "restarted" if restarted else "fresh start", url)
            task_status.started(url)

    async def _route(self, receive: trio.MemoryReceiveChannel) -> None:
        async for batch in receive:
            touched: set[int] = set()
            for _type, obj in batch.events or ():
                if batch.kind == "ConsistentRegion":
                    self._follow_members(obj)
                    continue
                touched |= self._regions_of(obj)
            if batch.kind == "ConsistentRegion":
                async with self._seen:
                    self._seen.notify_all()
            if touched and self.operator is not None:
                self.operator.recheck_all(sorted(touched))

    def _follow_members(self, cr: Mapping[str, Any]) -> None:
        """A width change rewrote a ConsistentRegion's `pesInRegion`: the running region follows
        (new PEs are known at once, no operator restart)."""
        spec = cr.get("spec") or {}
        try:
            index, pes = int(spec["regionIndex"]), frozenset(int(p) for p in spec.get("pesInRegion") or ())
        except (KeyError, TypeError, ValueError):
            return
        if pes and index in self.region_pes and frozenset(self.region_pes[index]) != pes \
                and self.operator is not None:
            self.region_pes[index] = pes
            self.operator.set_members(index, pes)

    def _regions_of(self, obj: Mapping[str, Any]) -> set[int]:
        labels = obj["metadata"].get("labels") or {}
        try:
            pe = int(obj["spec"]["id"]) if obj.get("kind") == "ProcessingElement" else \
                int(labels.get("streams.ibm.com/pe", -1))
        except (KeyError, TypeError, ValueError):
            return set()
        return {r for r, pes in self.region_pes.items() if pe in pes}


async def run(kube_config: Any, namespace: str, job: str, bind: str, *, limits: Limits = Limits(),
              idle_timeout: float = 30.0, advertise: str | None = None, notify_pods: bool = False) -> None:
    """The operator until SIGTERM (a pod's deletion, the Supervisor stopping it): then its
    listeners close and it returns, exit 0; what it wrote to its regions' status stays."""
    async with kube_config.client() as client, trio.open_nursery() as nursery:
        nursery.start_soon(kubeargs.stop_on_sigterm, nursery.cancel_scope,
                           f"cr-operator for {namespace}/{job} stopping")
        try:
            await JobRegions(client, namespace, job, notify_pods=notify_pods).run(
                bind, limits=limits, idle_timeout=idle_timeout, advertise=advertise)
        except ApiStatusError as exc:
            raise OperatorError(f"the API server refused: {exc}") from None
        nursery.cancel_scope.cancel()      # it returned: the SIGTERM watcher is not waited for

