"""What a PE's runtime needs around its pod, as OpenStreams makes it (no I/O).

OpenStreams' `PodSpecBuilder`, `ConfigMapFactory` and `ServiceFactory` are the reference (see the
project's research notes, `openstreams-objects.md`); where this differs it says so.

The `pe` container: the Streams runtime image (`PeRuntime.image`, OpenStreams' default
`docker.io/openstreams/streams-runtime:6.{build}`, `{build}` the PE's `buildType`; a PE option
`image` wins), no command, args = the bootstrap; the `STREAMS_*` environment in OpenStreams' order;
the liveness probe the runtime answers (`cat /tmp/live`, which it touches at start); `SYS_PTRACE`
when `allowPtrace` / `runWithValgrind` (OpenStreams also adds SYS_ADMIN; we do not grant it). Pod:
runAsUser 2098 / runAsGroup 2015, `dnsConfig` single-request-reopen.

Volumes (mount paths as OpenStreams'):

| volume                               | source                                   | mounted at |
|--------------------------------------|------------------------------------------|------------|
| pe-config-volume                     | the PE's AADL ConfigMap (`aadl.xml`)     | /etc/config/pe |
| job-config-volume                    | ConfigMap `JOB` (`operator_port_labels.properties`; `transport.cert`/`.key` under TLS) | /etc/config/job |
| job-token-volume                     | Secret `JOB-token` (`token`)             | /etc/config/token (ours: the PE's credential for the bundle endpoint and the cr-operator) |
| data-volume                          | PVC `dataVolumeClaim` (subPath), else hostPath `dataPath`, else hostPath `$STREAMS_DATA_PATH` of the controller | /data |
| checkpoint-volume                    | PVC / hostPath of `checkpointRepository.fileSystem` (`path: null`: `$STREAMS_CHECKPOINT_PATH`) | /checkpoint |
| app-properties-secret-volume         | Secret `appPropertiesSecret`             | /etc/config/app |
| restricted-properties-secret-volume  | Secret `restrictedPropertiesSecret`      | /etc/config/restricted |

One headless Service per PE, `JOB-N` (the PE's name), selecting the PE's pods: `sys-I` TCP
10000+I per PE input port I (the AADL's PE port ids), `sys-metrics` 9696, `sys-notifications`
10000/UDP and `sys-consistentregion` 10001/UDP, so a PE reaches another as `JOB-N.NS` and the
cr-operator notifies it at `JOB-N.NS:10001`.

The bundle: OpenStreams' bootstrap reads it from Redis behind `streams-api` port 6379 (`HGET apps
NAME`), which the controller's repository answers (`repository`); ours also serves it over HTTP from
the controller (`bundleserver`) at `http://streams-api.NS:10000/api/bundles/NS/JOB`, with the job's
token (`Authorization: Bearer`). `STREAMS_BUNDLE_URL` tells `ykshm pe-sim` where.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

GROUP = "streams.ibm.com"
DEFAULT_IMAGE = "docker.io/openstreams/streams-runtime:6.{build}"
BOOTSTRAP = "/usr/local/streams/system/impl/bin/streams-k8s-bootstrap"
STREAMS_INSTALL = "/usr/local/streams"
RUN_AS_USER, RUN_AS_GROUP = 2098, 2015
PE_BASE_PORT, CR_PORT, METRICS_PORT, API_PORT, REPOSITORY_PORT = 10000, 10001, 9696, 10000, 6379
API_SERVICE = "streams-api"
BUNDLE_PATH = "/api/bundles"
TOKEN_DIR, TOKEN_KEY = "/etc/config/token", "token"
LIVE_FILE = "/tmp/live"
PORT_LABELS = "operator_port_labels.properties"
LABEL_APP, LABEL_SVC, LABEL_CR = "app", "svc", f"{GROUP}/cr"


@dataclasses.dataclass(frozen=True)
class PeRuntime:
    """How the controller runs PEs: the runtime image pattern (`ykshm streams --pe-image`), and the
    host paths its environment gives PEs that name none (OpenStreams' `KubernetesEnvironment`:
    `STREAMS_DATA_PATH`, `STREAMS_CHECKPOINT_PATH`; `from_environ`)."""

    image: str = DEFAULT_IMAGE
    data_path: str | None = None          # the /data hostPath when a PE has no claim nor dataPath
    checkpoint_path: str | None = None    # the /checkpoint hostPath of a fileSystem store whose path is null

    @classmethod
    def from_environ(cls, image: str, environ: Mapping[str, str]) -> PeRuntime:
        """The controller's settings; an empty variable is unset (as `Optional.ofNullable` of
        OpenStreams reads an unset one); a relative path is a usage error (`ValueError`)."""
        paths = {}
        for name, var in (("data_path", "STREAMS_DATA_PATH"), ("checkpoint_path", "STREAMS_CHECKPOINT_PATH")):
            value = environ.get(var) or None
            if value is not None and (not value.startswith("/") or "\0" in value):
                raise ValueError(f"{var}={value!r}: the hostPath must be an absolute path")
            paths[name] = value
        return cls(image=image, **paths)

    def image_for(self, pe_spec: Mapping[str, Any]) -> str:
        if pe_spec.get("image"):
            return str(pe_spec["image"])
        build = str(pe_spec.get("buildType") or "debug").lower()
        return self.image.replace("{build}", build)


def token_secret_name(job: str) -> str:
    return f"{job}-token"


def new_token() -> str:
    """A per-job credential (256 bits)."""
    return secrets.token_urlsafe(32)


def bundle_url(namespace: str, job: str) -> str:
    return f"http://{API_SERVICE}.{namespace}:{API_PORT}{BUNDLE_PATH}/{namespace}/{job}"


def _env(name: str, value: object) -> dict[str, str]:
    return {"name": name, "value": str(value)}


def environment(namespace: str, job: str, pe_spec: Mapping[str, Any], index: int,
                launch: int) -> list[dict[str, str]]:
    """The `pe` container's environment, in OpenStreams' order (`PodSpecBuilder`), plus ours."""
    env = [_env("STREAMS_DOMAIN_ID", "kubernetes"),
           _env("STREAMS_INITIAL_TRACE_LEVEL", pe_spec.get("runtimeTraceLevel") or "INFO"),
           _env("STREAMS_INSTALL", STREAMS_INSTALL), _env("STREAMS_INSTANCE_ID", namespace),
           _env("STREAMS_JOB_NAME", job), _env("STREAMS_NS", "K8S:"), _env("STREAMS_PE_ID", index),
           _env("STREAMS_PE_LAUNCH_COUNT", launch), _env("STREAMS_PE_NAME", f"{job}-{index}"),
           _env("STREAMS_PE_USE_VALGRIND", "true" if pe_spec.get("runWithValgrind") else "false"),
           _env("STREAMS_SAB_NAME", pe_spec.get("sabName") or ""),
           _env("STREAMS_TRANSPORT_SECURITY_TYPE", pe_spec.get("transportSecurityType") or "none")]
    if pe_spec.get("appTraceLevel"):
        env.append(_env("STREAMS_APP_TRACE_LEVEL", pe_spec["appTraceLevel"]))
    store = pe_spec.get("checkpointRepository") or {}
    if isinstance(store, Mapping) and isinstance(store.get("fileSystem"), Mapping):
        env += [_env("STREAMS_CHECKPOINT_REPOSITORY", "fileSystem"),
                _env("STREAMS_CHECKPOINT_REPOSITORY_CONFIGURATION", '{ "Dir" : "/checkpoint" }')]
    env.append(_env("STREAMS_BUNDLE_URL", bundle_url(namespace, job)))
    # ours: where a PE binds when pods share a host's addresses (sim-cluster); the runtime binds any
    env.append({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    return env


def _claim_or_path(name: str, claim: Any, path: Any) -> dict[str, Any] | None:
    if isinstance(claim, Mapping) and claim.get("name"):
        return {"name": name, "persistentVolumeClaim": {"claimName": str(claim["name"])}}
    if path:
        return {"name": name, "hostPath": {"path": str(path), "type": ""}}
    return None


def volumes(job: str, aadl_configmap: str, pe_spec: Mapping[str, Any],
            runtime: PeRuntime = PeRuntime()) -> tuple[list, list]:
    """(pod volumes, container volumeMounts) of a PE pod; `/data` as OpenStreams' PodSpecBuilder:
    the claim, else `dataPath`, else the controller's STREAMS_DATA_PATH, else none."""
    vols = [{"name": "pe-config-volume", "configMap": {"name": aadl_configmap}},
            {"name": "job-config-volume", "configMap": {"name": job}},
            {"name": "job-token-volume", "secret": {"secretName": token_secret_name(job)}}]
    mounts = [{"name": "pe-config-volume", "mountPath": "/etc/config/pe", "readOnly": True},
              {"name": "job-config-volume", "mountPath": "/etc/config/job", "readOnly": True},
              {"name": "job-token-volume", "mountPath": TOKEN_DIR, "readOnly": True}]
    claim = pe_spec.get("dataVolumeClaim")
    data = _claim_or_path("data-volume", claim, pe_spec.get("dataPath") or runtime.data_path)
    if data is not None:
        vols.append(data)
        mounts.append({"name": "data-volume", "mountPath": "/data",
                       **({"subPath": str(claim["subPath"])} if isinstance(claim, Mapping) and claim.get("subPath") else {})})
    store = pe_spec.get("checkpointRepository") or {}
    fs = store.get("fileSystem") if isinstance(store, Mapping) else None
    if isinstance(fs, Mapping):
        claim = fs.get("volumeClaim")
        # FilesystemDataStoreSpec's path defaults to /checkpoint; only an explicit null takes the
        # controller's STREAMS_CHECKPOINT_PATH (and with none set, the volume is /checkpoint still)
        path = fs["path"] if "path" in fs else "/checkpoint"
        vols.append(_claim_or_path("checkpoint-volume", claim, path or runtime.checkpoint_path or "/checkpoint"))
        mounts.append({"name": "checkpoint-volume", "mountPath": "/checkpoint",
                       **({"subPath": str(claim["subPath"])} if isinstance(claim, Mapping) and claim.get("subPath") else {})})
    for key, name, path in (("appPropertiesSecret", "app-properties-secret-volume", "/etc/config/app"),
                            ("restrictedPropertiesSecret", "restricted-properties-secret-volume",
                             "/etc/config/restricted")):
        if pe_spec.get(key):
            vols.append({"name": name, "secret": {"secretName": str(pe_spec[key])}})
            mounts.append({"name": name, "mountPath": path, "readOnly": True})
    return vols, mounts


def container(runtime: PeRuntime, namespace: str, job: str, pe_spec: Mapping[str, Any], index: int,
              launch: int, mounts: list, resources: Mapping[str, Any], pull_policy: str) -> dict[str, Any]:
    """The single `pe` container of a PE pod."""
    out: dict[str, Any] = {
        "name": "pe", "image": runtime.image_for(pe_spec), "imagePullPolicy": pull_policy,
        "args": [BOOTSTRAP], "env": environment(namespace, job, pe_spec, index, launch),
        "resources": dict(resources),
        "livenessProbe": {"exec": {"command": ["cat", LIVE_FILE]},
                          "initialDelaySeconds": int(pe_spec.get("initialProbeDelayInSeconds", 30)),
                          "failureThreshold": int(pe_spec.get("probeFailureThreshold", 1)),
                          "periodSeconds": int(pe_spec.get("probeIntervalInSeconds", 10))},
        "volumeMounts": mounts}
    if pe_spec.get("allowPtrace") or pe_spec.get("runWithValgrind"):
        out["securityContext"] = {"capabilities": {"add": ["SYS_PTRACE"]}}
    return out


def pod_extras() -> dict[str, Any]:
    """The pod-level settings OpenStreams gives every PE pod."""
    return {"securityContext": {"runAsUser": RUN_AS_USER, "runAsGroup": RUN_AS_GROUP},
            "dnsConfig": {"options": [{"name": "single-request-reopen"}]}}


def pe_labels(job: str, index: int, in_region: bool) -> dict[str, str]:
    """OpenStreams' PE labels (the Service selects on app, job and pe)."""
    return {LABEL_APP: "streams", LABEL_SVC: "pe", f"{GROUP}/job": job, f"{GROUP}/pe": str(index),
            LABEL_CR: "true" if in_region else "false"}


def pe_service(namespace: str, job: str, index: int, input_ports: int,
               owner: Mapping[str, Any]) -> dict[str, Any]:
    """The headless Service `JOB-N` through which other PEs and the cr-operator reach PE N."""
    ports = [{"name": f"sys-{i}", "port": PE_BASE_PORT + i, "protocol": "TCP"} for i in range(input_ports)]
    ports += [{"name": "sys-metrics", "port": METRICS_PORT, "protocol": "TCP"},
              {"name": "sys-notifications", "port": PE_BASE_PORT, "protocol": "UDP"},
              {"name": "sys-consistentregion", "port": CR_PORT, "protocol": "UDP"}]
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"{job}-{index}", "namespace": namespace,
                         "labels": {LABEL_APP: "streams", LABEL_SVC: "pe", f"{GROUP}/job": job,
                                    f"{GROUP}/pe": str(index)},
                         "ownerReferences": [owner]},
            "spec": {"clusterIP": "None", "ports": ports,
                     "selector": {LABEL_APP: "streams", f"{GROUP}/job": job, f"{GROUP}/pe": str(index)}}}


def port_labels(labels: Mapping[str, str]) -> str:
    """`operator_port_labels.properties` as `java.util.Properties.store` writes it (no date line:
    the ConfigMap stays byte-stable)."""
    lines = ["#Operator port labels"]
    lines += [f"{k}={v}" for k, v in sorted(labels.items())]
    return "\n".join(lines) + "\n"


def job_configmap(namespace: str, job: str, labels: Mapping[str, str],
                  owner: Mapping[str, Any], transport: Mapping[str, str] | None = None) -> dict[str, Any]:
    """ConfigMap `JOB`, mounted at /etc/config/job: where the runtime's name service finds which
    PE port each operator input port is, and, under transport security, the job's certificate and
    key (`transport`: `transportcert.for_job`)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": job, "namespace": namespace,
                         "labels": {LABEL_APP: "streams", f"{GROUP}/job": job, f"{GROUP}/kind": "job"},
                         "ownerReferences": [owner]},
            "data": {**(transport or {}), PORT_LABELS: port_labels(labels)}}


def token_secret(namespace: str, job: str, token: str, owner: Mapping[str, Any]) -> dict[str, Any]:
    """Secret `JOB-token`: the job's PEs' credential (mounted at /etc/config/token)."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": token_secret_name(job), "namespace": namespace,
                         "labels": {LABEL_APP: "streams", f"{GROUP}/job": job, f"{GROUP}/kind": "token"},
                         "ownerReferences": [owner]},
            "stringData": {TOKEN_KEY: token}}


def api_service(namespace: str, port: int, address: str, repository_port: int | None = None) -> list[dict[str, Any]]:
    """`streams-api` in a job's namespace: a selector-less Service and its Endpoints pointing at
    the controller's bundle endpoint. Selector-less on purpose, also when the controller runs as a
    pod (deploy/kubernetes, `--api-bind` on its pod IP): one controller serves every namespace,
    while a Service selects pods of its own namespace only, so a selector could never reach the
    controller from a job's namespace (OpenStreams has one controller per namespace, we do not);
    and under systemd or `ykshm run` there is no pod to select. The controller writes the Endpoints
    again at start, so a rescheduled controller pod (a new IP) is found. With a bundle repository
    (`repository_port`, the redis-server's real port), OpenStreams' second port `repository` 6379."""
    meta = {"name": API_SERVICE, "namespace": namespace, "labels": {LABEL_APP: "streams", LABEL_SVC: "api"}}
    ports = [("api", API_PORT, port)]
    if repository_port is not None:
        ports.append(("repository", REPOSITORY_PORT, repository_port))
    return [{"apiVersion": "v1", "kind": "Service", "metadata": dict(meta),
             "spec": {"ports": [{"name": name, "port": front, "targetPort": back, "protocol": "TCP"}
                                for name, front, back in ports]}},
            {"apiVersion": "v1", "kind": "Endpoints", "metadata": dict(meta),
             "subsets": [{"addresses": [{"ip": address}],
                          "ports": [{"name": name, "port": back, "protocol": "TCP"} for name, _, back in ports]}]}]


def port_keys(ports: Sequence[Mapping[str, Any]] | None) -> list[tuple]:
    """A Service's ports as compared (name, port, targetPort, protocol): what the API adds is left out."""
    return sorted((p.get("name"), p.get("port"), p.get("targetPort"), p.get("protocol") or "TCP")
                  for p in ports or ())


def input_port_counts(in_ports: Mapping[tuple[str, int], int], pes: Sequence[Any]) -> dict[int, int]:
    """PE index -> how many PE input ports it has (from `aadl.pe_ports`)."""
    where = {name: pe.index for pe in pes for name in pe.operators}
    counts = {pe.index: 0 for pe in pes}
    for (op, _port), index in in_ports.items():
        counts[where[op]] = max(counts[where[op]], index + 1)
    return counts
