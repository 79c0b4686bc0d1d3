"""A parallel region's width changed (`kubectl scale stpr/JOB-REGION --replicas=W`): re-fuse.

The seed's time-sensitive backend role. The job's ADL is read back from its ConfigMap
(`JOB-adl`) and re-fused with every region's current width by `fusion.refuse`, which keeps every
PE that can stay as it was; the AADL ConfigMaps are brought in line: new PEs' ConfigMaps and PEs are created, removed PEs'
ConfigMaps deleted (the plan then deletes those PEs), and a changed AADL updates its ConfigMap's
content id, which gives that PE (and only that PE) a new launch through the plan's content-id
rule. The job ConfigMap's port labels (`operator_port_labels.properties`, where the runtime's name
service finds each operator input port) are rewritten for the new PEs before any of them starts. The region's `status.width` records the width applied, written last: a change cut short by
an API error is simply applied again (every write here is idempotent).

A width the fuser refuses (beyond MAX_WIDTH, a placement it cannot make) or that the API refuses
for good (400/422) is recorded once on each changed region (`status.refusedWidth`, a
`WidthApplied=False` condition, `message`, one `WidthRefused` Warning event); objects this
attempt made are deleted with Foreground propagation (the seed's clean slate for a failed UDP),
and the width is not tried again until `spec.width` changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kube.client import ApiStatusError

from . import adl as adl_mod
from . import conditions, kubecalls as kube, objects, reconcile, submission
from .jobspec import JobSpec
from .objects import ADL_XML, LABEL_CONTENT, LABEL_KIND, LABEL_PE


async def apply_widths(ctl: Any, key: tuple[str, str], job: dict[str, Any], spec: JobSpec,
                       regions: list[dict[str, Any]], changed: list[dict[str, Any]]) -> None:
    configmaps = ctl.objects_of("ConfigMap", key)
    adl_cm = next((c for c in configmaps
                   if (c["metadata"].get("labels") or {}).get(LABEL_KIND) == "adl"), None)
    if adl_cm is None:
        await _refused(ctl, changed, f"the job's ADL ConfigMap {key[1]}-adl is gone; "
                                     "the width cannot be applied (resubmit the job)")
        return
    app = adl_mod.parse_adl(((adl_cm.get("data") or {}).get(ADL_XML) or "").encode(),
                            submission_values=spec.submission_values)
    widths = {r["spec"]["name"]: int(r["spec"]["width"]) for r in regions}
    nodes = int((job.get("status") or {}).get("fusionNodes") or 1)
    current = [reconcile.pe_doc(c) for c in configmaps
               if (c["metadata"].get("labels") or {}).get(LABEL_KIND) == "aadl"]
    try:
        prepared = submission.prepare_widths(app, spec, current, nodes=nodes, widths=widths)
    except submission.SUBMISSION_ERRORS as exc:
        await _refused(ctl, changed, str(exc))
        return
    existing = {int((c["metadata"].get("labels") or {}).get(LABEL_PE, -1)): c for c in configmaps
                if (c["metadata"].get("labels") or {}).get(LABEL_KIND) == "aadl"}
    made: list[dict[str, Any]] = []
    try:
        added, replaced = await _write_configmaps(ctl, spec, job, prepared, existing, made)
        await submission.write_job_configmap(ctl.client, spec, job, prepared)
    except ApiStatusError as exc:
        if not kube.permanent(exc):
            raise
        for obj in reversed(made):
            await kube.delete(ctl.client, obj["kind"], key[0], obj["metadata"]["name"],
                              propagation="Foreground")
        await _refused(ctl, changed, f"the API server refused a write: {exc.code} {exc.reason}: {exc.message}")
        return
    wanted = {doc["index"] for doc in prepared.docs}
    removed = [i for i in existing if i not in wanted]
    for index in removed:
        cm = existing[index]
        await kube.delete(ctl.client, "ConfigMap", key[0], cm["metadata"]["name"])
    await _members(ctl, key, prepared)
    await _record(ctl, job, prepared, changed, added, removed, replaced)


async def _refused(ctl: Any, changed: list[dict[str, Any]], why: str) -> None:
    """Record a refused width once per region: status and one Warning event."""
    now = conditions.now()
    for region in changed:
        width = region["spec"]["width"]
        message = f"width {width} refused: {why}"
        status = {**(region.get("status") or {}), "refusedWidth": width, "message": message,
                  "observedGeneration": region["metadata"].get("generation", 1),
                  "conditions": [{"type": "WidthApplied", "status": "False", "reason": "WidthRefused",
                                  "message": message, "lastTransitionTime": now,
                                  "observedGeneration": region["metadata"].get("generation", 1)}]}
        kube.written(await kube.put_status(ctl.client, region, status))
        await ctl.events.post(region, "WidthRefused", message, "Warning")


async def _write_configmaps(ctl: Any, spec: JobSpec, job: Mapping[str, Any], prepared: Any,
                            existing: Mapping[int, Mapping[str, Any]],
                            made: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    added, replaced = [], []
    for doc, aadl, cid in zip(prepared.docs, prepared.aadls, prepared.content_ids):
        want = objects.aadl_configmap(spec, job, doc, aadl, cid)
        have = existing.get(doc["index"])
        if have is None:
            pe = objects.pe_object(spec, job, doc, cid)
            for obj in (want, pe):
                if await kube.create(ctl.client, obj) is not None:
                    made.append(obj)
            added.append(doc["index"])
        elif (have["metadata"].get("labels") or {}).get(LABEL_CONTENT) != cid:
            updated = {**want, "metadata": {**have["metadata"], "labels": want["metadata"]["labels"]}}
            kube.written(await kube.replace(ctl.client, updated))
            replaced.append(doc["index"])
    return added, replaced


async def _members(ctl: Any, key: tuple[str, str], prepared: Any) -> None:
    """Each ConsistentRegion's `pesInRegion` as the new fusion has it (its operator follows)."""
    for cr in await ctl.listed(key, "ConsistentRegion"):
        index = (cr.get("spec") or {}).get("regionIndex")
        members = sorted(d["index"] for d in prepared.docs if index in d["consistentRegions"])
        if members and members != (cr.get("spec") or {}).get("pesInRegion"):
            kube.written(await kube.replace(ctl.client, {**cr, "spec": {**cr["spec"], "pesInRegion": members}}))


async def _record(ctl: Any, job: Mapping[str, Any], prepared: Any, changed: list[dict[str, Any]],
                  added: list[int], removed: list[int], replaced: list[int]) -> None:
    for region in changed:
        width = region["spec"]["width"]
        old = (region.get("status") or {}).get("width")
        status = {k: v for k, v in (region.get("status") or {}).items()
                  if k not in ("refusedWidth", "message", "conditions")}
        kube.written(await kube.put_status(ctl.client, region, {**status, "width": width}))
        if old is not None:
            await ctl.events.post(region, "Rescaled",
                                  f"width {old} -> {width}: {len(added)} PEs added, {len(removed)} "
                                  f"removed, {len(replaced)} replaced")
