"""A changed Job spec applied in place: only the PEs whose AADL or pod it changes relaunch.

OpenStreams' content-id rule (`JobLauncher.addPes`): a PE whose AADL keeps its content id is left
running, one whose AADL changed gets the new content id and a new launch, its other state (launch
count, connectivity) kept. ykshm applies a spec edit (a new `metadata.generation` of a Submitted or
Running job, the seed's "modify") the same way when the edit leaves the job's shape as it is: the
bundle's ADL is the stored one (`JOB-adl`) and a fresh fusion gives the same PEs with the same
operators (so the same Services, HostPools, regions and operator), with the parallel regions'
fusion type unchanged. Then:
- each AADL ConfigMap whose AADL or `pe.json` changed is rewritten (a submission-time value that
  one operator reads changes that PE's AADL alone);
- each PE whose content id or pod inputs (`objects.pod_inputs`: the PE options, the job's
  resources and queue, the certificate's validity under TLS) changed gets its new spec and one new
  launch; the plan then makes its new pod and deletes the old one. Every other PE runs on, its pod
  untouched (`submissionTimeOutInSeconds`, say, relaunches nothing; `runtimeTraceLevel`, which
  every pod's environment carries, relaunches every PE);
- the job ConfigMap keeps its transport pair (`transportcert`), made or dropped when TLS is
  switched on or off;
- the Job records the generation with a `Modified` event naming the PEs relaunched.
Any other edit (another bundle or ADL, another PE count or layout, e.g. `fusion` or a width from a
submission-time value; a region scaled away from the ADL's width) is resubmitted from a clean slate
by the controller, as before. A PE made before pod inputs were recorded counts as changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from . import conditions, kubecalls as kube, objects, reconcile, submission
from .jobspec import JobSpec
from .objects import ADL_XML, ANNOTATION_POD_INPUTS, LABEL_CONTENT, LABEL_KIND, LABEL_PE


def _by_kind(configmaps: Sequence[Mapping[str, Any]], kind: str) -> list[Mapping[str, Any]]:
    return [c for c in configmaps if (c["metadata"].get("labels") or {}).get(LABEL_KIND) == kind]


def same_shape(prepared: submission.Prepared, adl_cm: Mapping[str, Any] | None,
               aadl_cms: Sequence[Mapping[str, Any]], regions: Sequence[Mapping[str, Any]],
               fusion_type: Any) -> bool:
    """Whether the fresh fusion is the running job's shape (pure): same ADL, same PEs with the
    same operators, the regions' fusion type unchanged."""
    if adl_cm is None or (adl_cm.get("data") or {}).get(ADL_XML) != prepared.app.adl.decode("utf-8", "replace"):
        return False
    running = {int(d["index"]): list(d["operators"]) for d in map(reconcile.pe_doc, aadl_cms)}
    fresh = {int(d["index"]): list(d["operators"]) for d in prepared.docs}
    return running == fresh and all(r["spec"].get("type") == fusion_type for r in regions)


def relaunches(spec: JobSpec, job: Mapping[str, Any], prepared: submission.Prepared,
               pes: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The PEs to replace (pure): each whose content id or pod inputs changed, with the new
    spec and one more launch."""
    inputs = objects.pod_inputs(spec)
    by_index = {int(pe["spec"]["id"]): pe for pe in pes if not pe["metadata"].get("deletionTimestamp")}
    out = []
    for doc, cid in zip(prepared.docs, prepared.content_ids):
        pe = by_index.get(int(doc["index"]))
        if pe is None:
            continue                    # the plan re-creates a deleted PE from its ConfigMap
        have = (pe["metadata"].get("annotations") or {}).get(ANNOTATION_POD_INPUTS)
        if pe["spec"].get("contentId") == cid and have == inputs:
            continue
        want = objects.pe_object(spec, job, doc, cid, int(pe["spec"].get("launchCount") or 1) + 1)
        meta = {**pe["metadata"], "annotations": {**(pe["metadata"].get("annotations") or {}),
                                                  **want["metadata"]["annotations"]}}
        out.append({**pe, "metadata": meta, "spec": want["spec"]})
    return out


async def apply(ctl: Any, key: tuple[str, str], job: dict[str, Any], spec: JobSpec) -> bool:
    """Apply the edited spec in place if it keeps the job's shape; False (nothing written) when
    the job must be resubmitted. Submission errors (a bundle that cannot be fetched) propagate."""
    app = await submission.load(ctl.client, spec, bundle_dir=ctl.settings.bundle_dir,
                                cache_dir=ctl.settings.cache_dir, policy=ctl.settings.fetch_policy)
    nodes = int((job.get("status") or {}).get("fusionNodes") or 0) or max(await kube.schedulable_nodes(ctl.client), 1)
    prepared = submission.prepare(app, spec, nodes=nodes)
    configmaps = ctl.objects_of("ConfigMap", key)
    adl_cm = next(iter(_by_kind(configmaps, "adl")), None)
    aadl_cms = _by_kind(configmaps, "aadl")
    if not same_shape(prepared, adl_cm, aadl_cms, ctl.objects_of("ParallelRegion", key), spec.fusion.get("type")):
        return False
    existing = {int((c["metadata"].get("labels") or {}).get(LABEL_PE, -1)): c for c in aadl_cms}
    for doc, aadl, cid in zip(prepared.docs, prepared.aadls, prepared.content_ids):
        want = objects.aadl_configmap(spec, job, doc, aadl, cid)
        have = existing[int(doc["index"])]
        if have.get("data") != want["data"] or (have["metadata"].get("labels") or {}).get(LABEL_CONTENT) != cid:
            meta = {**have["metadata"], "labels": want["metadata"]["labels"]}
            kube.written(await kube.replace(ctl.client, {**want, "metadata": meta}))
    await submission.write_job_configmap(ctl.client, spec, job, prepared)
    replaced = relaunches(spec, job, prepared, ctl.objects_of("ProcessingElement", key))
    for pe in replaced:
        kube.written(await kube.replace(ctl.client, pe))
    await _record(ctl, key, job, prepared, replaced)
    return True


async def _record(ctl: Any, key: tuple[str, str], job: Mapping[str, Any], prepared: submission.Prepared,
                  replaced: Sequence[Mapping[str, Any]]) -> None:
    """The generation applied: status (`observedGeneration`, the Submitted condition) and events."""
    generation = job["metadata"].get("generation", 1)
    names = ", ".join(pe["metadata"]["name"] for pe in replaced) or "none"
    what = f"{len(replaced)} of {len(prepared.pes)} processing elements relaunched ({names})"
    latest = ctl.job(key) or job
    status = {**(latest.get("status") or {}), "observedGeneration": generation, "message": "",
              "conditions": conditions.with_condition((latest.get("status") or {}).get("conditions") or [], {
                  "type": "Submitted", "status": "True", "reason": "Modified",
                  "message": f"generation {generation} applied in place: {what}{submission.unused_note(prepared.app)}",
                  "lastTransitionTime": conditions.now()})}
    kube.written(await kube.put_status(ctl.client, latest, status))
    if unused := submission.unused_message(prepared.app):
        await ctl.events.post(latest, "UnusedSubmissionTimeValues", unused, "Warning")
    await ctl.events.post(latest, "Modified", f"the spec changed (generation {generation}), applied in place: {what}")
