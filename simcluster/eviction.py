"""`POST /api/v1/namespaces/{ns}/pods/{name}/eviction`: a policy/v1 Eviction, what `kubectl drain`
sends (it finds `pods/eviction` with group policy, version v1 in discovery and then evicts instead of
deleting).

As the apiserver's eviction REST:

- a pod that is Pending, Succeeded or Failed, or already being deleted, is deleted without asking
  any budget;
- otherwise the PodDisruptionBudgets of its namespace whose selector matches it decide: none ->
  deleted; more than one -> 500 (the apiserver supports one); one -> deleted when it allows a
  disruption (or the pod is not healthy and the budget already has its desired healthy pods, the
  default `unhealthyPodEvictionPolicy: IfHealthyBudget`; `AlwaysAllow` lets every unhealthy pod go),
  else **429 TooManyRequests** "Cannot evict pod as it would violate the pod's disruption budget."
  with a `DisruptionBudget` cause naming the budget, and the pod stays;
- the answer to an eviction is 201 with a Success Status; `dryRun=All` checks and deletes nothing;
- the budget remembers the evicted pod (`disruption.with_evicted`) so it still counts as expected;
- before the deletion the pod gets the `DisruptionTarget` condition (reason
  `EvictionByEvictionAPI`), as the apiserver does since Kubernetes 1.26 (PodDisruptionConditions):
  a controller can tell an eviction from a user's deletion by the pod's last state.
"""

from __future__ import annotations

from typing import Any

from . import disruption
from .errors import BadRequest, InternalError, TooManyRequests, success_status
from .store import Store

Obj = dict[str, Any]
VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."


def check_body(pod_name: str, body: Any) -> Obj:
    if not isinstance(body, dict) or body.get("kind") not in (None, "", "Eviction"):
        raise BadRequest("the object provided is unrecognized (must be of type Eviction)")
    if body.get("apiVersion") not in (None, "", "policy/v1", "policy/v1beta1"):
        raise BadRequest(f"the API version in the data ({body['apiVersion']}) does not match the expected API "
                         "version (policy/v1)")
    name = (body.get("metadata") or {}).get("name")
    if name and name != pod_name:
        raise BadRequest(f"name in URL does not match name in Eviction object: {pod_name} != {name}")
    return body


def may_evict(store: Store, pod: Obj) -> Obj | None:
    """Raise TooManyRequests (429) when a budget forbids evicting `pod` now; else the budget that
    allowed it (None when no budget was asked)."""
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Pending", "Succeeded", "Failed") or pod["metadata"].get("deletionTimestamp"):
        return None
    budgets = disruption.budgets_for(store, pod)
    if not budgets:
        return None
    if len(budgets) > 1:
        raise InternalError("This pod has more than one PodDisruptionBudget, which the eviction subresource "
                            "does not support.")
    pdb = budgets[0]
    b = disruption.budget(store, pdb)
    if not disruption.healthy(pod):
        policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy", "IfHealthyBudget")
        if policy == "AlwaysAllow" or b.healthy >= b.desired:
            return pdb
    elif b.allowed > 0:
        return pdb
    name = pdb["metadata"]["name"]
    raise TooManyRequests(VIOLATION, {"causes": [{
        "reason": "DisruptionBudget",
        "message": f"The disruption budget {name} needs {b.desired} healthy pods and has {b.healthy} currently"}]})


def with_disruption_target(pod: Obj, now: str) -> Obj:
    """The pod with `DisruptionTarget=True` (reason EvictionByEvictionAPI) in its status."""
    status = dict(pod.get("status") or {})
    conds = [c for c in status.get("conditions") or [] if c.get("type") != "DisruptionTarget"]
    conds.append({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                  "message": "Eviction API: evicting", "lastProbeTime": None, "lastTransitionTime": now})
    return {**pod, "status": {**status, "conditions": conds}}


def evicted_status() -> Obj:
    ok = success_status()
    ok["code"] = 201
    return ok

