"""A Streams `Job` spec, read and checked: what the controller acts on.

The CRD (deploy/crds/job.yaml) already applies the seed's defaults and refuses wrong types, so
this module checks what a schema cannot say, the seed's *logical errors*: more than one fusion
kind, more than one threading model, more than one bundle source. A logical error is reported (Job `Failed`, a condition naming the fields, a Warning
event), never resolved by a precedence as OpenStreams does.

Where the seed and OpenStreams differ we follow the seed:
- the Job's `resources` are divided by the PE count for requests *and* limits (OpenStreams
  divides the limits only);
- `imagePullPolicy` defaults to `Always` (OpenStreams: IfNotPresent).

PE options come from `spec.processingElement` (the seed's PE table) with the seed's defaults;
`resources_for_pes` is the seed's four-row table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from common.quantity import QuantityError, parse_milli, parse_quantity

from .errors import LogicalError
from .fetch import parse_bundle_spec
from .fusion import FusionSpec
from .jobids import job_id_of

DEFAULT_PE_REQUESTS = {"cpu": "100m", "memory": "128Mi"}
DEFAULT_QUEUE = "root.default"
QUEUE_LABEL = "queue"

# The seed's PE table: option -> default (None = unset).
PE_DEFAULTS: dict[str, Any] = {
    "buildType": "debug",
    "imagePullPolicy": None,          # inherited from the Job
    "imagePullSecret": None,          # inherited from the Job
    "sabName": None,                  # inherited from the Job's bundle name
    "transportSecurityType": "none",
    "resources": None,
    "allowPtrace": False,
    "runWithValgrind": False,
    "appTraceLevel": None,
    "runtimeTraceLevel": "INFO",
    "deleteFailedPod": True,
    "restartCompletedPod": False,
    "restartDeletedPod": False,
    "restartFailedPod": None,         # None: the PE's `restartable` from the ADL
    "initialProbeDelayInSeconds": 30,
    "probeFailureThreshold": 1,
    "probeIntervalInSeconds": 10,
    "dataPath": None,
    "dataVolumeClaim": None,
    "checkpointRepository": None,
    "appPropertiesSecret": None,
    "restrictedPropertiesSecret": None,
}

@dataclasses.dataclass(frozen=True)
class JobSpec:
    """What the controller reads from a Job object."""

    namespace: str
    name: str
    uid: str
    bundle: Mapping[str, Any]
    fusion: Mapping[str, Any]
    threading_model: Mapping[str, Any]
    image_pull_policy: str
    image_pull_secret: str | None
    pe_options: Mapping[str, Any]
    submission_timeout: float
    resources: Mapping[str, Any]
    queue: str
    submission_values: Mapping[str, str] = dataclasses.field(default_factory=dict)
    job_id: int = 0
    """The job's id (`status.jobId`, streams/jobids.py): its AADLs' `jobId` and port labels. 0
    before the controller gives one, and for a job launched before ids existed (what its AADLs say)."""
    transport_cert_days: int = 30     # transportCertificateValidityInDays (transportcert)

    @property
    def app_id(self) -> str:
        """The YuniKorn application ID of the job's pods: unique across namespaces."""
        return f"{self.namespace}-{self.name}"

    @property
    def bundle_name(self) -> str:
        return str(self.bundle.get("name") or "")


def _object(doc: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    """doc[key] as an object ({} when unset); LogicalError naming the field otherwise (the CRD
    schema refuses such a Job, but one written past it must not crash the controller)."""
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise LogicalError((f"{where}.{key}",), f"must be an object, not {value!r}")
    return value


def _seconds(doc: Mapping[str, Any], key: str, default: float) -> float:
    value = doc.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise LogicalError((f"spec.{key}",), f"must be a positive number of seconds, not {value!r}")
    return float(value)


def pe_options(job_pe: Mapping[str, Any] | None) -> dict[str, Any]:
    """The seed's PE options with defaults; `runWithValgrind` implies debug and ptrace."""
    options = dict(PE_DEFAULTS)
    options.update({k: v for k, v in (job_pe or {}).items() if v is not None})
    if options.get("runWithValgrind"):
        options["buildType"] = "debug"
        options["allowPtrace"] = True
    return options


def read_job(job: Mapping[str, Any]) -> JobSpec:
    """A Job object -> JobSpec; LogicalError (fields named) for the seed's logical errors, checked
    by the same validators the submission uses (`fetch.parse_bundle_spec`, `FusionSpec.from_job`)."""
    meta = job.get("metadata") or {}
    spec = job.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise LogicalError(("spec",), "must be an object")
    bundle = _object(spec, "bundle", "spec")
    parse_bundle_spec(bundle)
    fusion, threading = _object(spec, "fusion", "spec"), _object(spec, "threadingModel", "spec")
    FusionSpec.from_job(fusion, threading)
    resources = _object(spec, "resources", "spec")
    _check_resources("spec.resources", resources)
    options = pe_options(_object(spec, "processingElement", "spec"))
    _check_resources("spec.processingElement.resources",
                     _object(options, "resources", "spec.processingElement"))
    _check_checkpoint_repository(options.get("checkpointRepository"))
    _check_name(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
    labels = meta.get("labels") or {}
    values = _object(spec, "submissionTimeValues", "spec")
    return JobSpec(
        namespace=str(meta.get("namespace") or "default"), name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""), bundle=bundle, fusion=fusion, threading_model=threading,
        image_pull_policy=str(spec.get("imagePullPolicy") or "Always"),
        image_pull_secret=spec.get("imagePullSecret"), pe_options=options,
        submission_timeout=_seconds(spec, "submissionTimeOutInSeconds", 300.0),
        resources=resources, queue=str(labels.get(QUEUE_LABEL) or DEFAULT_QUEUE),
        submission_values={str(k): str(v) for k, v in values.items()},
        job_id=job_id_of(job) or 0,
        transport_cert_days=_days(spec, "transportCertificateValidityInDays", 30))


def _days(doc: Mapping[str, Any], key: str, default: int) -> int:
    value = doc.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 36500:
        raise LogicalError((f"spec.{key}",), f"must be a whole number of days from 1 to 36500, not {value!r}")
    return value


LABEL_VALUE_MAX = 63


def _check_name(namespace: str, name: str) -> None:
    """The Job name is a label value on every object of the job (`streams.ibm.com/job`) and,
    prefixed by the namespace, the pods' `applicationId`: both at most 63 characters, or every
    pod create would be refused (422) over and over."""
    if len(name) > LABEL_VALUE_MAX:
        raise LogicalError(("metadata.name",), f"{name!r} has {len(name)} characters; a Streams Job "
                           f"name is at most {LABEL_VALUE_MAX} (the streams.ibm.com/job label value)")
    app_id = f"{namespace}-{name}"
    if len(app_id) > LABEL_VALUE_MAX:
        raise LogicalError(("metadata.name",), f"{name!r}: the pods' applicationId label {app_id!r} has "
                           f"{len(app_id)} characters (at most {LABEL_VALUE_MAX}); use a shorter name")


CHECKPOINT_STORE = "spec.processingElement.checkpointRepository"


def _check_checkpoint_repository(store: Any) -> None:
    """No field that silently does nothing (issue 33 item 4): `fileSystem` is wired as OpenStreams
    wires it (peobjects: env and the /checkpoint volume); `redis` is refused, naming the field,
    since ykshm does not check and pass a Redis store as OpenStreams does (its service's A
    records as replicas x shards, `STREAMS_CHECKPOINT_REPOSITORY_CONFIGURATION` with the servers).
    The PEs would otherwise have run with no checkpoint store at all."""
    if store is None:
        return
    if not isinstance(store, Mapping):
        raise LogicalError((CHECKPOINT_STORE,), f"must be an object, not {store!r}")
    if "redis" in store:
        raise LogicalError((f"{CHECKPOINT_STORE}.redis",), "a Redis checkpoint store is not supported "
                           "by ykshm; use fileSystem (a volumeClaim or a path)")
    unknown = sorted(set(store) - {"fileSystem"})
    if not store:
        # OpenStreams: the fileSystem environment with no volume when its controller has
        # STREAMS_CHECKPOINT_PATH, else nothing at all; either way no store a user can see
        raise LogicalError((CHECKPOINT_STORE,), "names no store: give fileSystem (a volumeClaim or a path)")
    if unknown:
        raise LogicalError(tuple(f"{CHECKPOINT_STORE}.{key}" for key in unknown),
                           "unknown checkpoint store: fileSystem is the one ykshm supports")
    _object(store, "fileSystem", CHECKPOINT_STORE)


def _check_resources(where: str, resources: Mapping[str, Any]) -> None:
    for part in ("requests", "limits"):
        for name, value in _object(resources, part, where).items():
            try:
                parse_milli(value) if name == "cpu" else parse_quantity(value)
            except (QuantityError, TypeError):
                raise LogicalError((f"{where}.{part}.{name}",), f"{value!r} is not a quantity") from None


def _divide(name: str, value: Any, count: int) -> str:
    """One resource quantity divided by the PE count, rounded up: CPU in milli-cores, the rest
    in bytes/units, so a PE never gets 0 of something the job asked for."""
    if name == "cpu":
        milli = -(-parse_milli(value) // count)
        return f"{milli}m"
    units = Decimal(parse_quantity(value)) / count
    return str(int(units.to_integral_value(rounding="ROUND_CEILING")))


def resources_for_pes(job_resources: Mapping[str, Any], pe_resources: Mapping[str, Any] | None,
                      pe_count: int) -> dict[str, dict[str, str]]:
    """The seed's table: the Job's resources divided by the PE count win; else the PE's; else
    the PE defaults (requests 100m CPU, 128Mi memory, no limits)."""
    if job_resources.get("requests") or job_resources.get("limits"):
        return {part: {n: _divide(n, v, max(pe_count, 1)) for n, v in (job_resources.get(part) or {}).items()}
                for part in ("requests", "limits") if job_resources.get(part)}
    if pe_resources and (pe_resources.get("requests") or pe_resources.get("limits")):
        return {part: {n: str(v) for n, v in (pe_resources.get(part) or {}).items()}
                for part in ("requests", "limits") if pe_resources.get(part)}
    return {"requests": dict(DEFAULT_PE_REQUESTS)}
