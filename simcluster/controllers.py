"""The workload controllers of kube-controller-manager, enough for a YuniKorn user's workloads:
Deployment → ReplicaSets, ReplicaSet → pods, Job → pods. One trio task reconciles every
Deployment, ReplicaSet and Job after each change to them or to pods (a store listener wakes it; it
must not write from inside a change).

- **ReplicaSet**: keeps `spec.replicas` active pods (not finished, not being deleted) from its
  template (labels, annotations, `schedulerName` kept; `generateName: RS-`), each owned by it
  (`ownerReferences` controller: true, blockOwnerDeletion: true) so the garbage collector takes
  them with it; surplus pods go unscheduled first, then not ready, then newest. Status: replicas,
  fullyLabeledReplicas, readyReplicas, availableReplicas (Ready; minReadySeconds is not honoured),
  observedGeneration.
- **Deployment**: the ReplicaSet whose `pod-template-hash` label is the hash of the current
  template is the new one (created with the revision annotation `deployment.kubernetes.io/revision`
  one above the highest); RollingUpdate scales it up within `replicas + maxSurge` and the old ones
  down while `replicas - maxUnavailable` pods stay available (percentages: surge rounded up,
  unavailable down, as upstream); Recreate scales the old ones to 0 first. Old ReplicaSets beyond
  `revisionHistoryLimit` with no replicas are deleted. Status as kubectl reads it: replicas,
  updatedReplicas, readyReplicas, availableReplicas, unavailableReplicas, observedGeneration,
  conditions Available and Progressing (`NewReplicaSetAvailable` when done), so `kubectl rollout
  status` finishes. The hash is sim-cluster's own (10 hex digits of a SHA-256 of the template).
- **Job**: keeps `min(parallelism, completions - succeeded)` pods active; a failed pod is replaced
  at once (no back-off delay) until more than `backoffLimit` pods failed: then `FailureTarget` and
  `Failed` (reason BackoffLimitExceeded) and the active pods are deleted; `completions` succeeded
  pods: `SuccessCriteriaMet` and `Complete`, `completionTime`. Status: active, ready, succeeded,
  failed, startTime, conditions (what `kubectl wait --for=condition=complete` reads).

Pods are created through the admission chain as the controllers' ServiceAccounts
(`system:serviceaccount:kube-system:replicaset-controller`, `...:job-controller`), so mutating
webhooks see them as in a real cluster; a refused create is retried a second later.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import math
from collections.abc import Callable
from typing import Any

import orjson
import trio

from . import admission, objects
from .errors import ApiError
from .resources import DEPLOYMENTS, JOBS, PODS, REPLICASETS, Resource
from .store import Change

log = logging.getLogger("ykshm.sim-cluster.controllers")
Obj = dict[str, Any]
HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
_WATCHED = {PODS.bucket, DEPLOYMENTS.bucket, REPLICASETS.bucket, JOBS.bucket}


def _controller_user(name: str) -> Obj:
    return {"username": f"system:serviceaccount:kube-system:{name}", "groups": [
        "system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]}


def _owner_ref(res: Resource, obj: Obj) -> Obj:
    meta = obj["metadata"]
    return {"apiVersion": res.api_version, "kind": res.kind, "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}


def _controlled_by(obj: Obj, owner: Obj) -> bool:
    return any(r.get("controller") and r.get("uid") == owner["metadata"]["uid"]
               for r in obj["metadata"].get("ownerReferences") or [])


def _ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _active(pod: Obj) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and (pod.get("status") or {}).get("phase") not in (
        "Succeeded", "Failed")


def _condition(kind: str, status: str, reason: str, message: str, old: list[Obj]) -> Obj:
    """A condition keeping its lastTransitionTime while its status stays."""
    now = objects.now_rfc3339()
    before = next((c for c in old if c.get("type") == kind), None)
    since = before["lastTransitionTime"] if before and before.get("status") == status else now
    return {"type": kind, "status": status, "lastUpdateTime": now, "lastTransitionTime": since,
            "reason": reason, "message": message}


def _scaled_value(value: Any, total: int, round_up: bool) -> int:
    """An int-or-percent of `total` (maxSurge rounds up, maxUnavailable down)."""
    if isinstance(value, str) and value.endswith("%"):
        exact = int(value[:-1]) * total / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    return int(value or 0)


def template_hash(template: Obj) -> str:
    return hashlib.sha256(orjson.dumps(template, option=orjson.OPT_SORT_KEYS)).hexdigest()[:10]


class Controllers:
    """The Deployment, ReplicaSet and Job controllers of one server (`api` for its writes)."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.store = api.store
        self._wake = trio.Event()
        self.store.listeners.append(self._on_change)

    def _on_change(self, change: Change) -> None:
        if change.bucket in _WATCHED:
            self._wake.set()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            await trio.sleep(0.02)  # gather a burst of changes into one pass
            try:
                await self.reconcile()
            except ApiError as exc:
                log.warning("controllers: %s; retrying in 1 s", exc.message)
                await trio.sleep(1)
                self._wake.set()

    async def reconcile(self) -> None:
        for dep in self.store.list(DEPLOYMENTS.bucket)[0]:
            await self._deployment(dep)
        for rs in self.store.list(REPLICASETS.bucket)[0]:
            await self._replicaset(rs)
        for job in self.store.list(JOBS.bucket)[0]:
            await self._job(job)

    # -- writes --------------------------------------------------------------------------------
    def _pods_of(self, owner: Obj) -> list[Obj]:
        ns = owner["metadata"]["namespace"]
        return [p for p in self.store.list(PODS.bucket, ns)[0] if _controlled_by(p, owner)]

    async def _create(self, res: Resource, ns: str, body: Obj, user: str) -> None:
        """Create through the admission chain, as the controller's ServiceAccount."""
        attrs = admission.Attributes("CREATE", res, "", ns, "", False, _controller_user(user))
        check: Callable[[Obj], Obj] = lambda b: self.api.create_object(res, ns, b, dry_run=True)  # noqa: E731
        if self.api.admission.active():
            body = await self.api.admission.admit(attrs, admission.defaulted(check, body), None, check)
        self.api.create_object(res, ns, body)

    def _put_status(self, res: Resource, obj: Obj, status: Obj) -> None:
        current = self.store.get(res.bucket, obj["metadata"]["namespace"], obj["metadata"]["name"])
        if current is None or current.get("status") == status:
            return
        self.store.replace(res.bucket, {**current, "status": status})

    def _set_replicas(self, rs: Obj, replicas: int, extra: Obj | None = None) -> None:
        current = self.store.get(REPLICASETS.bucket, rs["metadata"]["namespace"], rs["metadata"]["name"])
        if current is None:
            return
        annotations = {**(current["metadata"].get("annotations") or {}), **(extra or {})}
        if current["spec"].get("replicas") == replicas and annotations == current["metadata"].get("annotations"):
            return
        new = copy.deepcopy(current)
        new["spec"]["replicas"] = replicas
        new["metadata"]["annotations"] = annotations
        new["metadata"]["generation"] = int(current["metadata"].get("generation") or 1) + (
            current["spec"].get("replicas") != replicas)
        self.store.replace(REPLICASETS.bucket, new)

    def _delete(self, res: Resource, obj: Obj) -> None:
        try:
            self.api.delete_object(res, obj["metadata"]["namespace"], obj["metadata"]["name"])
        except ApiError:
            pass  # gone meanwhile

    # -- ReplicaSet ----------------------------------------------------------------------------
    async def _replicaset(self, rs: Obj) -> None:
        if rs["metadata"].get("deletionTimestamp"):
            return
        ns = rs["metadata"]["namespace"]
        active = [p for p in self._pods_of(rs) if _active(p)]
        want = int(rs["spec"].get("replicas", 1))
        if len(active) > want:
            surplus = sorted(active, key=lambda p: (bool((p.get("spec") or {}).get("nodeName")), _ready(p),
                                                    p["metadata"].get("creationTimestamp", "")))
            for pod in surplus[:len(active) - want]:
                self._delete(PODS, pod)
        for _ in range(want - len(active)):
            await self._create(PODS, ns, self._pod_from(REPLICASETS, rs, {}), "replicaset-controller")
        active = [p for p in self._pods_of(rs) if _active(p)]
        ready = sum(1 for p in active if _ready(p))
        status = {"replicas": len(active), "fullyLabeledReplicas": len(active), "readyReplicas": ready,
                  "availableReplicas": ready, "observedGeneration": rs["metadata"].get("generation", 1)}
        self._put_status(REPLICASETS, rs, {k: v for k, v in status.items() if v or k in ("replicas",
                                                                                         "observedGeneration")})

    def _pod_from(self, res: Resource, owner: Obj, labels: Obj) -> Obj:
        template = copy.deepcopy(owner["spec"].get("template") or {})
        meta = template.get("metadata") or {}
        meta["labels"] = {**(meta.get("labels") or {}), **labels}
        meta["generateName"] = f"{owner['metadata']['name']}-"
        meta.pop("name", None)
        meta["ownerReferences"] = [_owner_ref(res, owner)]
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template.get("spec") or {}}

    # -- Deployment ----------------------------------------------------------------------------
    def _replicasets_of(self, dep: Obj) -> list[Obj]:
        ns = dep["metadata"]["namespace"]
        return [rs for rs in self.store.list(REPLICASETS.bucket, ns)[0] if _controlled_by(rs, dep)]

    async def _deployment(self, dep: Obj) -> None:
        if dep["metadata"].get("deletionTimestamp"):
            return
        spec, ns = dep["spec"], dep["metadata"]["namespace"]
        digest = template_hash(spec.get("template") or {})
        sets = self._replicasets_of(dep)
        new = next((rs for rs in sets if (rs["metadata"].get("labels") or {}).get(HASH_LABEL) == digest), None)
        revision = 1 + max((int((rs["metadata"].get("annotations") or {}).get(REVISION, "0")) for rs in sets),
                           default=0)
        if new is None:
            await self._create(REPLICASETS, ns, self._new_replicaset(dep, digest, revision), "deployment-controller")
            return  # the next pass sees it
        if int((new["metadata"].get("annotations") or {}).get(REVISION, "0")) < revision - 1:
            self._set_replicas(new, new["spec"]["replicas"], {REVISION: str(revision)})  # rolled back to it
        old = [rs for rs in sets if rs is not new]
        self._roll(dep, new, old)
        self._prune_history(dep, old)
        self._deployment_status(dep, new, self._replicasets_of(dep))

    def _new_replicaset(self, dep: Obj, digest: str, revision: int) -> Obj:
        template = copy.deepcopy(dep["spec"].get("template") or {})
        tmeta = template.setdefault("metadata", {})
        tmeta["labels"] = {**(tmeta.get("labels") or {}), HASH_LABEL: digest}
        selector = copy.deepcopy(dep["spec"].get("selector") or {})
        selector["matchLabels"] = {**(selector.get("matchLabels") or {}), HASH_LABEL: digest}
        replicas = dep["spec"].get("replicas", 1)
        start = 0 if self._replicasets_of(dep) else replicas  # a rollout: `_roll` scales it up
        return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {
            "name": f"{dep['metadata']['name']}-{digest}", "labels": dict(tmeta["labels"]),
            "annotations": {REVISION: str(revision), "deployment.kubernetes.io/desired-replicas": str(replicas)},
            "ownerReferences": [_owner_ref(DEPLOYMENTS, dep)]},
            "spec": {"replicas": start, "selector": selector, "template": template}}

    def _roll(self, dep: Obj, new: Obj, old: list[Obj]) -> None:
        replicas = int(dep["spec"].get("replicas", 1))
        strategy = dep["spec"].get("strategy") or {}
        if strategy.get("type") == "Recreate":
            for rs in old:
                self._set_replicas(rs, 0)
            if not any(self._pods_of(rs) for rs in old):
                self._set_replicas(new, replicas)
            return
        rolling = strategy.get("rollingUpdate") or {}
        surge = _scaled_value(rolling.get("maxSurge", "25%"), replicas, True)
        unavailable = _scaled_value(rolling.get("maxUnavailable", "25%"), replicas, False)
        if surge == 0 and unavailable == 0:
            unavailable = 1
        total = sum(int(rs["spec"].get("replicas", 0)) for rs in [new, *old])
        new_count = int(new["spec"].get("replicas", 0))
        if not old or new_count > replicas:
            self._set_replicas(new, replicas)
            return
        if new_count < replicas and total < replicas + surge:
            self._set_replicas(new, min(replicas, new_count + replicas + surge - total))
        available = sum(int((rs.get("status") or {}).get("availableReplicas", 0)) for rs in [new, *old])
        new_unavailable = new_count - int((new.get("status") or {}).get("availableReplicas", 0))
        budget = total - (replicas - unavailable) - new_unavailable
        budget = min(budget, available - (replicas - unavailable))
        for rs in sorted(old, key=lambda r: r["metadata"].get("creationTimestamp", "")):
            if budget <= 0:
                break
            count = int(rs["spec"].get("replicas", 0))
            down = min(count, budget)
            if down:
                self._set_replicas(rs, count - down)
                budget -= down

    def _prune_history(self, dep: Obj, old: list[Obj]) -> None:
        limit = int(dep["spec"].get("revisionHistoryLimit", 10))
        idle = [rs for rs in old if not rs["spec"].get("replicas") and not (rs.get("status") or {}).get("replicas")]
        idle.sort(key=lambda rs: int((rs["metadata"].get("annotations") or {}).get(REVISION, "0")))
        for rs in idle[:max(0, len(idle) - limit)]:
            self._delete(REPLICASETS, rs)

    def _deployment_status(self, dep: Obj, new: Obj, sets: list[Obj]) -> None:
        def total(key: str, of: list[Obj]) -> int:
            return sum(int((rs.get("status") or {}).get(key, 0)) for rs in of)

        replicas = int(dep["spec"].get("replicas", 1))
        rolling = (dep["spec"].get("strategy") or {}).get("rollingUpdate") or {}
        max_unavailable = _scaled_value(rolling.get("maxUnavailable", 0), replicas, False)
        current_new = next((rs for rs in sets if rs["metadata"]["uid"] == new["metadata"]["uid"]), new)
        status: Obj = {"observedGeneration": dep["metadata"].get("generation", 1),
                       "replicas": total("replicas", sets), "updatedReplicas": total("replicas", [current_new]),
                       "readyReplicas": total("readyReplicas", sets),
                       "availableReplicas": total("availableReplicas", sets)}
        status["unavailableReplicas"] = max(0, replicas - status["availableReplicas"])
        old_conditions = (dep.get("status") or {}).get("conditions") or []
        available = status["availableReplicas"] >= replicas - max_unavailable
        done = (status["updatedReplicas"] == replicas == status["replicas"]
                and status["availableReplicas"] >= replicas)
        rs_name = new["metadata"]["name"]
        status["conditions"] = [
            _condition("Available", "True" if available else "False",
                       "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                       "Deployment has minimum availability." if available
                       else "Deployment does not have minimum availability.", old_conditions),
            _condition("Progressing", "True", "NewReplicaSetAvailable" if done else "ReplicaSetUpdated",
                       f'ReplicaSet "{rs_name}" has successfully progressed.' if done
                       else f'ReplicaSet "{rs_name}" is progressing.', old_conditions)]
        for key in ("readyReplicas", "availableReplicas", "unavailableReplicas", "updatedReplicas", "replicas"):
            if not status[key]:
                status.pop(key)
        if _same_status(dep.get("status") or {}, status):
            return
        self._put_status(DEPLOYMENTS, dep, status)

    # -- Job -----------------------------------------------------------------------------------
    async def _job(self, job: Obj) -> None:
        status = copy.deepcopy(job.get("status") or {})
        if job["metadata"].get("deletionTimestamp") or any(
                c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                for c in status.get("conditions") or []):
            return
        spec, ns = job["spec"], job["metadata"]["namespace"]
        pods = self._pods_of(job)
        active = [p for p in pods if _active(p)]
        succeeded = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded")
        failed = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Failed")
        completions = spec.get("completions")
        conditions = status.get("conditions") or []
        status.setdefault("startTime", objects.now_rfc3339())
        if failed > int(spec.get("backoffLimit", 6)):
            for pod in active:
                self._delete(PODS, pod)
            active = []
            message = "Job has reached the specified backoff limit"
            status["conditions"] = [_condition(t, "True", "BackoffLimitExceeded", message, conditions)
                                    for t in ("FailureTarget", "Failed")]
        elif (completions is not None and succeeded >= completions) or (
                completions is None and succeeded and not active):
            status["conditions"] = [_condition(t, "True", "CompletionsReached", "Reached expected number of "
                                               "succeeded pods", conditions) for t in ("SuccessCriteriaMet",
                                                                                       "Complete")]
            status["completionTime"] = objects.now_rfc3339()
        elif not spec.get("suspend"):
            remaining = int(spec.get("parallelism", 1)) if completions is None else completions - succeeded
            for _ in range(min(int(spec.get("parallelism", 1)), remaining) - len(active)):
                await self._create(PODS, ns, self._pod_from(JOBS, job, {}), "job-controller")
            active = [p for p in self._pods_of(job) if _active(p)]
        status.update(active=len(active), succeeded=succeeded, failed=failed,
                      ready=sum(1 for p in active if _ready(p)), uncountedTerminatedPods={})
        for key in ("active", "succeeded", "failed"):
            if not status[key]:
                status.pop(key)
        if not _same_status(job.get("status") or {}, status):
            self._put_status(JOBS, job, status)


def _same_status(old: Obj, new: Obj) -> bool:
    """Equal but for the conditions' lastUpdateTime (so a pass that changes nothing writes nothing)."""
    def strip(s: Obj) -> Obj:
        return {**s, "conditions": [{k: v for k, v in c.items() if k not in ("lastUpdateTime", "lastTransitionTime")}
                                    for c in s.get("conditions") or []]}
    return strip(old) == strip(new)
