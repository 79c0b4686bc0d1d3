"""`ykshm streams`: the Streams instance controller process (trio).

Tasks, all in one nursery owned by `Controller.run`:
- one `Informer` (the shim's list/watch client: 410 -> relist) per kind: Jobs, PEs, HostPools,
  ParallelRegions, ConsistentRegionOperators, and the pods and ConfigMaps labelled
  `streams.ibm.com/job`. Their batches mark the owning jobs dirty;
- the reconcile loop: takes one dirty job at a time and runs `reconcile.plan_job` on the caches,
  then carries out its steps. Level triggered: after a restart the informers' first lists (the
  seed's "synchronization ADDITION events") mark every job dirty and the same plan is made again;
  names are deterministic and creates idempotent, so nothing is made twice;
- one submission task per job being submitted (fetch and fuse may take seconds and must not
  hold up other jobs), bounded by `submissionTimeOutInSeconds`;
- the consistent-region operators' supervisor (`operators.Supervisor`), one `ykshm cr-operator`
  process per ConsistentRegionOperator.

Job status (`/status`): `phase` Submitting -> Submitted -> Running (every PE's connectivity Full),
or Failed with `message` and a `Submitted` condition whose reason names what went wrong; a
Warning event says the same. A failed job's objects are deleted with Foreground propagation; a
change to its spec (a new `metadata.generation`) submits it again from that clean slate.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import math
from collections.abc import Mapping
from typing import Any

import httpx
import trio

from kube.client import ApiStatusError, Informer
from . import kubecalls as kube, reconcile, submission
from .errors import LogicalError
from .jobspec import JobSpec, read_job
from .objects import LABEL_JOB, LABEL_KIND
from .peobjects import PeRuntime

log = logging.getLogger("ykshm.streams")

JobKey = tuple[str, str]          # (namespace, name)
WATCHED = ("Job", "ProcessingElement", "HostPool", "ParallelRegion", "ConsistentRegionOperator",
           "Pod", "ConfigMap")
LABELLED = ("Pod", "ConfigMap")   # watched by label: only the ones our jobs own
SUBMITTED_KINDS = ("ProcessingElement", "ConfigMap", "HostPool", "ParallelRegion",
                   "ConsistentRegionOperator")   # what a submission makes (and a retry removes)
CLEAN_SLATE_SECONDS = 30.0


@dataclasses.dataclass
class Settings:
    bundle_dir: str
    cache_dir: str
    namespace: str | None = None
    operator_argv: list[str] | None = None    # how to start `ykshm cr-operator` (None: not at all)
    pe_runtime: PeRuntime = dataclasses.field(default_factory=PeRuntime)   # the PE pods' image
    api_bind: str | None = None               # the bundle endpoint's HOST:PORT (None: not served)
    operator_pod: tuple[str, list[str]] | None = None   # (image, API flags): cr-operators as Deployments


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _job_key_of(obj: Mapping[str, Any]) -> JobKey | None:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace") or "default"
    if obj.get("kind") == "Job":
        return (ns, meta.get("name", ""))
    job = (meta.get("labels") or {}).get(LABEL_JOB) or (obj.get("spec") or {}).get("jobName")
    return (ns, job) if job else None


class Controller:
    """The controller's caches, dirty set and tasks; `run` owns them all."""

    def __init__(self, client: httpx.AsyncClient, settings: Settings) -> None:
        self.client = client
        self.settings = settings
        self.informers = {kind: Informer(client, self._watch_path(kind), kind) for kind in WATCHED}
        self.dirty: set[JobKey] = set()
        self._wake = trio.Event()
        self.submitting: dict[JobKey, trio.CancelScope] = {}
        self.reported: dict[JobKey, set[str]] = {}
        self.widths_busy: set[JobKey] = set()
        self.synced = trio.Event()
        self.operators: Any = None
        self.api_address: tuple[str, int] | None = None
        self.api_namespaces: set[str] = set()

    def _watch_path(self, kind: str) -> str:
        path = kube.KINDS[kind].collection(self.settings.namespace)
        return path + (f"?labelSelector={LABEL_JOB}" if kind in LABELLED else "")

    # --- caches ----------------------------------------------------------------------------

    def objects_of(self, kind: str, key: JobKey) -> list[dict[str, Any]]:
        ns, job = key
        return [o for o in self.informers[kind].store
                if (o["metadata"].get("namespace") or "default") == ns and _job_key_of(o) == key]

    def job(self, key: JobKey) -> dict[str, Any] | None:
        for obj in self.informers["Job"].store:
            if _job_key_of(obj) == key:
                return obj
        return None

    # --- tasks -----------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        send, receive = trio.open_memory_channel(1000)
        async with trio.open_nursery() as nursery:
            for informer in self.informers.values():
                await nursery.start(informer.run, send)
            self.nursery = nursery
            nursery.start_soon(self._route, receive)
            if self.settings.api_bind is not None:
                from .bundleserver import BundleServer, serve
                server = BundleServer(self.client, bundle_dir=self.settings.bundle_dir,
                                      cache_dir=self.settings.cache_dir)
                self.api_address = await nursery.start(serve, server, self.settings.api_bind)
            if self.settings.operator_pod is not None:
                from .operators import PodOperators
                self.operators = PodOperators(self.client, *self.settings.operator_pod)
                nursery.start_soon(self.operators.run)
            elif self.settings.operator_argv is not None:
                from .operators import Supervisor
                self.operators = Supervisor(self.settings.operator_argv)
                nursery.start_soon(self.operators.run)
            for job in self.informers["Job"].store:
                self.mark(_job_key_of(job))
            self.synced.set()
            task_status.started()
            await self._reconcile_loop()

    def mark(self, key: JobKey | None) -> None:
        if key is not None and key[1]:
            self.dirty.add(key)
            self._wake.set()

    async def _route(self, receive: trio.MemoryReceiveChannel) -> None:
        async for batch in receive:
            for _type, obj in batch.events or ():
                self.mark(_job_key_of(obj))
            if batch.kind == "ConsistentRegionOperator" and self.operators is not None:
                self.operators.update(self.informers["ConsistentRegionOperator"].store)

    async def _reconcile_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            while self.dirty:
                key = self.dirty.pop()
                try:
                    await self.reconcile(key)
                except (ApiStatusError, httpx.HTTPError) as exc:
                    log.warning("job %s/%s: %s; trying again", key[0], key[1], exc)
                    self.nursery.start_soon(self._retry_later, key)
                await trio.sleep(0)

    async def _retry_later(self, key: JobKey, delay: float = 1.0) -> None:
        await trio.sleep(delay)
        self.mark(key)

    # --- one job ---------------------------------------------------------------------------

    async def reconcile(self, key: JobKey) -> None:
        job = self.job(key)
        if job is None or job["metadata"].get("deletionTimestamp"):
            scope = self.submitting.pop(key, None)
            if scope is not None:
                scope.cancel()
            self.reported.pop(key, None)
            return
        status = job.get("status") or {}
        phase = status.get("phase") or ""
        generation = job["metadata"].get("generation", 1)
        if phase == "Failed" and status.get("observedGeneration") == generation:
            return
        try:
            spec = read_job(job)
        except LogicalError as exc:
            await self._fail(job, "InvalidSpec", str(exc))
            return
        if self.api_address is not None and key[0] not in self.api_namespaces:
            from .bundleserver import ensure_api_service
            await ensure_api_service(self.client, key[0], self.api_address)
            self.api_namespaces.add(key[0])
        if phase in ("", "Submitting", "Failed"):
            if key not in self.submitting:
                scope = trio.CancelScope()
                self.submitting[key] = scope
                self.nursery.start_soon(self._submission, key, job, spec, scope)
            return
        await self._reconcile_running(key, job, spec)

    async def _reconcile_running(self, key: JobKey, job: dict[str, Any], spec: JobSpec) -> None:
        configmaps = [c for c in self.objects_of("ConfigMap", key)
                      if (c["metadata"].get("labels") or {}).get(LABEL_KIND) == "aadl"]
        pools = self.objects_of("HostPool", key)
        view = reconcile.JobView(job=job, configmaps=configmaps, pes=self.objects_of("ProcessingElement", key),
                                 pods=self.objects_of("Pod", key),
                                 host_pools_expected=int((job.get("status") or {}).get("hostPools") or 0),
                                 host_pools_present=len(pools))
        for step in reconcile.plan_job(view, spec=spec, reported=self.reported.setdefault(key, set()),
                                       runtime=self.settings.pe_runtime):
            await self._carry_out(step)
        await self._check_widths(key, job, spec)
        await self._job_status(job, view)

    async def _carry_out(self, step: reconcile.Step) -> None:
        obj = step.obj
        if step.what == "create":
            await kube.create(self.client, obj)
        elif step.what == "update_pe":
            if await kube.replace(self.client, obj) is not None and step.reason:
                await kube.post_event(self.client, obj, step.reason, step.message, step.type_)
            return
        elif step.what == "delete":
            meta = obj["metadata"]
            await kube.delete(self.client, obj["kind"], meta.get("namespace") or "default",
                              meta["name"], propagation=step.propagation, uid=meta.get("uid"))
        elif step.what == "pe_status":
            await kube.put_status(self.client, obj, step.status or {})
        if step.what == "event" or (step.reason and step.what != "pe_status"):
            await kube.post_event(self.client, obj, step.reason, step.message, step.type_)

    async def _job_status(self, job: dict[str, Any], view: reconcile.JobView) -> None:
        status = dict(job.get("status") or {})
        pes = view.pes
        full = bool(pes) and all((pe.get("status") or {}).get("connectivity") == "Full" for pe in pes)
        phase = "Running" if full else "Submitted"
        new = {**status, "phase": phase, "peCount": len(view.configmaps)}
        if new != status:
            await kube.put_status(self.client, job, new)
            if phase == "Running" and status.get("phase") != "Running":
                await kube.post_event(self.client, job, "Running",
                                      f"all {len(pes)} processing elements are running and connected")

    # --- submission ------------------------------------------------------------------------

    async def _submission(self, key: JobKey, job: dict[str, Any], spec: JobSpec,
                          scope: trio.CancelScope) -> None:
        try:
            with scope:
                await self._submit(key, job, spec)
        finally:
            if self.submitting.get(key) is scope:
                del self.submitting[key]
            self.mark(key)

    async def _submit(self, key: JobKey, job: dict[str, Any], spec: JobSpec) -> None:
        status = job.get("status") or {}
        if status.get("phase") == "Failed":
            await self._clean_slate(key, job)
        job = await kube.put_status(self.client, job, {"phase": "Submitting", "submissionTime": _now(),
                                                        "observedGeneration": job["metadata"].get("generation", 1)}) or job
        await kube.post_event(self.client, job, "Submitting", f"fetching bundle {spec.bundle_name}")
        timeout = spec.submission_timeout
        with trio.move_on_after(timeout if math.isfinite(timeout) else math.inf) as deadline:
            try:
                prepared = await submission.submit(self.client, job, spec,
                                                   bundle_dir=self.settings.bundle_dir,
                                                   cache_dir=self.settings.cache_dir)
            except submission.SUBMISSION_ERRORS as exc:
                await self._fail(job, type(exc).__name__.removesuffix("Error") or "Error",
                                 str(exc), clean=True)
                return
        if deadline.cancelled_caught:
            await self._fail(job, "SubmissionTimeout",
                             f"submission not done within submissionTimeOutInSeconds={timeout:g}", clean=True)
            return
        latest = self.job(key) or job
        done = {**(latest.get("status") or {}), "phase": "Submitted", "peCount": len(prepared.pes),
                "hostPools": len(prepared.app.host_pools), "fusionNodes": prepared.nodes, "message": "",
                "observedGeneration": job["metadata"].get("generation", 1),
                "conditions": [{"type": "Submitted", "status": "True", "reason": "Fused",
                                "message": f"fused into {len(prepared.pes)} PEs",
                                "lastTransitionTime": _now()}]}
        await kube.put_status(self.client, latest, done)
        await kube.post_event(self.client, latest, "Submitted",
                              f"bundle {spec.bundle_name} fused into {len(prepared.pes)} processing elements")

    async def _fail(self, job: dict[str, Any], reason: str, message: str, clean: bool = False) -> None:
        log.warning("job %s/%s failed: %s: %s", job["metadata"].get("namespace"),
                    job["metadata"]["name"], reason, message)
        if clean:
            await self._clean_slate(_job_key_of(job), job)
        latest = self.job(_job_key_of(job)) or job
        status = {**(latest.get("status") or {}), "phase": "Failed", "message": message,
                  "observedGeneration": latest["metadata"].get("generation", 1),
                  "conditions": [{"type": "Submitted", "status": "False", "reason": reason,
                                  "message": message, "lastTransitionTime": _now()}]}
        await kube.put_status(self.client, latest, status)
        await kube.post_event(self.client, latest, reason, message, "Warning")

    async def _clean_slate(self, key: JobKey | None, job: Mapping[str, Any]) -> None:
        """Delete what a submission made (Foreground), so a retry starts from nothing."""
        if key is None:
            return
        uid = job["metadata"].get("uid")
        for kind in SUBMITTED_KINDS:
            for obj in self.objects_of(kind, key):
                if any(r.get("uid") == uid for r in obj["metadata"].get("ownerReferences") or ()):
                    await kube.delete(self.client, kind, key[0], obj["metadata"]["name"],
                                      propagation="Foreground")
        for obj in await self._listed(key, "ConsistentRegion"):
            await kube.delete(self.client, "ConsistentRegion", key[0], obj["metadata"]["name"],
                              propagation="Foreground")
        # Foreground keeps an owner until its dependents are gone: a retry that created the same
        # names meanwhile would take the old, terminating objects for its own (a 409 is "made")
        with trio.move_on_after(CLEAN_SLATE_SECONDS):
            while any(self._owned(kind, key, uid) for kind in SUBMITTED_KINDS):
                await trio.sleep(0.05)

    def _owned(self, kind: str, key: JobKey, uid: str | None) -> bool:
        return any(any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or ())
                   for o in self.objects_of(kind, key))

    async def _listed(self, key: JobKey, kind: str) -> list[dict[str, Any]]:
        resp = await self.client.get(kube.KINDS[kind].collection(key[0]),
                                     params={"labelSelector": f"{LABEL_JOB}={key[1]}"})
        return (resp.json().get("items") or []) if resp.status_code == 200 else []

    # --- parallel region width (/scale) ----------------------------------------------------

    async def _check_widths(self, key: JobKey, job: dict[str, Any], spec: JobSpec) -> None:
        regions = self.objects_of("ParallelRegion", key)
        changed = [r for r in regions if (r.get("status") or {}).get("width") != r["spec"].get("width")]
        if not changed or key in self.widths_busy:
            return
        self.widths_busy.add(key)
        self.nursery.start_soon(self._rewiden, key, job, spec, regions, changed)

    async def _rewiden(self, key: JobKey, job: dict[str, Any], spec: JobSpec,
                       regions: list[dict[str, Any]], changed: list[dict[str, Any]]) -> None:
        """The seed's second backend role: re-fuse from the stored ADL for new widths; only
        PEs whose content id changed get a new launch (by the plan's content-id rule)."""
        try:
            from . import refuse
            await refuse.apply_widths(self, key, job, spec, regions, changed)
        finally:
            self.widths_busy.discard(key)
            self.mark(key)
