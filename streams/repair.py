"""Objects the controller made and a user deleted are made again (the job stays whole).

A running job needs its AADL ConfigMaps (`JOB-N-aadl`), its job ConfigMap `JOB` (the port labels
its PEs mount at /etc/config/job: a PE pod relaunched without it cannot start), its HostPools, and, when it has
consistent regions, one ConsistentRegion per region and the ConsistentRegionOperator, and its
token Secret `JOB-token` (the controller may not read Secrets: the cr-operator, which must not
serve without it, reports it missing as its phase `WaitingForSecret`; the Secret made again holds a
new token). When one
is missing while the job's widths are settled, the job is fused again from the stored ADL
(`JOB-adl`) with the widths applied, keeping every PE as it is (a PE whose ConfigMap is gone is
described by its own spec: `id`, `operators`), so every re-made AADL is byte-identical and no PE
gets a new launch; the missing objects are created (a job ConfigMap under transport security with a
new certificate and key, the old key being lost with it: then every PE relaunches, so the job's PEs
agree on one pair). A repaired ConsistentRegion is made with an
empty status; the running cr-operator, which waits for it rather than failing, writes its region's
status there, so the sequence ids go on from where they were (an operator restarted in between
would start them again: they lived in the deleted object). A missing `JOB-adl` cannot be
repaired: the job is reported (resubmit it, or change its spec).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from . import adl as adl_mod
from . import kubecalls as kube, reconcile, submission, transportcert
from .jobspec import JobSpec
from .objects import ADL_XML, LABEL_KIND

REPAIRED_KINDS = ("ConfigMap", "HostPool", "ConsistentRegion", "ConsistentRegionOperator", "Secret")
TOKEN_SECRET = "the token Secret"
JOB_CONFIGMAP = "the job ConfigMap"


def missing(docs: Sequence[Mapping[str, Any]], pes: Sequence[Mapping[str, Any]], pools: int,
            pools_expected: int, crs: int, cro: bool, secret_missing: bool = False,
            job_configmap_missing: bool = False) -> list[str]:
    """What of the job is gone (pure): empty when it is whole."""
    gone = []
    have = {int(d["index"]) for d in docs}
    gone += [f"ConfigMap {pe['metadata']['name']}-aadl" for pe in pes
             if int(pe["spec"]["id"]) not in have and not pe["metadata"].get("deletionTimestamp")]
    if pools < pools_expected:
        gone.append(f"{pools_expected - pools} HostPool(s)")
    regions = {r for d in docs for r in d.get("consistentRegions") or ()}
    if crs < len(regions):
        gone.append(f"{len(regions) - crs} ConsistentRegion(s)")
    if regions and not cro:
        gone.append("the ConsistentRegionOperator")
    if secret_missing:
        gone.append(TOKEN_SECRET)
    if job_configmap_missing:
        gone.append(JOB_CONFIGMAP)
    return gone


async def repair(ctl: Any, key: tuple[str, str], job: Mapping[str, Any], spec: JobSpec,
                 configmaps: Sequence[Mapping[str, Any]], pes: Sequence[Mapping[str, Any]],
                 regions: Sequence[Mapping[str, Any]], what: list[str]) -> bool:
    """Re-create the job's missing objects; whether anything was made (False as well when the
    stored ADL itself is gone, or nothing of `what` is part of the job at its current widths)."""
    adl_cm = next((c for c in configmaps if (c["metadata"].get("labels") or {}).get(LABEL_KIND) == "adl"), None)
    if adl_cm is None:
        await ctl.events.post(job, "RepairImpossible", f"{', '.join(what)} missing and the stored ADL "
                              f"{key[1]}-adl is gone: change the spec to resubmit the job", "Warning")
        return False
    app = adl_mod.parse_adl(((adl_cm.get("data") or {}).get(ADL_XML) or "").encode(),
                            submission_values=spec.submission_values)
    docs = [reconcile.pe_doc(c) for c in configmaps if (c["metadata"].get("labels") or {}).get(LABEL_KIND) == "aadl"]
    have = {int(d["index"]) for d in docs}
    current = docs + [{"index": int(pe["spec"]["id"]), "operators": list(pe["spec"].get("operators") or ())}
                      for pe in pes if int(pe["spec"]["id"]) not in have]
    widths = {r["spec"]["name"]: int((r.get("status") or {}).get("width") or r["spec"]["width"]) for r in regions}
    nodes = int((job.get("status") or {}).get("fusionNodes") or 1)
    try:
        prepared = submission.prepare_widths(app, spec, current, nodes=nodes, widths=widths)
    except submission.SUBMISSION_ERRORS:
        return False                # e.g. a narrowed PE the plan is about to delete
    made = 0
    lost_pair = JOB_CONFIGMAP in what and transportcert.secured(spec.pe_options)
    transport = await submission.transport_pair(spec) if lost_pair else None
    for obj in submission.desired_objects(spec, job, prepared, transport):
        if obj["kind"] == "Secret" and TOKEN_SECRET not in what:
            continue                # it exists (a create would only be refused)
        kind = obj["metadata"]["labels"].get(LABEL_KIND)
        if obj["kind"] in REPAIRED_KINDS and (obj["kind"] != "ConfigMap" or kind == "aadl" or
                                              (kind == "job" and JOB_CONFIGMAP in what)):
            made += await kube.create(ctl.client, obj) is not None
    if made:
        await ctl.events.post(job, "Repaired", f"re-created {', '.join(what)}", "Warning")
    if made and lost_pair:
        await _relaunch_for_new_pair(ctl, job, pes)
    return made > 0


async def _relaunch_for_new_pair(ctl: Any, job: Mapping[str, Any], pes: Sequence[Mapping[str, Any]]) -> None:
    """The job ConfigMap came back with a new transport certificate and key (the old key was lost
    with it): every PE gets a new launch, so all of the job's PEs speak TLS with one pair."""
    for pe in pes:
        if pe["metadata"].get("deletionTimestamp"):
            continue
        launch = int(pe["spec"].get("launchCount") or 1) + 1
        kube.written(await kube.replace(ctl.client, {**pe, "spec": {**pe["spec"], "launchCount": launch}}))
    await ctl.events.post(job, "TransportKeyRenewed", "the job ConfigMap was re-made with a new transport "
                          f"certificate and key: {len(pes)} processing elements relaunched", "Warning")
