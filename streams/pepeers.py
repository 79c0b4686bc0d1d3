"""Which job's PE pod a caller is, by its address: OpenStreams' runtime sends no token.

The runtime in a PE pod calls its instance's `streams-api` without any credential (its connectivity
PUT, its name lookups), and OpenStreams accepts a request for the job from that job's own PE pods.
ykshm's controller does the same: a request from the address of a pod that is, in the
controller's caches,

- labelled as a PE pod of the job (`streams.ibm.com/job`, `/kind: pod`, `/pe: N`),
- owned by that job's ProcessingElement `JOB-N` (its ownerReference's uid is the PE's uid), of the
  PE's current launch (`/launch-count` equals the PE's `spec.launchCount`),
- Running, not being deleted, with that `status.podIP`,

is the job's own (`job_at`), and needs no token; every other caller still needs the job's token.
The trust is the namespace's: a pod passes only as its PE's, which the controller made; to
stand in for it one must delete the controller's pod and make one of the same name, owner and
address, which needs the rights of the namespace's owners. An address held by two such pods (a
reused IP, a stale cache) belongs to nobody.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .objects import LABEL_JOB, LABEL_KIND, LABEL_LAUNCH, LABEL_PE, pe_name

JobKey = tuple[str, str]


def job_at(ip: str, pods: Iterable[Mapping[str, Any]], pes: Mapping[str, Mapping[str, Any]]
           ) -> JobKey | None:
    """(namespace, job) whose PE pod has address `ip`, or None. `pods` and `pes` are an
    informer's caches (`pes` keyed `NAMESPACE/NAME`, as `Store.items` is)."""
    found: set[JobKey] = set()
    for pod in pods:
        if ((pod.get("status") or {}).get("podIP") or "") == ip and ip:
            key = _pe_pod_job(pod, pes)
            if key is not None:
                found.add(key)
    return found.pop() if len(found) == 1 else None


def _pe_pod_job(pod: Mapping[str, Any], pes: Mapping[str, Mapping[str, Any]]) -> JobKey | None:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    job, index = labels.get(LABEL_JOB), labels.get(LABEL_PE) or ""
    if not job or labels.get(LABEL_KIND) != "pod" or not index.isdigit():
        return None
    if meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") != "Running":
        return None
    namespace = meta.get("namespace") or "default"
    pe = pes.get(f"{namespace}/{pe_name(job, int(index))}")
    if pe is None:
        return None
    pe_uid = (pe.get("metadata") or {}).get("uid")
    owned = any(ref.get("kind") == "ProcessingElement" and ref.get("uid") == pe_uid
                for ref in meta.get("ownerReferences") or [])
    launch = str(int((pe.get("spec") or {}).get("launchCount") or 1))
    if not owned or not pe_uid or labels.get(LABEL_LAUNCH) != launch:
        return None
    return (namespace, job)
