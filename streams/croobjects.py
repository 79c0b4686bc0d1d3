"""The consistent-region operator as a Deployment and a Service, as OpenStreams makes them (no I/O).

When a ConsistentRegionOperator (`JOB`) appears, the controller (in `--operators pod` mode)
creates, owned by it so they go with the job:

- Deployment `JOB-consistent-region-operator` (labels = selector = `app: streams`,
  `streams.ibm.com/job: JOB`, `svc: consistent-region-operator`; replicas 1): our image
  (`ykshm:VERSION`), `ykshm cr-operator --job NS/JOB` binding the pod's IP on 10000 (the API) and
  9696 (metrics), advertising the Service's URL, notifying PEs by UDP at their Service's address;
  OpenStreams' env (`STREAMS_JOB_NAME`, `STREAMS_LOG_LEVEL`, `MY_POD_NAMESPACE`,
  `NUM_CONSISTENT_REGIONS`, `STREAMS_JOB_ID`); scheduled by ykshm (`schedulerName: yunikorn`,
  application `NS-JOB-cr-operator`).
- ServiceAccount, Role and RoleBinding `JOB-consistent-region-operator`: the pod's identity is
  its job's alone, and the Role grants what one operator reads in its job's namespace (its
  regions and their status, the PEs and pods it watches) and one Secret, `resourceNames:
  [JOB-token]`. OpenStreams runs every operator as `default` with a ClusterRoleBinding; one
  shared ServiceAccount with `secrets get` let whoever may mint its token (an editor of its
  namespace) read every job's token, or with a cluster-wide grant every Secret of the cluster
  (security review 2, N5). The controller may create the Role because it holds every rule in it
  (kube-apiserver's escalation check).
- Service `streams-JOB-consistentregion-api` (headless, `sys-api` 10000/TCP, `sys-metrics`
  9696/TCP, same labels and selector): the address OpenStreams' runtime hard-codes,
  `streams-JOB-consistentregion-api.NS:10000/api/consistentregion`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .peobjects import GROUP, token_secret_name   # not .objects: a PE pod imports this module, and .objects costs it ~50 ms

API_PORT, METRICS_PORT = 10000, 9696
BASE_PATH = "/api/consistentregion"
WAITING_FOR_SECRET = "WaitingForSecret"
"""The ConsistentRegionOperator's `status.phase` while its job's token Secret is missing: the
operator serves nothing (fail closed) and the controller's repair makes the Secret again."""


def default_image() -> str:
    """`ykshm:VERSION`, VERSION the installed package's (the image sim-cluster runs as ykshm; the
    same rule as simcluster.procimages, which streams may not import)."""
    from importlib import metadata

    try:
        return f"ykshm:{metadata.version('ykshm')}"
    except metadata.PackageNotFoundError:
        return "ykshm:dev"


def deployment_name(job: str) -> str:
    return f"{job}-consistent-region-operator"


def account_name(job: str) -> str:
    """The operator's ServiceAccount, Role and RoleBinding: one per job."""
    return deployment_name(job)


def service_name(job: str) -> str:
    return f"streams-{job}-consistentregion-api"


def api_url(namespace: str, job: str) -> str:
    """Where a PE reaches its job's operator (OpenStreams' K8SPlatform.cpp)."""
    return f"http://{service_name(job)}.{namespace}:{API_PORT}{BASE_PATH}"


def labels(job: str) -> dict[str, str]:
    return {"app": "streams", f"{GROUP}/job": job, "svc": "consistent-region-operator"}


def _owner(cro: Mapping[str, Any]) -> dict[str, Any]:
    from .objects import owner_ref   # here, not at the top: see the GROUP import

    return owner_ref(cro)


def _job_of(cro: Mapping[str, Any]) -> tuple[str, str]:
    meta = cro["metadata"]
    return meta.get("namespace") or "default", (cro.get("spec") or {}).get("jobName") or meta["name"]


def deployment(cro: Mapping[str, Any], image: str, source_argv: Sequence[str],
               log_level: str = "INFO") -> dict[str, Any]:
    """The operator's Deployment for the ConsistentRegionOperator `cro`."""
    namespace, job = _job_of(cro)
    spec = cro.get("spec") or {}
    env = [{"name": "STREAMS_JOB_NAME", "value": job}, {"name": "STREAMS_LOG_LEVEL", "value": log_level},
           {"name": "MY_POD_NAMESPACE", "value": namespace},
           {"name": "NUM_CONSISTENT_REGIONS", "value": str(spec.get("numRegions") or 0)},
           {"name": "STREAMS_JOB_ID", "value": str(spec.get("jobId") or "")},
           {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    args = ["cr-operator", "--job", f"{namespace}/{job}", *source_argv,
            "--bind", f"$(POD_IP):{API_PORT},$(POD_IP):{METRICS_PORT}",
            "--advertise", api_url(namespace, job), "--notify-pods"]
    template_labels = {**labels(job), "applicationId": f"{namespace}-{job}-cr-operator"}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": deployment_name(job), "namespace": namespace, "labels": labels(job),
                         "ownerReferences": [_owner(cro)]},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels(job)},
                     "template": {"metadata": {"labels": template_labels},
                                  "spec": {"schedulerName": "yunikorn", "serviceAccountName": account_name(job),
                                           "containers": [{"name": "consistent-region-operator",
                                                           "image": image, "command": ["ykshm"], "args": args,
                                                           "env": env}]}}}}


def service(cro: Mapping[str, Any]) -> dict[str, Any]:
    """The operator's headless Service, the name PEs reach it by."""
    namespace, job = _job_of(cro)
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": service_name(job), "namespace": namespace, "labels": labels(job),
                         "ownerReferences": [_owner(cro)]},
            "spec": {"clusterIP": "None", "selector": labels(job),
                     "ports": [{"name": "sys-api", "port": API_PORT, "protocol": "TCP"},
                               {"name": "sys-metrics", "port": METRICS_PORT, "protocol": "TCP"}]}}


def network_policy(cro: Mapping[str, Any]) -> dict[str, Any]:
    """Who may reach the operator's pod (enforced by the cluster's network plugin): its API
    (`sys-api`) only the job's own PE pods, its metrics (`sys-metrics`) any scraper."""
    namespace, job = _job_of(cro)
    pe_pods = {"podSelector": {"matchLabels": {f"{GROUP}/job": job, f"{GROUP}/kind": "pod"}}}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": service_name(job), "namespace": namespace, "labels": labels(job),
                         "ownerReferences": [_owner(cro)]},
            "spec": {"podSelector": {"matchLabels": labels(job)}, "policyTypes": ["Ingress"],
                     "ingress": [{"from": [pe_pods], "ports": [{"port": API_PORT, "protocol": "TCP"}]},
                                 {"ports": [{"port": METRICS_PORT, "protocol": "TCP"}]}]}}


def _metadata(cro: Mapping[str, Any]) -> dict[str, Any]:
    namespace, job = _job_of(cro)
    return {"name": account_name(job), "namespace": namespace, "labels": labels(job),
            "ownerReferences": [_owner(cro)]}


def service_account(cro: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(cro)}


def role_rules(job: str) -> list[dict[str, Any]]:
    """What one job's operator may do in its namespace (see the module docstring)."""
    read = ["get", "list", "watch"]
    return [{"apiGroups": [GROUP], "resources": ["streamscrs", "streamscrs/status", "streamscros",
                                                 "streamscros/status"], "verbs": [*read, "patch", "update"]},
            {"apiGroups": [GROUP], "resources": ["streamspes"], "verbs": read},
            {"apiGroups": [""], "resources": ["pods"], "verbs": read},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
             "resourceNames": [token_secret_name(job)]}]


def role(cro: Mapping[str, Any]) -> dict[str, Any]:
    _, job = _job_of(cro)
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _metadata(cro),
            "rules": role_rules(job)}


def role_binding(cro: Mapping[str, Any]) -> dict[str, Any]:
    namespace, job = _job_of(cro)
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": _metadata(cro),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account_name(job)},
            "subjects": [{"kind": "ServiceAccount", "name": account_name(job), "namespace": namespace}]}
