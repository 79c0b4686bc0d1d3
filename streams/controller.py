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
- the bundle repository (`repository.run`: a redis-server child, started first, stopped by pid
  when this nursery ends), and once the informers have listed, every submitted job's bundle
  stored in it again (`_refill_repository`).

Job status (`/status`): `phase` Submitting -> Submitted -> Running (every PE's connectivity Full),
or Failed with `message` and a `Submitted` condition whose reason names what went wrong; a
Warning event says the same. A failed job's objects are deleted with Foreground propagation; a
change to its spec (a new `metadata.generation`) submits it again from that clean slate. A change
to a submitted job's spec is applied in place when it keeps the job's shape (`respec`: only the PEs
whose AADL or pod it changes relaunch), else the job is resubmitted from a clean slate.

API errors never end the process (`_on_error`, the one boundary of every per-job task): a
transient one (5xx, 429, 409, a timeout, a dropped connection) retries that job alone with
exponential backoff (`kube.client.backoff_delays`: 0.8 s doubling to 30 s, jittered), reported on
the Job as a `Synced=False` condition and an `ApiError` Warning event, cleared once a pass
succeeds; a conflict retries quietly. A permanent one (400, 422: the request itself is wrong)
fails the job, naming the cause. Events go through `events.Events`: per object, a burst of 25
then one per 5 minutes.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import random
from collections.abc import Mapping
from typing import Any

import httpx
import trio

from kube.client import ApiStatusError, Informer, backoff_delays, check, typed_items
from . import jobids, kubecalls as kube, reconcile, repair, respec, submission
from .croobjects import WAITING_FOR_SECRET
from .events import Events
from .fetchpolicy import FetchPolicy
from .errors import LogicalError, StreamsError
from .jobspec import JobSpec, read_job
from .objects import LABEL_JOB, LABEL_KIND, LABEL_PE, pe_name
from .conditions import condition_of, now, with_condition
from .peobjects import PeRuntime, token_secret_name
from .pepolicy import PePolicy, secret_refusal, secrets_named, static_refusals

log = logging.getLogger("ykshm.streams")

JobKey = tuple[str, str]          # (namespace, name)
WATCHED = ("Job", "ProcessingElement", "HostPool", "ParallelRegion", "ConsistentRegion",
           "ConsistentRegionOperator", "Pod", "ConfigMap")
LABELLED = ("Pod", "ConfigMap")   # watched by label: only the ones our jobs own
SUBMITTED_KINDS = ("ProcessingElement", "ConfigMap", "HostPool", "ParallelRegion",
                   "ConsistentRegionOperator")   # what a submission makes (and a retry removes)
CLEAN_SLATE_SECONDS = 30.0
RETRY_DELAYS = tuple(backoff_delays())
CONFLICT_DELAYS = (0.05, 0.1, 0.2, 0.4, 0.8)   # a lost write: plan again on the fresher cache
DISRUPTIONS_KEPT = 1000
API_SERVICE_SECONDS = 10.0


@dataclasses.dataclass
class Retry:
    """One job's retry state: failures in a row, and when the next pass may run."""

    attempts: int = 0             # errors in a row (the backoff's step)
    conflicts: int = 0            # conflicts in a row (their own, short schedule)
    until: float = 0.0
    reported: bool = False        # a Synced=False condition was written

    def next_delay(self, conflict: bool) -> float:
        """The wait before the next pass. A conflict (a write lost to a newer version) is a
        controller's everyday business, not an error: the pass runs again as soon as the
        informer has the newer object, on client-go's short schedule, and conflicts never
        push the job into the error backoff (which would freeze it for up to 30 s)."""
        if conflict:
            delay = CONFLICT_DELAYS[min(self.conflicts, len(CONFLICT_DELAYS) - 1)]
            self.conflicts += 1
        else:
            delay = RETRY_DELAYS[min(self.attempts, len(RETRY_DELAYS) - 1)]
            self.attempts += 1
        return delay * (0.75 + 0.5 * random.random())




@dataclasses.dataclass
class Settings:
    bundle_dir: str
    cache_dir: str
    namespace: str | None = None
    operator_argv: list[str] | None = None    # how to start `ykshm cr-operator` (None: not at all)
    fetch_policy: FetchPolicy = dataclasses.field(default_factory=FetchPolicy)
    max_submissions: int = 4                  # submissions fetching and parsing at once
    pe_runtime: PeRuntime = dataclasses.field(default_factory=PeRuntime)   # the PE pods' image
    api_bind: str | None = None               # the bundle endpoint's HOST:PORT (None: not served)
    operator_pod: tuple[str, list[str]] | None = None   # (image, API flags): cr-operators as Deployments
    operator_unready_after: float = 30.0     # seconds an operator Deployment may have no ready pod
    pe_policy: PePolicy = dataclasses.field(default_factory=PePolicy)   # what a Job may ask of PE pods
    repository: Any = None                    # repository.RepositoryConfig (None: no bundle repository)


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
        self.retries: dict[JobKey, Retry] = {}
        self.fetch_slots = trio.CapacityLimiter(settings.max_submissions)
        self.orphans: set[str] = set()                         # PE uids reported without a Job
        self.disrupted: dict[JobKey, dict[str, str]] = {}   # pods deleted by a disruption, per job
        self.events = Events(client)
        self.synced = trio.Event()
        self.operators: Any = None
        self.api_address: tuple[str, int] | None = None
        self.bundle_server: Any = None                      # the PEs' endpoint (their reports)
        self.api_namespaces: set[str] = set()
        self.repository: Any = None                         # the running repository.Repository
        self.tokens_missing: set[JobKey] = set()            # jobs whose token Secret was deleted
        self.next_ids: dict[str, int] = {}                  # namespace -> the ids given start here

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
            if self.settings.repository is not None:     # first: a port in use is one line, at once
                from . import repository
                self.repository = await nursery.start(repository.run, self.settings.repository)
                nursery.start_soon(self._refill_repository)
            for informer in self.informers.values():
                await nursery.start(informer.run, send)
            self.nursery = nursery
            nursery.start_soon(self._route, receive)
            if self.settings.api_bind is not None:
                from .bundleserver import BundleServer, check_api_address, serve
                server = BundleServer(self.client, bundle_dir=self.settings.bundle_dir,
                                      cache_dir=self.settings.cache_dir, pe_launch=self._pe_launch,
                                      on_report=self.mark, job_at=self._job_at,
                                      jobs=lambda: self.informers["Job"].store)
                server.repository = self.repository
                self.api_address = await nursery.start(serve, server, self.settings.api_bind)
                await check_api_address(self.client, self.settings.namespace or "default", self.api_address)
                log.info("bundle endpoint %s:%d, accepted by the API server for the %s Endpoints",
                         *self.api_address, "streams-api")
                self.bundle_server = server
                nursery.start_soon(self._keep_api_services)
            if self.settings.operator_pod is not None:
                from .operators import PodOperators
                self.operators = PodOperators(self.client, *self.settings.operator_pod,
                                              unready_after=self.settings.operator_unready_after)
                nursery.start_soon(self.operators.run)
            elif self.settings.operator_argv is not None:
                from .operators import Supervisor
                self.operators = Supervisor(self.settings.operator_argv)
                nursery.start_soon(self.operators.run)
            nursery.start_soon(self._keep_tokens)
            for job in self.informers["Job"].store:
                self.mark(_job_key_of(job))
            self.synced.set()
            task_status.started()
            await self._reconcile_loop()

    def _pe_launch(self, namespace: str, job: str, index: int) -> int | None:
        """The launch of the job's PE `index` in the cache (what a PE's report belongs to)."""
        pe = self.informers["ProcessingElement"].store.items.get(f"{namespace}/{pe_name(job, index)}")
        return int(pe["spec"].get("launchCount") or 1) if pe is not None else None

    def _job_at(self, ip: str) -> JobKey | None:
        """The job whose PE pod has address `ip` (streams.pepeers), from the caches."""
        from .pepeers import job_at

        return job_at(ip, self.informers["Pod"].store, self.informers["ProcessingElement"].store.items)

    def mark(self, key: JobKey | None) -> None:
        if key is not None and key[1]:
            self.dirty.add(key)
            self._wake.set()

    async def _route(self, receive: trio.MemoryReceiveChannel) -> None:
        async for batch in receive:
            for type_, obj in batch.events or ():
                key = _job_key_of(obj)
                if batch.kind == "Pod" and type_ == "DELETED" and key is not None:
                    self._remember_disruption(key, obj)
                if batch.kind == "ConsistentRegion" and type_ == "MODIFIED":
                    continue        # the operator's status writes: nothing for the controller
                self.mark(key)
            if batch.kind == "ConsistentRegionOperator" and self.operators is not None:
                self.operators.update(self.informers["ConsistentRegionOperator"].store)

    async def _keep_api_services(self) -> None:
        """Every API_SERVICE_SECONDS, the `streams-api` Service and Endpoints of each namespace with
        a job made again if a user deleted them (or pointed at us again): without them no PE of
        that namespace can fetch its bundle (issue 33 item 3)."""
        from .bundleserver import ensure_api_service

        address = self.api_address
        assert address is not None
        while True:
            await trio.sleep(API_SERVICE_SECONDS)
            for namespace in sorted(self.api_namespaces):
                try:
                    await ensure_api_service(self.client, namespace, address, self._repository_port())
                except (ApiStatusError, httpx.HTTPError) as exc:
                    log.warning("streams-api in %s: %s; trying again", namespace, exc)

    def _repository_port(self) -> int | None:
        return self.repository.port if self.repository is not None else None

    def _other_holders(self, namespace: str) -> Any:
        """name -> the other namespaces whose live (not Failed) Jobs use a bundle of that name
        (`repository.Repository.check_owner`: one hash serves every namespace)."""
        def others(name: str) -> list[str]:
            return sorted({(job["metadata"].get("namespace") or "default")
                           for job in self.informers["Job"].store
                           if (job["metadata"].get("namespace") or "default") != namespace
                           and ((job.get("spec") or {}).get("bundle") or {}).get("name") == name
                           and (job.get("status") or {}).get("phase") not in (None, "", "Failed")})
        return others

    async def _refill_repository(self) -> None:
        """At start, every submitted job's bundle from its source into the repository (it keeps
        nothing across restarts, and a relaunched PE bootstraps from it). A failure is logged:
        the job runs on; its PEs' next bootstrap may not find the bundle."""
        from . import fetch, repository

        await self.synced.wait()
        read_configmap, read_secret = fetch.object_readers(
            lambda kind, ns, name: kube.get(self.client, kind, ns, name))
        for job in list(self.informers["Job"].store):
            key = _job_key_of(job)
            if key is None or (job.get("status") or {}).get("phase") not in ("Submitted", "Running"):
                continue
            try:
                spec = read_job(job)
                if not repository.names_a_source(spec.bundle):
                    continue
                async with self.fetch_slots:
                    data = await fetch.fetch_bundle(spec.bundle, namespace=key[0], bundle_dir=self.settings.bundle_dir,
                                                    cache_dir=self.settings.cache_dir, read_configmap=read_configmap,
                                                    read_secret=read_secret, policy=self.settings.fetch_policy)
                await self.repository.store(str(spec.bundle["name"]), data)
            except (LogicalError, StreamsError, ApiStatusError, httpx.HTTPError) as exc:
                log.warning("job %s/%s: its bundle could not be stored in the repository again: %s", *key, exc)

    async def _keep_tokens(self) -> None:
        """Every API_SERVICE_SECONDS, each job's token Secret `JOB-token` looked for (Secrets are
        not watched): one a user deleted marks its job, whose next pass makes it again with a new
        token (review probe P5: it was made again only when a cr-operator restarted, and never
        for a job without consistent regions, so relaunched PE pods could not mount it)."""
        while True:
            await trio.sleep(API_SERVICE_SECONDS)
            for job in list(self.informers["Job"].store):
                key = _job_key_of(job)
                if key is None or job["metadata"].get("deletionTimestamp") or \
                        not self.objects_of("ProcessingElement", key):
                    continue                  # not submitted yet, or going: nothing to keep
                try:
                    secret = await kube.get(self.client, "Secret", key[0], token_secret_name(key[1]))
                except (ApiStatusError, httpx.HTTPError) as exc:
                    log.warning("token Secret of %s/%s: %s; trying again", *key, exc)
                    continue
                if secret is None and key not in self.tokens_missing:
                    self.tokens_missing.add(key)
                    self.mark(key)
                elif secret is not None:
                    self.tokens_missing.discard(key)

    def _remember_disruption(self, key: JobKey, pod: Mapping[str, Any]) -> None:
        """A pod deleted with `DisruptionTarget` (evicted, preempted): the plan counts it as a
        failure, not a user's deletion. Only the latest few per job are kept."""
        why = reconcile.disruption(pod)
        if why:
            seen = self.disrupted.setdefault(key, {})
            seen[pod["metadata"]["name"]] = why
            while len(seen) > DISRUPTIONS_KEPT:
                del seen[next(iter(seen))]

    async def _reconcile_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            while self.dirty:
                key = self.dirty.pop()
                try:
                    await self.reconcile(key)
                except Exception as exc:  # noqa: BLE001 - the boundary: one job's error stays its own
                    self._on_error(key, exc, "reconcile")
                await trio.sleep(0)

    # --- errors: retry with backoff per job, or fail the job ------------------------------

    def _on_error(self, key: JobKey, exc: Exception, what: str) -> None:
        """What an error in one job's pass, submission or width change becomes (never raises)."""
        if kube.permanent(exc) and self.job(key) is not None and key not in self.submitting:
            scope = trio.CancelScope()
            self.submitting[key] = scope
            self.nursery.start_soon(self._fail_task, key, exc, what, scope)
            return
        if not isinstance(exc, (ApiStatusError, httpx.HTTPError, kube.Stale)):
            log.error("job %s/%s: %s failed", key[0], key[1], what, exc_info=exc)
        quiet = isinstance(exc, kube.Stale) or (isinstance(exc, ApiStatusError) and exc.code == 409)
        if isinstance(exc, (ApiStatusError, httpx.HTTPError, kube.Stale)):
            (log.info if quiet else log.warning)("job %s/%s: %s: %s; retrying", key[0], key[1], what, exc)
        self._retry(key, exc, what, quiet=quiet)

    def _retry(self, key: JobKey, exc: Exception, what: str, quiet: bool) -> None:
        retry = self.retries.setdefault(key, Retry())
        delay = retry.next_delay(conflict=quiet)
        retry.until = trio.current_time() + delay
        self.nursery.start_soon(self._retry_later, key, delay)
        if not quiet:
            self.nursery.start_soon(self._report_retry, key, retry, f"{what}: {_describe(exc)}; "
                                    f"retrying in {delay:.1f}s (attempt {retry.attempts})", _reason_of(exc))

    async def _retry_later(self, key: JobKey, delay: float) -> None:
        await trio.sleep(delay)
        self.mark(key)

    async def _report_retry(self, key: JobKey, retry: Retry, message: str, reason: str) -> None:
        """A Warning event (rate-limited) and, once per error spell, a Synced=False condition."""
        job = self.job(key)
        if job is None:
            return
        await self.events.post(job, "ApiError", message, "Warning")
        if not retry.reported:
            retry.reported = await self._condition(job, "Synced", "False", reason, message)

    async def _succeeded(self, key: JobKey) -> None:
        """A pass went through: forget the job's retries; clear a Synced=False it shows."""
        retry = self.retries.pop(key, None)
        job = self.job(key)
        if retry is not None and job is not None and condition_of(job, "Synced") == "False":
            await self._condition(job, "Synced", "True", "Recovered",
                                  f"the API calls went through after {retry.attempts} retries")

    async def _condition(self, job: dict[str, Any], type_: str, value: str, reason: str,
                         message: str) -> bool:
        """Set one condition of the job's status (best effort: False when the write failed)."""
        status = dict(job.get("status") or {})
        status["conditions"] = with_condition(status.get("conditions") or [], {
            "type": type_, "status": value, "reason": reason, "message": message[:1024],
            "lastTransitionTime": now()})
        try:
            return await kube.put_status(self.client, job, status) is not None
        except (ApiStatusError, httpx.HTTPError):
            return False

    async def _fail_task(self, key: JobKey, exc: Exception, what: str, scope: trio.CancelScope) -> None:
        """A permanent API error: the job fails, naming it, from a clean slate (its own task:
        the clean slate waits for the deletions)."""
        try:
            with scope:
                job = self.job(key)
                if job is not None:
                    await self._fail(job, "Invalid", f"{what}: the API server refused a write: "
                                     f"{_describe(exc)}", clean=True)
        except Exception as again:  # noqa: BLE001 - the boundary
            self._on_error(key, again, "recording the failure")
        finally:
            if self.submitting.get(key) is scope:
                del self.submitting[key]

    # --- one job ---------------------------------------------------------------------------

    async def reconcile(self, key: JobKey) -> None:
        job = self.job(key)
        if job is None:
            await self._report_orphans(key)
        if job is None or job["metadata"].get("deletionTimestamp"):
            scope = self.submitting.pop(key, None)
            if scope is not None:
                scope.cancel()
            self.reported.pop(key, None)
            self.retries.pop(key, None)
            self.disrupted.pop(key, None)
            return
        retry = self.retries.get(key)
        if key in self.submitting or (retry is not None and trio.current_time() < retry.until):
            return                          # a task owns the job, or its retry will mark it
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
        refused = await self._pod_refusals(key[0], spec)
        if refused:
            await self._fail(job, "ForbiddenPodOverride", "the PE pods would get what a Job may not ask for: "
                             + "; ".join(refused), clean=True)
            return
        if self.api_address is not None and key[0] not in self.api_namespaces:
            from .bundleserver import ensure_api_service
            await ensure_api_service(self.client, key[0], self.api_address, self._repository_port())
            self.api_namespaces.add(key[0])
        modified = phase in ("Submitted", "Running") and status.get("observedGeneration") not in (None, generation)
        if phase in ("", "Submitting", "Failed") or modified:
            scope = trio.CancelScope()
            self.submitting[key] = scope
            self.nursery.start_soon(self._submission, key, job, spec, scope)
            return
        await self._reconcile_running(key, job, spec)
        await self._succeeded(key)

    async def _pod_refusals(self, namespace: str, spec: JobSpec) -> list[str]:
        """The Job's PE pod overrides outside the allow-list (pepolicy), one line per field."""
        refused = static_refusals(spec.pe_options, self.settings.pe_policy)
        for field, name in secrets_named(spec.pe_options):
            why = secret_refusal(field, name, await kube.get(self.client, "Secret", namespace, name))
            if why:
                refused.append(why)
        return refused

    async def _report_orphans(self, key: JobKey) -> None:
        """A PE whose Job does not exist (made by hand, or left by an orphaning delete): one
        Warning event per PE; nothing is run for it."""
        for pe in self.objects_of("ProcessingElement", key):
            uid = pe["metadata"].get("uid", "")
            meta = pe["metadata"]
            if uid not in self.orphans and not meta.get("deletionTimestamp") and not meta.get("ownerReferences"):
                self.orphans.add(uid)
                await self.events.post(pe, "OrphanPE", f"processing element {pe['metadata']['name']}: its "
                                       f"Job {key[0]}/{key[1]} does not exist; nothing runs for it", "Warning")

    async def _reconcile_running(self, key: JobKey, job: dict[str, Any], spec: JobSpec) -> None:
        configmaps = [c for c in self.objects_of("ConfigMap", key)
                      if (c["metadata"].get("labels") or {}).get(LABEL_KIND) == "aadl"]
        pools = self.objects_of("HostPool", key)
        view = reconcile.JobView(job=job, configmaps=configmaps, pes=self.objects_of("ProcessingElement", key),
                                 pods=self.objects_of("Pod", key),
                                 host_pools_expected=int((job.get("status") or {}).get("hostPools") or 0),
                                 host_pools_present=len(pools), disrupted=self.disrupted.get(key, {}),
                                 pe_reports=self.bundle_server.reports(*key) if self.bundle_server else {})
        if await self._repaired(key, job, spec, view):
            return                  # the next pass sees what was re-made (the plan would not)
        await self._carry_out_all(reconcile.plan_job(view, spec=spec, reported=self.reported.setdefault(key, set()),
                                                     runtime=self.settings.pe_runtime))
        await self._check_widths(key, job, spec)
        await self._part_statuses(key, configmaps)
        await self._job_status(job, view)

    async def _repaired(self, key: JobKey, job: dict[str, Any], spec: JobSpec,
                        view: reconcile.JobView) -> bool:
        """Re-make what a user deleted of the job (repair.py), once its widths are settled."""
        regions = self.objects_of("ParallelRegion", key)
        settled = key not in self.widths_busy and all(
            (r.get("status") or {}).get("width") in (r["spec"].get("width"), None) or
            (r.get("status") or {}).get("refusedWidth") == r["spec"].get("width") for r in regions)
        what = repair.missing([reconcile.pe_doc(c) for c in view.configmaps], view.pes, view.host_pools_present,
                              view.host_pools_expected, len(self.objects_of("ConsistentRegion", key)),
                              bool(self.objects_of("ConsistentRegionOperator", key)),
                              secret_missing=key in self.tokens_missing or any(
                                  (o.get("status") or {}).get("phase") == WAITING_FOR_SECRET
                                  for o in self.objects_of("ConsistentRegionOperator", key)),
                              job_configmap_missing=not any(
                                  (c["metadata"].get("labels") or {}).get(LABEL_KIND) == "job"
                                  for c in self.objects_of("ConfigMap", key)))
        if not what or not settled:
            return False
        made = await repair.repair(self, key, job, spec, self.objects_of("ConfigMap", key), view.pes,
                                   regions, what)
        if made:
            self.tokens_missing.discard(key)
        return made

    async def _part_statuses(self, key: JobKey, configmaps: list[dict[str, Any]]) -> None:
        """HostPool and ParallelRegion status (phase, the region's pod selector for /scale)."""
        docs = [reconcile.pe_doc(c) for c in configmaps]
        for kind, new_status in (("ParallelRegion", lambda o: reconcile.region_status(o, docs, key[1])),
                                 ("HostPool", lambda o: reconcile.pool_status(o, docs))):
            for obj in self.objects_of(kind, key):
                if key in self.widths_busy and kind == "ParallelRegion":
                    continue                      # the width change writes it
                status = new_status(obj)
                if status != (obj.get("status") or {}):
                    kube.written(await kube.put_status(self.client, obj, status))

    async def _carry_out_all(self, steps: list[reconcile.Step]) -> None:
        """The plan's steps: each PE's in order, different PEs' concurrently (bounded, as they touch
        only their own PE, pod and Service), then the steps about no one PE (the job's events)."""
        per_pe: dict[str, list[reconcile.Step]] = {}
        rest: list[reconcile.Step] = []
        for step in steps:
            pe = (step.obj["metadata"].get("labels") or {}).get(LABEL_PE)
            (per_pe.setdefault(pe, []) if pe is not None else rest).append(step)

        async def in_order(chain: list[reconcile.Step]) -> None:
            for step in chain:
                await self._carry_out(step)

        await kube.concurrently([functools.partial(in_order, chain) for chain in per_pe.values()])
        await in_order(rest)

    async def _carry_out(self, step: reconcile.Step) -> None:
        obj = step.obj
        if step.what == "create":
            await kube.create(self.client, obj)
        elif step.what == "update_pe":
            kube.written(await kube.replace(self.client, obj))
            if step.reason:
                await self.events.post(obj, step.reason, step.message, step.type_)
            return
        elif step.what == "delete":
            meta = obj["metadata"]
            await kube.delete(self.client, obj["kind"], meta.get("namespace") or "default",
                              meta["name"], propagation=step.propagation, uid=meta.get("uid"))
        elif step.what == "pe_status":
            kube.written(await kube.put_status(self.client, obj, step.status or {}))
        if step.what == "event" or (step.reason and step.what != "pe_status"):
            await self.events.post(obj, step.reason, step.message, step.type_)

    async def _job_status(self, job: dict[str, Any], view: reconcile.JobView) -> None:
        status = dict(job.get("status") or {})
        pes = view.pes
        full = bool(pes) and all((pe.get("status") or {}).get("connectivity") == "Full" for pe in pes)
        phase = "Running" if full else "Submitted"
        new = {**status, "phase": phase, "peCount": len(view.configmaps)}
        if new != status:
            kube.written(await kube.put_status(self.client, job, new))
            if phase == "Running" and status.get("phase") != "Running":
                await self.events.post(job, "Running",
                                      f"all {len(pes)} processing elements are running and connected")

    # --- submission ------------------------------------------------------------------------

    async def _submission(self, key: JobKey, job: dict[str, Any], spec: JobSpec,
                          scope: trio.CancelScope) -> None:
        failed: Exception | None = None
        try:
            with scope:
                await self._submit(key, job, spec)
        except Exception as exc:  # noqa: BLE001 - the boundary: one job's error stays its own
            failed = exc
        finally:
            if self.submitting.get(key) is scope:
                del self.submitting[key]
        if failed is not None:
            self._on_error(key, failed, "submission")
        else:
            self.retries.pop(key, None)
            self.mark(key)

    async def _submit(self, key: JobKey, job: dict[str, Any], spec: JobSpec) -> None:
        status = job.get("status") or {}
        generation = job["metadata"].get("generation", 1)
        if status.get("phase") in ("Submitted", "Running") and status.get("observedGeneration") != generation:
            if await self._respec(key, job, spec):
                return
            await self.events.post(job, "Modified", f"the spec changed (generation {generation}): "
                                   "resubmitting from a clean slate")
            await self._clean_slate(key, job)
        elif status.get("phase") == "Failed":
            await self._clean_slate(key, job)
        job_id = self._job_id(key, job)
        # the id is stored before anything is made with it: a lost write (409) is tried again
        job = kube.written(await kube.put_status(self.client, job, {
            "phase": "Submitting", "submissionTime": now(), "jobId": job_id,
            "observedGeneration": job["metadata"].get("generation", 1)}))
        spec = dataclasses.replace(spec, job_id=job_id)
        await self.events.post(job, "Submitting", f"fetching bundle {spec.bundle_name}")
        timeout = spec.submission_timeout
        with trio.move_on_after(timeout if math.isfinite(timeout) else math.inf) as deadline:
            try:
                prepared = await submission.submit(self.client, job, spec,
                                                   bundle_dir=self.settings.bundle_dir,
                                                   cache_dir=self.settings.cache_dir,
                                                   policy=self.settings.fetch_policy, slots=self.fetch_slots,
                                                   repository=self.repository,
                                                   others=self._other_holders(key[0]))
            except submission.SUBMISSION_ERRORS as exc:
                if exc.public != str(exc):
                    log.warning("job %s/%s: %s", key[0], key[1], exc)     # the detail, for the operator only
                await self._fail(job, type(exc).__name__.removesuffix("Error") or "Error",
                                 exc.public, clean=True)
                return
        if deadline.cancelled_caught:
            await self._fail(job, "SubmissionTimeout",
                             f"submission not done within submissionTimeOutInSeconds={timeout:g}", clean=True)
            return
        latest = self.job(key) or job
        ignored = submission.unused_note(prepared.app)
        done = {**(latest.get("status") or {}), "phase": "Submitted", "peCount": len(prepared.pes), "jobId": job_id,
                "hostPools": len(prepared.app.host_pools), "fusionNodes": prepared.nodes, "message": "",
                "observedGeneration": job["metadata"].get("generation", 1),
                "conditions": with_condition((latest.get("status") or {}).get("conditions") or [], {
                    "type": "Submitted", "status": "True", "reason": "Fused",
                    "message": f"fused into {len(prepared.pes)} PEs{ignored}", "lastTransitionTime": now()})}
        kube.written(await kube.put_status(self.client, latest, done))
        if unused := submission.unused_message(prepared.app):
            await self.events.post(latest, "UnusedSubmissionTimeValues", unused, "Warning")
        await self.events.post(latest, "Submitted",
                              f"bundle {spec.bundle_name} fused into {len(prepared.pes)} processing elements")

    def _job_id(self, key: JobKey, job: Mapping[str, Any]) -> int:
        """The job's id (streams/jobids.py): the one it has, else the namespace's next, which is
        taken at once (a submission that starts meanwhile gets the one after)."""
        job_id = jobids.job_id_of(job)
        if job_id is None:
            job_id = jobids.next_id(self.informers["Job"].store, key[0], self.next_ids.get(key[0], 0))
        self.next_ids[key[0]] = max(self.next_ids.get(key[0], 0), job_id + 1)
        return job_id

    async def _respec(self, key: JobKey, job: dict[str, Any], spec: JobSpec) -> bool:
        """A spec edit that keeps the job's shape, applied in place (respec: only the PEs whose
        AADL or pod it changes relaunch); False when the job is to be resubmitted (also when the
        bundle cannot be loaded within submissionTimeOutInSeconds: the resubmission reports why)."""
        timeout = spec.submission_timeout
        with trio.move_on_after(timeout if math.isfinite(timeout) else math.inf):
            try:
                async with self.fetch_slots:
                    return await respec.apply(self, key, job, spec)
            except submission.SUBMISSION_ERRORS as exc:
                log.info("job %s/%s: the edit is resubmitted: %s", key[0], key[1], exc)
        return False

    async def _fail(self, job: dict[str, Any], reason: str, message: str, clean: bool = False) -> None:
        log.warning("job %s/%s failed: %s: %s", job["metadata"].get("namespace"),
                    job["metadata"]["name"], reason, message)
        if clean:
            await self._clean_slate(_job_key_of(job), job)
        latest = self.job(_job_key_of(job)) or job
        status = {**(latest.get("status") or {}), "phase": "Failed", "message": message,
                  "observedGeneration": latest["metadata"].get("generation", 1),
                  "conditions": with_condition((latest.get("status") or {}).get("conditions") or [], {
                      "type": "Submitted", "status": "False", "reason": reason, "message": message,
                      "lastTransitionTime": now()})}
        kube.written(await kube.put_status(self.client, latest, status))
        await self.events.post(latest, reason, message, "Warning")

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
        for obj in await self.listed(key, "ConsistentRegion"):
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

    async def listed(self, key: JobKey, kind: str) -> list[dict[str, Any]]:
        """The job's objects of a kind the controller does not watch, read from the API."""
        resp = await self.client.get(kube.KINDS[kind].collection(key[0]),
                                     params={"labelSelector": f"{LABEL_JOB}={key[1]}"})
        return typed_items(check(resp) or {})

    # --- parallel region width (/scale) ----------------------------------------------------

    async def _check_widths(self, key: JobKey, job: dict[str, Any], spec: JobSpec) -> None:
        regions = self.objects_of("ParallelRegion", key)
        changed = [r for r in regions if (r.get("status") or {}).get("width") != r["spec"].get("width")
                   and (r.get("status") or {}).get("refusedWidth") != r["spec"].get("width")]
        if not changed or key in self.widths_busy:
            return
        self.widths_busy.add(key)
        self.nursery.start_soon(self._rewiden, key, job, spec, regions, changed)

    async def _rewiden(self, key: JobKey, job: dict[str, Any], spec: JobSpec,
                       regions: list[dict[str, Any]], changed: list[dict[str, Any]]) -> None:
        """The seed's second backend role: re-fuse from the stored ADL for new widths; only
        PEs whose content id changed get a new launch (by the plan's content-id rule)."""
        from . import refuse
        try:
            await refuse.apply_widths(self, key, job, spec, regions, changed)
        except Exception as exc:  # noqa: BLE001 - the boundary: one job's error stays its own
            self.widths_busy.discard(key)
            self._on_error(key, exc, "width change")
            return
        self.widths_busy.discard(key)
        self.mark(key)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ApiStatusError):
        return f"{exc.code} {exc.reason}: {exc.message}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _reason_of(exc: BaseException) -> str:
    if isinstance(exc, ApiStatusError):
        return exc.reason or "ApiError"
    if isinstance(exc, httpx.TimeoutException):
        return "Timeout"
    if isinstance(exc, httpx.HTTPError):
        return "ConnectionError"
    return "InternalError"


