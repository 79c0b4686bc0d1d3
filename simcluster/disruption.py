"""PodDisruptionBudgets: how many of a budget's pods may go now, and the controller that keeps
each budget's `status` current (what `kubectl get pdb` shows as ALLOWED DISRUPTIONS).

The arithmetic is the disruption controller's (policy/v1):

- the budget's pods: pods of its namespace matching `spec.selector` (an empty selector matches every
  pod of the namespace, a missing one none), not being deleted;
- healthy: phase Running with condition Ready=True; expected: the budget's pods plus those it let
  go by eviction (the real controller asks the pods' controller for its scale, which still counts an
  evicted pod until its replacement runs; sim-cluster runs no controllers, so the budget remembers
  the pods it let go in its annotation `sim.ykshm.io/evicted-pods`, a JSON list of names, and
  `maxUnavailable: 1` lets exactly one pod go, as it would with a Deployment that cannot reschedule);
- desired healthy: `minAvailable` (an integer, or a percentage of expected rounded up), or expected
  minus `maxUnavailable` (a percentage rounded up); with neither set, 0 (every disruption allowed);
- disruptions allowed: healthy - desired, never below 0.

The controller is a store listener that only marks namespaces (it must not write from inside a
change) and a task that recomputes the budgets of marked namespaces and stores a status that
differs. A cluster without budgets costs one set lookup per pod change.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import trio

from .objects import now_rfc3339
from .resources import PDBS, PODS
from .store import Change, Store

Obj = dict[str, Any]


@dataclass(frozen=True)
class Budget:
    """One budget's numbers now."""

    expected: int
    healthy: int
    desired: int

    @property
    def allowed(self) -> int:
        return max(0, self.healthy - self.desired)


def selector_matches(selector: Any, labels: dict[str, str]) -> bool:
    """A meta/v1 LabelSelector (matchLabels, matchExpressions In/NotIn/Exists/DoesNotExist)."""
    if not isinstance(selector, dict):
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def healthy(pod: Obj) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _scaled(value: Any, expected: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * expected / 100)
    return int(value)


def pods_of(store: Store, pdb: Obj) -> list[Obj]:
    ns = pdb["metadata"].get("namespace", "")
    selector = (pdb.get("spec") or {}).get("selector")
    return [p for p in store.list(PODS.bucket, ns)[0]
            if not p["metadata"].get("deletionTimestamp")
            and selector_matches(selector, p["metadata"].get("labels") or {})]


EVICTED = "sim.ykshm.io/evicted-pods"


def evicted(pdb: Obj) -> list[str]:
    """The pods this budget let go by eviction (see the module docstring)."""
    raw = (pdb["metadata"].get("annotations") or {}).get(EVICTED)
    try:
        names = json.loads(raw) if raw else []
    except ValueError:
        return []
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def with_evicted(pdb: Obj, pod_name: str) -> Obj:
    """`pdb` remembering one more evicted pod (a new dict, to store)."""
    annotations = dict(pdb["metadata"].get("annotations") or {})
    annotations[EVICTED] = json.dumps(sorted(set(evicted(pdb)) | {pod_name}), separators=(",", ":"))
    return {**pdb, "metadata": {**pdb["metadata"], "annotations": annotations}}


def budget(store: Store, pdb: Obj) -> Budget:
    pods = pods_of(store, pdb)
    spec = pdb.get("spec") or {}
    live = {p["metadata"]["name"] for p in pods}
    expected = len(pods) + sum(1 for name in evicted(pdb) if name not in live)
    if "minAvailable" in spec:
        desired = _scaled(spec["minAvailable"], expected)
    elif "maxUnavailable" in spec:
        desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
    else:
        desired = 0
    return Budget(expected, sum(1 for p in pods if healthy(p)), desired)


def status_for(store: Store, pdb: Obj) -> Obj:
    """The status the disruption controller writes for `pdb` now."""
    b = budget(store, pdb)
    generation = pdb["metadata"].get("generation", 1)
    old = {c.get("type"): c for c in (pdb.get("status") or {}).get("conditions") or []}
    ok = b.allowed > 0
    cond = {"type": "DisruptionAllowed", "status": "True" if ok else "False",
            "reason": "SufficientPods" if ok else "InsufficientPods", "message": "",
            "observedGeneration": generation, "lastTransitionTime": now_rfc3339()}
    prev = old.get("DisruptionAllowed")
    if prev is not None and prev.get("status") == cond["status"]:
        cond["lastTransitionTime"] = prev.get("lastTransitionTime", cond["lastTransitionTime"])
    return {"observedGeneration": generation, "disruptionsAllowed": b.allowed, "currentHealthy": b.healthy,
            "desiredHealthy": b.desired, "expectedPods": b.expected, "conditions": [cond]}


def budgets_for(store: Store, pod: Obj) -> list[Obj]:
    ns = pod["metadata"].get("namespace", "")
    labels = pod["metadata"].get("labels") or {}
    return [pdb for pdb in store.list(PDBS.bucket, ns)[0]
            if selector_matches((pdb.get("spec") or {}).get("selector"), labels)]


class DisruptionController:
    """Keeps every budget's status current (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._dirty: set[str] = set()
        self._wake = trio.Event()
        store.listeners.append(self._on_change)

    def _on_change(self, change: Change) -> None:
        if change.bucket not in (PODS.bucket, PDBS.bucket):
            return
        ns = change.obj["metadata"].get("namespace", "")
        if change.bucket == PODS.bucket and not self.store.list(PDBS.bucket, ns, limit=1)[0]:
            return
        self._dirty.add(ns)
        self._wake.set()

    def sync(self) -> int:
        """Recompute the budgets of every marked namespace; returns how many statuses changed."""
        changed = 0
        dirty, self._dirty = self._dirty, set()
        for ns in sorted(dirty):
            for pdb in self.store.list(PDBS.bucket, ns)[0]:
                status = status_for(self.store, pdb)
                if status != pdb.get("status"):
                    self.store.replace(PDBS.bucket, {**pdb, "metadata": dict(pdb["metadata"]), "status": status})
                    changed += 1
        return changed

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            self.sync()
