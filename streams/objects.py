"""The Kubernetes objects of a Streams job, built from its spec and its fused PEs (no I/O).

Names are deterministic, so a controller restarted at any point re-creates nothing twice (a
second create is a harmless 409):

| object                      | name               | owner |
|-----------------------------|--------------------|-------|
| ConfigMap (the ADL)         | `JOB-adl`          | Job   |
| ConfigMap (a PE's AADL)     | `JOB-N-aadl`       | Job (survives its PE, which is re-created from it) |
| ProcessingElement           | `JOB-N`            | Job   |
| Pod                         | `JOB-N-L` (L = launch count) | its PE |
| HostPool                    | `JOB-POOL`         | Job   |
| ParallelRegion              | `JOB-REGION`       | Job   |
| ConsistentRegion            | `JOB-INDEX`        | Job   |
| ConsistentRegionOperator    | `JOB`              | Job   |
| ConfigMap (the job's)       | `JOB` (operator port labels, /etc/config/job) | Job |
| Secret (the PEs' credential)| `JOB-token`        | Job   |
| Service (a PE's, headless)  | `JOB-N`            | Job   |

What a PE pod carries for its runtime (image, bootstrap, `STREAMS_*`, volumes, probe, Service
ports) is `peobjects`, as OpenStreams makes it.

Pods are scheduled by ykshm as one gang per job: `schedulerName: yunikorn`, `applicationId` =
`NAMESPACE-JOB`, the Job's `queue` label, and YuniKorn task-group annotations with one task group
per PE (its resources, node placement and host (anti-)affinity, and the labels those terms match,
so placeholders reserve nodes the real pods may take).

Placement of a PE pod:
- a tagged host pool -> required node affinity `streams.ibm.com/hostpool In [tags]` (OpenStreams'
  label, so nodes users labelled keep working);
- a pool of explicit hosts, an indexed host of a pool, or `hostLocation` -> `kubernetes.io/hostname`;
- host colocation / exlocation / isolation between PEs -> required pod affinity / anti-affinity
  on `kubernetes.io/hostname` against labels `coloc.streams.ibm.com/G` / `exloc.streams.ibm.com/G`
  (G = a short hash of the group's name) and `streams.ibm.com/isolated`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from . import peobjects, transportcert
from .jobspec import JobSpec, resources_for_pes
from .peobjects import PeRuntime

GROUP = "streams.ibm.com"
API_VERSION = f"{GROUP}/v1"
LABEL_JOB = f"{GROUP}/job"
LABEL_PE = f"{GROUP}/pe"
LABEL_LAUNCH = f"{GROUP}/launch-count"
LABEL_CONTENT = f"{GROUP}/content-id"
LABEL_KIND = f"{GROUP}/kind"
LABEL_HOSTPOOL = f"{GROUP}/hostpool"
LABEL_ISOLATED = f"{GROUP}/isolated"
HOSTNAME = "kubernetes.io/hostname"
PE_JSON = "pe.json"
AADL_XML = "aadl.xml"
ADL_XML = "adl.xml"

_DNS = re.compile(r"[^a-z0-9-]+")


def dns_name(*parts: object) -> str:
    """A DNS-1123 name from parts joined by '-' (lower case, other characters as '-')."""
    return _DNS.sub("-", "-".join(str(p) for p in parts).lower()).strip("-")[:253]


def pe_name(job: str, index: int) -> str:
    return f"{job}-{index}"


def pod_name(job: str, index: int, launch: int) -> str:
    return f"{job}-{index}-{launch}"


def aadl_configmap_name(job: str, index: int) -> str:
    return f"{job}-{index}-aadl"


def owner_ref(obj: Mapping[str, Any], *, block: bool = True) -> dict[str, Any]:
    """An ownerReference making `obj` the controller of a dependent."""
    meta = obj["metadata"]
    return {"apiVersion": obj.get("apiVersion", API_VERSION), "kind": obj["kind"],
            "name": meta["name"], "uid": meta["uid"], "controller": True,
            "blockOwnerDeletion": block}


def _meta(job: JobSpec, name: str, owner: Mapping[str, Any], kind: str,
          labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {"name": name, "namespace": job.namespace,
            "labels": {LABEL_JOB: job.name, LABEL_KIND: kind, **(labels or {})},
            "ownerReferences": [owner_ref(owner)]}


def adl_configmap(job: JobSpec, job_obj: Mapping[str, Any], adl: bytes) -> dict[str, Any]:
    """The job's ADL, kept for re-fusion when a parallel region's width changes."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _meta(job, f"{job.name}-adl", job_obj, "adl"),
            "data": {ADL_XML: adl.decode("utf-8", "replace")}}


def pe_document(pe: Any, peers: Iterable[int]) -> dict[str, Any]:
    """What the controller keeps of a fused PE (in its AADL ConfigMap), JSON-ready."""
    pool = pe.host_pool
    return {
        "index": pe.index, "operators": list(pe.operators), "restartable": pe.restartable,
        "relocatable": pe.relocatable, "consistentRegions": sorted(pe.consistent_regions),
        "hostPool": None if pool is None else {"name": pool.name, "index": pool.index,
                                               "tags": list(pool.tags), "hosts": list(pool.hosts)},
        "host": pe.host, "hostColocation": sorted(pe.host_coloc),
        "hostExlocation": sorted(pe.host_exloc), "hostIsolation": pe.host_isolation,
        "parallelRegion": pe.parallel_region, "channel": pe.channel, "peers": sorted(peers),
    }


def pe_triggers(app: Any, pe: Any) -> dict[str, str]:
    """{region: operator} for each operator-driven consistent region whose trigger operator this PE
    runs (pe.json `triggers`): that PE starts the region's drains (`PUT /region/R/drain`), as the
    runtime learns from the operator's `consistentRegionEntry` annotation. A channel `op[c]` of a
    trigger is named by its logical name, the one the region's spec lists."""
    out = {}
    for region in app.consistent_regions:
        if region.trigger != "operatorDriven" or region.index not in pe.consistent_regions:
            continue
        hosted = [op.split("[", 1)[0] for op in pe.operators]
        found = next((op for op in hosted if op in region.trigger_operators), None)
        if found is not None:
            out[str(region.index)] = found
    return out


def aadl_configmap(job: JobSpec, job_obj: Mapping[str, Any], doc: Mapping[str, Any],
                   aadl: bytes, content_id: str) -> dict[str, Any]:
    index = doc["index"]
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {**_meta(job, aadl_configmap_name(job.name, index), job_obj, "aadl",
                                 {LABEL_PE: str(index), LABEL_CONTENT: content_id})},
            "data": {AADL_XML: aadl.decode("utf-8", "replace"),
                     PE_JSON: orjson.dumps(doc, option=orjson.OPT_SORT_KEYS).decode()}}


def pe_object(job: JobSpec, job_obj: Mapping[str, Any], doc: Mapping[str, Any],
              content_id: str, launch_count: int = 1) -> dict[str, Any]:
    """A ProcessingElement: the seed's PE options (from the Job) plus what fusion decided."""
    options = {k: v for k, v in job.pe_options.items() if v is not None}
    options.setdefault("imagePullPolicy", job.image_pull_policy)
    if job.image_pull_secret:
        options.setdefault("imagePullSecret", job.image_pull_secret)
    options.setdefault("sabName", job.bundle_name)
    index = doc["index"]
    spec = {**options, "jobName": job.name, "id": index, "launchCount": launch_count,
            "contentId": content_id, "restartable": doc["restartable"],
            "operators": doc["operators"], "consistentRegions": doc["consistentRegions"]}
    if doc.get("parallelRegion") is not None:
        spec["parallelRegion"] = doc["parallelRegion"]
        spec["channel"] = doc["channel"]
    meta = _meta(job, pe_name(job.name, index), job_obj, "pe", {LABEL_PE: str(index)})
    meta["annotations"] = {ANNOTATION_POD_INPUTS: pod_inputs(job)}
    return {"apiVersion": API_VERSION, "kind": "ProcessingElement", "metadata": meta, "spec": spec}


ANNOTATION_POD_INPUTS = f"{GROUP}/pod-inputs"


def pod_inputs(job: JobSpec) -> str:
    """A digest of what of the Job its PEs' pods are made from beyond the PE's own spec (the PE
    options, the job's resources and queue, the certificate's validity under TLS): a spec edit that
    changes it relaunches the PEs (`respec`), one that does not leaves them running."""
    inputs = {"options": {k: v for k, v in job.pe_options.items() if v is not None},
              "pullPolicy": job.image_pull_policy, "pullSecret": job.image_pull_secret,
              "sab": job.bundle_name, "resources": job.resources, "queue": job.queue,
              "certDays": job.transport_cert_days if transportcert.secured(job.pe_options) else None}
    return hashlib.blake2b(orjson.dumps(inputs, option=orjson.OPT_SORT_KEYS), digest_size=8).hexdigest()


def host_pool_object(job: JobSpec, job_obj: Mapping[str, Any], pool: Any) -> dict[str, Any]:
    spec = {"jobName": job.name, "name": pool.name, "index": pool.index, "tags": list(pool.tags),
            "hosts": list(pool.hosts), "exclusive": bool(pool.exclusive)}
    if pool.size is not None:
        spec["size"] = pool.size
    return {"apiVersion": API_VERSION, "kind": "HostPool",
            "metadata": _meta(job, dns_name(job.name, pool.name or pool.index), job_obj, "hostpool"),
            "spec": spec}


def parallel_region_object(job: JobSpec, job_obj: Mapping[str, Any], region: Any,
                           fusion_type: str | None) -> dict[str, Any]:
    spec = {"jobName": job.name, "name": region.name, "width": region.width}
    if fusion_type:
        spec["type"] = fusion_type
    return {"apiVersion": API_VERSION, "kind": "ParallelRegion",
            "metadata": _meta(job, parallel_region_name(job.name, region.name), job_obj, "parallelregion"),
            "spec": spec}


def parallel_region_name(job: str, region: str) -> str:
    return dns_name(job, region)


def consistent_region_object(job: JobSpec, job_obj: Mapping[str, Any], region: Any,
                             pes_in_region: Sequence[int]) -> dict[str, Any]:
    spec = {"jobName": job.name, "regionIndex": region.index,
            "numStartOperators": len(region.start_operators), "trigger": region.trigger,
            "period": float(region.period), "drainTimeout": float(region.drain_timeout),
            "resetTimeout": float(region.reset_timeout),
            "maxConsecutiveResetAttempts": int(region.max_consecutive_reset_attempts),
            "pesInRegion": sorted(pes_in_region),
            "operatorsToStartRegionMap": {op: True for op in region.start_operators},
            "operatorsToTriggerMap": {op: True for op in region.trigger_operators}}
    return {"apiVersion": API_VERSION, "kind": "ConsistentRegion",
            "metadata": _meta(job, f"{job.name}-{region.index}", job_obj, "consistentregion"),
            "spec": spec}


def region_operator_object(job: JobSpec, job_obj: Mapping[str, Any], regions: int) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "ConsistentRegionOperator",
            "metadata": _meta(job, job.name, job_obj, "consistentregionoperator"),
            "spec": {"jobName": job.name, "numRegions": regions, "jobId": job.uid}}


# --- pods --------------------------------------------------------------------------------------

def _group_key(kind: str, token: str) -> str:
    return f"{kind}.{GROUP}/{hashlib.sha1(token.encode()).hexdigest()[:10]}"


def _term(labels: Mapping[str, str]) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": dict(labels)}, "topologyKey": HOSTNAME}


def placement(job: JobSpec, doc: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """(labels the PE's pod carries, its `affinity`) for its host pool, host and host groups."""
    labels: dict[str, str] = {}
    affinity: dict[str, Any] = {}
    node_terms: list[dict[str, Any]] = []
    pool = doc.get("hostPool")
    hosts: list[str] = []
    if doc.get("host"):
        hosts = [doc["host"]]
    elif pool and pool.get("hosts"):
        hosts = list(pool["hosts"])
    if hosts:
        node_terms.append({"key": HOSTNAME, "operator": "In", "values": hosts})
    if pool and pool.get("tags"):
        node_terms.append({"key": LABEL_HOSTPOOL, "operator": "In", "values": list(pool["tags"])})
    if node_terms:
        affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": node_terms}]}}
    together, apart = [], []
    for token in doc.get("hostColocation") or ():
        key = _group_key("coloc", f"{job.uid}/{token}")
        labels[key] = "1"
        together.append(_term({key: "1"}))
    for token in doc.get("hostExlocation") or ():
        key = _group_key("exloc", f"{job.uid}/{token}")
        labels[key] = "1"
        apart.append(_term({key: "1"}))
    if doc.get("hostIsolation"):
        labels[LABEL_ISOLATED] = "true"
        apart.append({"labelSelector": {"matchExpressions": [{"key": LABEL_JOB, "operator": "Exists"}]},
                      "topologyKey": HOSTNAME})
    if together:
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": together}
    if apart:
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": apart}
    return labels, affinity


def task_group_name(index: int) -> str:
    return f"pe-{index}"


def task_groups(job: JobSpec, docs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """YuniKorn task groups of a job: one per PE, so the gang reserves each PE's own place."""
    groups = []
    res = resources_for_pes(job.resources, job.pe_options.get("resources"), len(docs))
    for doc in sorted(docs, key=lambda d: d["index"]):
        labels, affinity = placement(job, doc)
        group: dict[str, Any] = {"name": task_group_name(doc["index"]), "minMember": 1,
                                 "minResource": res.get("requests") or res.get("limits") or {}}
        if labels:
            group["labels"] = labels
        if affinity:
            group["affinity"] = affinity
        groups.append(group)
    return groups


def pod_object(job: JobSpec, pe: Mapping[str, Any], doc: Mapping[str, Any], pe_count: int,
               groups_json: str, runtime: PeRuntime = PeRuntime()) -> dict[str, Any]:
    """The pod of a PE's current launch, owned by the PE: the Streams runtime as OpenStreams
    runs it (`peobjects`), scheduled by ykshm as part of the job's gang."""
    spec = pe["spec"]
    index, launch = int(spec["id"]), int(spec.get("launchCount") or 1)
    extra_labels, affinity = placement(job, doc)
    resources = resources_for_pes(job.resources, spec.get("resources"), pe_count)
    volumes, mounts = peobjects.volumes(job.name, aadl_configmap_name(job.name, index), spec, runtime)
    container = peobjects.container(runtime, job.namespace, job.name, spec, index, launch, mounts, resources,
                                    spec.get("imagePullPolicy") or job.image_pull_policy)
    pod_spec: dict[str, Any] = {
        "schedulerName": "yunikorn", "restartPolicy": "Never", "containers": [container],
        "volumes": volumes, **peobjects.pod_extras()}
    if affinity:
        pod_spec["affinity"] = affinity
    secret = spec.get("imagePullSecret") or job.image_pull_secret
    if secret:
        pod_spec["imagePullSecrets"] = [{"name": secret}]
    labels = {**peobjects.pe_labels(job.name, index, bool(doc.get("consistentRegions"))),
              LABEL_JOB: job.name, LABEL_KIND: "pod", LABEL_PE: str(index), LABEL_LAUNCH: str(launch),
              LABEL_CONTENT: str(spec.get("contentId") or ""), "applicationId": job.app_id,
              "queue": job.queue, **extra_labels}
    annotations = {"yunikorn.apache.org/task-group-name": task_group_name(index),
                   "yunikorn.apache.org/task-groups": groups_json,
                   "yunikorn.apache.org/schedulingPolicyParameters":
                       "placeholderTimeoutInSeconds=60 gangSchedulingStyle=Hard",
                   f"{GROUP}/contentId": str(spec.get("contentId") or "")}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name(job.name, index, launch), "namespace": job.namespace,
                         "labels": labels, "annotations": annotations,
                         "ownerReferences": [owner_ref(pe)]},
            "spec": pod_spec}


def pe_service(job: JobSpec, job_obj_ref: Mapping[str, Any], doc: Mapping[str, Any]) -> dict[str, Any]:
    """The PE's headless Service `JOB-N` (peobjects.pe_service), owned as `job_obj_ref` says."""
    return peobjects.pe_service(job.namespace, job.name, int(doc["index"]), int(doc.get("inputPorts") or 0),
                                job_obj_ref)
