"""What a running job's PEs and pods should become: pure decisions on the informers' caches.

`plan_job(view)` compares what exists (the job's AADL ConfigMaps, PEs and pods) with the seed's
rules and returns the steps to take. It does no I/O, so every rule is tested on plain objects;
`controller` carries the steps out and runs the plan again on the next watch event (level
triggered: a step lost to a crash or a conflict is simply planned again).

Rules, per fused PE (one AADL ConfigMap `JOB-N-aadl` each):
- the PE `JOB-N` is missing (deleted while its job lives): re-created if restartable (the
  seed), else reported once;
- the ConfigMap's content id differs from the PE's: the PE gets it and a new launch;
- the pod of the current launch `JOB-N-L` is created once the seed's preconditions hold (AADL
  ConfigMap exists, every HostPool of the job exists); a pod of an older launch is deleted
  unless it Failed and `deleteFailedPod` is false (kept for its logs);
- the current pod Failed / Succeeded / was deleted: `restart.should_restart` decides (the seed's
  table with its fall-through); a restart bumps the launch count. A pod disrupted by the cluster
  is a failure, not a user's deletion: it carries the `DisruptionTarget` condition (set by the
  eviction API, hence `kubectl drain`, and by a scheduler's preemption), seen on the pod while it
  terminates or on its last state when it was deleted (`JobView.disrupted`);
- a Failed pod is deleted once its failure is recorded, unless `deleteFailedPod` is false;
- PE status: phase, launchCount (of the pod observed), contentId, podName, connectivity and
  connectivitySource (`connectivity_of`): what the PE's runtime reported for its current launch
  (`runtime`, as OpenStreams: the runtime PUTs it to `streams-api`), or, for a job none of whose
  PEs ever reported (simulated pods run no runtime), what the pods say (`pods`: Full when its pod
  and every connected PE's pod run, Partial its own only, None otherwise).
A PE without a ConfigMap (a parallel region narrowed) is deleted.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from . import objects, restart
from .objects import LABEL_CONTENT, LABEL_PE, PE_JSON

Obj = dict[str, Any]


@dataclasses.dataclass
class JobView:
    """The job's objects as the informers see them."""

    job: Obj
    configmaps: Sequence[Obj]          # the job's AADL ConfigMaps
    pes: Sequence[Obj]
    pods: Sequence[Obj]
    host_pools_expected: int
    host_pools_present: int
    disrupted: Mapping[str, str] = dataclasses.field(default_factory=dict)  # deleted pod -> reason
    pe_reports: Mapping[int, tuple[str, int]] = dataclasses.field(default_factory=dict)
    """PE index -> (connectivity, launch) its runtime last reported (bundleserver, in memory)."""


@dataclasses.dataclass(frozen=True)
class Step:
    """One write. `what`: create | update_pe | delete | pe_status | event."""

    what: str
    obj: Obj
    status: Obj | None = None
    reason: str = ""
    message: str = ""
    type_: str = "Normal"
    propagation: str = "Background"


def _uid(obj: Mapping[str, Any]) -> str:
    return obj["metadata"].get("uid", "")


def _owned_by(pod: Mapping[str, Any], owner_uid: str) -> bool:
    return any(ref.get("uid") == owner_uid for ref in pod["metadata"].get("ownerReferences") or ())


def disruption(pod: Mapping[str, Any] | None) -> str | None:
    """The reason of the pod's `DisruptionTarget=True` condition (eviction, preemption), if any."""
    for cond in ((pod or {}).get("status") or {}).get("conditions") or ():
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return str(cond.get("reason") or "Disrupted")
    return None


def _phase(pod: Mapping[str, Any] | None) -> str:
    return ((pod or {}).get("status") or {}).get("phase") or "Pending"


def _launch(pod: Mapping[str, Any]) -> int:
    try:
        return int((pod["metadata"].get("labels") or {}).get(objects.LABEL_LAUNCH, "0"))
    except ValueError:
        return 0


def pe_doc(cm: Mapping[str, Any]) -> dict[str, Any]:
    return orjson.loads((cm.get("data") or {}).get(PE_JSON) or "{}")


RUNTIME, PODS = "runtime", "pods"   # connectivitySource


def connectivity(index: int, docs: Mapping[int, Mapping[str, Any]],
                 running: Mapping[int, bool]) -> str:
    """None / Partial / Full from the PE's own pod and the pods of the PEs it connects to."""
    if not running.get(index):
        return "None"
    peers = docs[index].get("peers") or ()
    return "Full" if all(running.get(p) for p in peers) else "Partial"


def reporting(view: JobView) -> bool:
    """Whether the job's PEs run a runtime that reports its connectivity: one of them did (in
    this controller's memory, or recorded in its status before a restart)."""
    return bool(view.pe_reports) or any((pe.get("status") or {}).get("connectivitySource") == RUNTIME
                                        for pe in view.pes)


def connectivity_of(index: int, pe: Mapping[str, Any], docs: Mapping[int, Mapping[str, Any]],
                    running: Mapping[int, bool], view: JobView, reports: bool) -> tuple[str, str]:
    """(connectivity, source) of a PE whose current pod exists. In a reporting job: the report
    of its current launch, else what its status recorded for that launch (a restarted controller
    has no reports in memory; a runtime reports only changes), else None (not reported yet: a
    relaunched PE is not connected because its pod runs). Otherwise the pods' `connectivity`."""
    if not reports:
        return connectivity(index, docs, running), PODS
    launch = int(pe["spec"].get("launchCount") or 1)
    got = view.pe_reports.get(index)
    if got is not None and got[1] == launch:
        return (got[0] if running.get(index) else "None"), RUNTIME
    status = pe.get("status") or {}
    if got is None and status.get("connectivitySource") == RUNTIME and \
            int(status.get("launchCount") or 0) == launch and running.get(index):
        return str(status.get("connectivity") or "None"), RUNTIME
    return "None", RUNTIME


def plan_job(view: JobView, *, spec: Any, reported: set[str],
             runtime: objects.PeRuntime = objects.PeRuntime()) -> list[Step]:
    """The steps that move the job towards the seed's rules (see the module docstring).

    Only a submitted job is planned, and submission (and re-fusion) create every PE of its
    ConfigMaps, so a PE missing here was deleted. `reported` holds the one-time events sent.
    """
    steps: list[Step] = []
    job = view.job
    docs = {int(d["index"]): d for d in map(pe_doc, view.configmaps)}
    content = {int((cm["metadata"].get("labels") or {}).get(LABEL_PE, -1)):
               (cm["metadata"].get("labels") or {}).get(LABEL_CONTENT, "") for cm in view.configmaps}
    pes = {int(pe["spec"]["id"]): pe for pe in view.pes}
    pods_by_pe: dict[int, list[Obj]] = {}
    for pod in view.pods:
        try:
            pods_by_pe.setdefault(int((pod["metadata"].get("labels") or {}).get(LABEL_PE, -1)), []).append(pod)
        except ValueError:
            continue
    # the task-groups annotation is needed only when a pod is made, not on every pass
    groups_json = functools.cache(lambda: orjson.dumps(objects.task_groups(spec, list(docs.values()))).decode())
    running: dict[int, bool] = {}
    current_pods: dict[int, Obj | None] = {}
    reports = reporting(view)
    for index, pe in pes.items():
        name = objects.pod_name(spec.name, index, int(pe["spec"].get("launchCount") or 1))
        current = next((p for p in pods_by_pe.get(index, ())
                        if p["metadata"]["name"] == name and _owned_by(p, _uid(pe))), None)
        current_pods[index] = current
        running[index] = current is not None and _phase(current) == "Running" \
            and not current["metadata"].get("deletionTimestamp")
    for index, doc in sorted(docs.items()):
        pe = pes.get(index)
        pe_name = objects.pe_name(spec.name, index)
        if pe is None:
            steps.extend(_missing_pe(spec, job, doc, content[index], pe_name, reported))
            continue
        steps.extend(_pe_steps(spec, pe, doc, content[index], current_pods[index],
                               pods_by_pe.get(index, ()), view, len(docs), groups_json,
                               connectivity_of(index, pe, docs, running, view, reports), runtime))
    for index, pe in pes.items():
        if index not in docs:
            # its Service is the job's (it outlives launches), so it goes here, before the PE and
            # with the PE's label (one PE's steps run in order): a pass that fails in between
            # leaves the PE, and the next pass deletes both again (a repeat is a 404)
            steps.append(Step("delete", {"kind": "Service", "metadata": {
                "name": objects.pe_name(spec.name, index), "namespace": spec.namespace,
                "labels": {objects.LABEL_PE: str(index)}}}))
            steps.append(Step("delete", pe, reason="Narrowed",
                              message=f"PE {pe['metadata']['name']} is no longer part of the job"))
    return steps


def _missing_pe(spec: Any, job: Obj, doc: Mapping[str, Any], content_id: str, name: str,
                reported: set[str]) -> list[Step]:
    pe = objects.pe_object(spec, job, doc, content_id)
    if doc.get("restartable", True):
        return [Step("create", pe), Step("event", job, reason="PERecreated",
                                         message=f"processing element {name} was deleted and is re-created (restartable)")]
    if name in reported:
        return []
    reported.add(name)
    return [Step("event", job, reason="PEDeleted", type_="Warning",
                 message=f"processing element {name} was deleted and is not restartable: not re-created")]


def _pe_steps(spec: Any, pe: Obj, doc: Mapping[str, Any], content_id: str, current: Obj | None,
              pods: Sequence[Obj], view: JobView, pe_count: int, groups_json: Callable[[], str],
              conn: tuple[str, str], runtime: objects.PeRuntime = objects.PeRuntime()) -> list[Step]:
    steps: list[Step] = []
    pe_spec = pe["spec"]
    launch = int(pe_spec.get("launchCount") or 1)
    status = pe.get("status") or {}
    if content_id and pe_spec.get("contentId") != content_id:
        new = {**pe, "spec": {**pe_spec, "contentId": content_id, "launchCount": launch + 1}}
        return [Step("update_pe", new, reason="ContentChanged",
                     message=f"content id {pe_spec.get('contentId')} -> {content_id}: launch {launch + 1}")]
    for pod in pods:
        if pod is current or pod["metadata"].get("deletionTimestamp"):
            continue
        if _launch(pod) < launch or not _owned_by(pod, _uid(pe)):
            if not restart.keep_old_pod(_phase(pod), pe_spec):
                steps.append(Step("delete", pod))
    observed = int(status.get("launchCount") or 0) == launch and status.get("podName")
    if current is None:
        if observed and status.get("phase") not in ("Failed", "Succeeded", "Stopped"):
            why = view.disrupted.get(status.get("podName") or "")
            if why:
                return steps + _ended(pe, launch, restart.Outcome.FAILED, f"was disrupted ({why})")
            return steps + _ended(pe, launch, restart.Outcome.DELETED, "deleted")
        if observed:
            return steps + _status(pe, status, phase=status.get("phase"), conn="None")
        if view.host_pools_present < view.host_pools_expected:
            return steps + _status(pe, status, phase="Waiting", conn="None",
                                   message="waiting for the job's host pools")
        pod = objects.pod_object(spec, pe, doc, pe_count, groups_json(), runtime)
        # the PE's Service goes with each launch (a repeat is a 409): new PEs of a width change
        # get theirs, a deleted one comes back
        service = objects.pe_service(spec, objects.owner_ref(view.job), doc)
        # podName/launchCount enter the status only once the pod is seen, so a pod that
        # vanishes afterwards is known to have been deleted (not never made)
        return steps + [Step("create", service), Step("create", pod)] + \
            _status(pe, status, phase="Pending", conn="None")
    phase, how = _phase(current), _phase(current).lower()
    why = disruption(current)
    if why and phase not in ("Failed", "Succeeded"):
        phase, how = "Failed", f"was disrupted ({why})"
    if phase in ("Failed", "Succeeded") and status.get("phase") not in ("Failed", "Succeeded"):
        outcome = restart.Outcome.FAILED if phase == "Failed" else restart.Outcome.SUCCEEDED
        return steps + _ended(pe, launch, outcome, how)
    if phase in ("Failed", "Succeeded"):
        if phase == "Failed" and restart.delete_failed(pe_spec) and not current["metadata"].get("deletionTimestamp"):
            steps.append(Step("delete", current))     # the seed's deleteFailedPod
        return steps + _status(pe, status, phase=phase, conn="None")
    return steps + _status(pe, status, phase=phase, conn=conn[0], source=conn[1],
                           pod_name=current["metadata"]["name"])


def _ended(pe: Obj, launch: int, outcome: restart.Outcome, how: str) -> list[Step]:
    name = pe["metadata"]["name"]
    if restart.should_restart(outcome, pe["spec"]):
        new = {**pe, "spec": {**pe["spec"], "launchCount": launch + 1}}
        return [Step("update_pe", new, reason="Restarting", type_="Warning" if outcome is not restart.Outcome.SUCCEEDED else "Normal",
                     message=f"pod of {name} launch {launch} {how}: restarting (launch {launch + 1}, "
                             f"{restart.deciding_flag(outcome, pe['spec'])})")]
    phase = {restart.Outcome.FAILED: "Failed", restart.Outcome.SUCCEEDED: "Succeeded",
             restart.Outcome.DELETED: "Stopped"}[outcome]
    status = {**(pe.get("status") or {}), "phase": phase, "connectivity": "None"}
    return [Step("pe_status", pe, status=status),
            Step("event", pe, reason="NotRestarted", type_="Warning" if outcome is not restart.Outcome.SUCCEEDED else "Normal",
                 message=f"pod of {name} launch {launch} {how}; not restarted "
                         f"({restart.deciding_flag(outcome, pe['spec'])} is off)")]


def _status(pe: Obj, old: Mapping[str, Any], *, phase: str | None, conn: str, source: str | None = None,
            pod_name: str | None = None, message: str | None = None) -> list[Step]:
    spec = pe["spec"]
    new = dict(old)
    new.update({"phase": phase or "Pending", "connectivity": conn,
                "contentId": spec.get("contentId", "")})
    if source is not None:
        new["connectivitySource"] = source
    if pod_name is not None:
        new["podName"] = pod_name
        new["launchCount"] = int(spec.get("launchCount") or 1)
    if message is not None:
        new["message"] = message
    elif "message" in new and phase != "Waiting":
        del new["message"]
    if new == dict(old):
        return []
    return [Step("pe_status", pe, status=new)]


def region_status(region: Mapping[str, Any], docs: Sequence[Mapping[str, Any]], job: str) -> Obj:
    """A ParallelRegion's status: its phase and `selector`, the label selector of its PEs' pods
    (the `/scale` labelSelectorPath, so an HorizontalPodAutoscaler can find them)."""
    status = dict(region.get("status") or {})
    spec = region.get("spec") or {}
    pes = sorted(int(d["index"]) for d in docs if d.get("parallelRegion") == spec.get("name"))
    if status.get("refusedWidth") == spec.get("width"):
        status["phase"] = "Refused"
    elif status.get("width") == spec.get("width"):
        status["phase"] = "Running"
    else:
        status["phase"] = "Scaling"
    selector = f"{objects.LABEL_JOB}={job},{objects.LABEL_KIND}=pod"
    status["selector"] = selector + (f",{LABEL_PE} in ({','.join(map(str, pes))})" if pes else "")
    return status


def pool_status(pool: Mapping[str, Any], docs: Sequence[Mapping[str, Any]]) -> Obj:
    """A HostPool's status: Ready, and how many of the job's PEs it places."""
    index = (pool.get("spec") or {}).get("index")
    placed = sum(1 for d in docs if (d.get("hostPool") or {}).get("index") == index)
    return {**(pool.get("status") or {}), "phase": "Ready",
            "message": f"{placed} processing element{'s' if placed != 1 else ''} placed in this pool",
            "observedGeneration": pool["metadata"].get("generation", 1)}
