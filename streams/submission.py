"""Job submission, the seed's "backend": bundle -> ADL -> logical model -> PEs -> AADLs -> objects.

`prepare` does the pure part (parse, fuse, write the AADLs) and is what a width change re-runs;
`submit` fetches the bundle and creates the job's objects, each idempotently (deterministic names,
409 = already made), so a controller killed half-way and restarted simply submits again.

The PE count when `fusion.automatic` (the default) is the seed's heuristic: see
`fusion.pe_count`; the schedulable node count it is bounded by is read from the API at
submission.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import trio

from common.quantity import parse_milli

from . import aadl as aadl_mod
from . import bundle as bundle_mod
from . import adl as adl_mod
from . import fusion, kubecalls as kube, objects, peobjects, transportcert
from .errors import StreamsError
from .jobspec import JobSpec


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A job fused: the model, its PEs, and per PE (document, AADL, content id)."""

    app: Any
    pes: tuple[Any, ...]
    docs: tuple[dict[str, Any], ...]
    aadls: tuple[bytes, ...]
    content_ids: tuple[str, ...]
    nodes: int                      # the schedulable node count automatic fusion was bounded by


def pe_peers(pes: Sequence[Any]) -> dict[int, set[int]]:
    """PE index -> the other PEs its operators exchange tuples with (for connectivity)."""
    where = aadl_mod.pe_of(pes)
    peers: dict[int, set[int]] = {pe.index: set() for pe in pes}
    for pe in pes:
        for op in pe.members:
            for port in op.outputs:
                for ref in port.connections:
                    other = where.get(ref.operator)
                    if other is not None and other != pe.index:
                        peers[pe.index].add(other)
                        peers[other].add(pe.index)
    return peers


def _pod_cpu_limit(spec: JobSpec) -> int | None:
    limit = (spec.resources.get("limits") or {}).get("cpu") or \
        ((spec.pe_options.get("resources") or {}).get("limits") or {}).get("cpu")
    return parse_milli(limit) if limit else None


def _prepared(app: Any, spec: JobSpec, pes: tuple[Any, ...], nodes: int) -> Prepared:
    peers = pe_peers(pes)
    docs = tuple(objects.pe_document(pe, peers[pe.index]) for pe in pes)
    ins, _outs = aadl_mod.pe_ports(pes, aadl_mod.pe_of(pes))
    for doc, count in zip(docs, map(peobjects.input_port_counts(ins, pes).get, (pe.index for pe in pes))):
        doc["inputPorts"] = count          # the PE Service's data ports (peobjects.pe_service)
    for doc, pe in zip(docs, pes):
        if triggers := objects.pe_triggers(app, pe):
            doc["triggers"] = triggers     # pe.json: the regions this PE's drains start (pepod)
    fspec = fusion.FusionSpec.from_job(spec.fusion, spec.threading_model)
    texts = aadl_mod.aadls(app, pes, context=aadl_mod.AadlContext(
        job=spec.name, job_id=spec.job_id, submission_values=dict(spec.submission_values or {}),
        threading=aadl_mod.threading_annotation(fspec.threading, fspec.thread_count, fspec.elastic)))
    aadls = tuple(texts[pe.index] for pe in pes)
    return Prepared(app, pes, docs, aadls, tuple(aadl_mod.content_id(a) for a in aadls), nodes)


def prepare(app: Any, spec: JobSpec, *, nodes: int) -> Prepared:
    """Fuse the application and write one AADL per PE (pure, deterministic)."""
    fspec = fusion.FusionSpec.from_job(spec.fusion, spec.threading_model)
    count = fusion.pe_count(app, fspec, nodes=nodes, pod_cpu_limit_millis=_pod_cpu_limit(spec))
    return _prepared(app, spec, fusion.fuse(app, count, fspec), nodes)


def prepare_widths(app: Any, spec: JobSpec, current: Sequence[Mapping[str, Any]], *, nodes: int,
                   widths: Mapping[str, int]) -> Prepared:
    """Re-fuse for new parallel-region widths, keeping every PE that can stay as it was
    (`fusion.refuse`), so only the PEs a width change touches get a new content id."""
    fspec = fusion.FusionSpec.from_job(spec.fusion, spec.threading_model)
    kept = tuple(_Fused(int(d["index"]), tuple(d["operators"])) for d in current)
    return _prepared(app, spec, fusion.refuse(app, kept, fspec, widths=dict(widths)), nodes)


@dataclasses.dataclass(frozen=True)
class _Fused:
    """What `fusion.refuse` reads of a PE fused before: its index and operators."""

    index: int
    operators: tuple[str, ...]


def desired_objects(spec: JobSpec, job_obj: Mapping[str, Any], prepared: Prepared,
                    transport: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Everything a submission creates, in creation order (PEs last but the region objects);
    `transport` is the job ConfigMap's certificate and key (`transport_pair`)."""
    app = prepared.app
    out: list[dict[str, Any]] = [objects.adl_configmap(spec, job_obj, app.adl)]
    owner = objects.owner_ref(job_obj)
    out.append(peobjects.job_configmap(spec.namespace, spec.name,
                                       aadl_mod.port_labels(app, prepared.pes, job_id=spec.job_id), owner, transport))
    out.append(peobjects.token_secret(spec.namespace, spec.name, peobjects.new_token(), owner))
    out += [objects.host_pool_object(spec, job_obj, pool) for pool in app.host_pools]
    out += [objects.parallel_region_object(spec, job_obj, region, spec.fusion.get("type"))
            for region in app.parallel_regions]
    for doc, aadl, cid in zip(prepared.docs, prepared.aadls, prepared.content_ids):
        out.append(objects.aadl_configmap(spec, job_obj, doc, aadl, cid))
    for doc, cid in zip(prepared.docs, prepared.content_ids):
        out.append(objects.pe_object(spec, job_obj, doc, cid))
    if app.consistent_regions:
        for region in app.consistent_regions:
            members = [d["index"] for d in prepared.docs if region.index in d["consistentRegions"]]
            out.append(objects.consistent_region_object(spec, job_obj, region, members))
        out.append(objects.region_operator_object(spec, job_obj, len(app.consistent_regions)))
    return out


async def transport_pair(spec: JobSpec, have: Mapping[str, str] | None = None) -> dict[str, str]:
    """The job ConfigMap's transport entries (`transportcert.for_job`), a new RSA key made in a
    worker thread (~0.2 s of CPU the event loop must not wait for)."""
    return await trio.to_thread.run_sync(transportcert.for_job, spec.pe_options, spec.transport_cert_days, have)


async def write_job_configmap(client: httpx.AsyncClient, spec: JobSpec, job: Mapping[str, Any],
                              prepared: Prepared) -> None:
    """The job ConfigMap `JOB` as a new fusion or an edit has it (port labels with the job's id;
    a PE added or renumbered moves labels), its transport pair kept (or made, or dropped)."""
    have = await kube.get(client, "ConfigMap", spec.namespace, spec.name)
    transport = await transport_pair(spec, (have or {}).get("data"))
    want = peobjects.job_configmap(spec.namespace, spec.name,
                                   aadl_mod.port_labels(prepared.app, prepared.pes, job_id=spec.job_id),
                                   objects.owner_ref(job), transport)
    if have is None:
        await kube.create(client, want)
    elif have.get("data") != want["data"]:
        kube.written(await kube.replace(client, {**have, "data": want["data"]}))


def _parse(data: bytes, values: Mapping[str, str]) -> Any:
    app = adl_mod.parse_adl(bundle_mod.read_bundle(data).adl, submission_values=values)
    app.derived[UNUSED_VALUES] = adl_mod.unused_values(app.derived["adl_root"], values)
    return app


UNUSED_VALUES = "unused_submission_values"     # app.derived: names no submission-time value answers to


def unused_note(app: Any) -> str:
    """What the Submitted condition adds about `spec.submissionTimeValues` names the application
    does not declare ("" when there are none)."""
    unused = app.derived.get(UNUSED_VALUES) or []
    return f"; submissionTimeValues not declared by the application, ignored: {', '.join(unused)}" if unused else ""


def unused_message(app: Any) -> str | None:
    """The `UnusedSubmissionTimeValues` Warning event's message, or None."""
    unused = app.derived.get(UNUSED_VALUES) or []
    return (f"spec.submissionTimeValues names no submission-time value of the application declares, "
            f"ignored: {', '.join(unused)}") if unused else None


async def load(client: httpx.AsyncClient, spec: JobSpec, *, bundle_dir: str, cache_dir: str,
               policy: Any = None, repository: Any = None, others: Any = None) -> Any:
    """Fetch the bundle (where `policy` allows; through the `repository` when there is one:
    `repository.through`) and parse its ADL in a worker thread, so the event loop keeps serving
    other jobs and a submission timeout stops the wait (the thread itself is bounded by
    `bundle.Limits`). BundleError / AdlError / FetchError on bad input."""
    from . import fetch, repository as repository_mod

    read_configmap, read_secret = fetch.object_readers(
        lambda kind, ns, name: kube.get(client, kind, ns, name))
    data = await repository_mod.through(repository, spec.bundle, functools.partial(
        fetch.fetch_bundle, spec.bundle, namespace=spec.namespace, bundle_dir=bundle_dir, cache_dir=cache_dir,
        read_configmap=read_configmap, read_secret=read_secret, policy=policy), others or (lambda _name: []))
    return await trio.to_thread.run_sync(_parse, data, spec.submission_values, abandon_on_cancel=True)


async def submit(client: httpx.AsyncClient, job_obj: Mapping[str, Any], spec: JobSpec, *,
                 bundle_dir: str, cache_dir: str, policy: Any = None,
                 slots: trio.CapacityLimiter | None = None, repository: Any = None,
                 others: Any = None) -> Prepared:
    """Fetch, fuse and create every object of the job (idempotent). `slots` bounds how many
    submissions fetch and parse at once; `repository` and `others` as `load`'s."""
    async with slots if slots is not None else contextlib.nullcontext():
        app = await load(client, spec, bundle_dir=bundle_dir, cache_dir=cache_dir, policy=policy,
                         repository=repository, others=others)
    nodes = await kube.schedulable_nodes(client)
    prepared = prepare(app, spec, nodes=max(nodes, 1))
    transport = await transport_pair(spec)
    for stage in _stages(desired_objects(spec, job_obj, prepared, transport)):
        # each stage's objects are independent of one another: created concurrently (bounded)
        await kube.concurrently([functools.partial(_create, client, obj) for obj in stage])
    return prepared


# the kinds that wait for every object before them (a PE needs its AADL ConfigMap, the host pools and
# regions; a region's CRs need their PEs; the operator its CRs), each created as one stage
_STAGED_KINDS = ("ProcessingElement", "ConsistentRegion", "ConsistentRegionOperator")


def _stages(objs: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """`objs` in creation order cut into runs of one stage (see `_STAGED_KINDS`)."""
    stages: list[list[Mapping[str, Any]]] = []
    last: object = None
    for obj in objs:
        stage = obj["kind"] if obj["kind"] in _STAGED_KINDS else None
        if not stages or stage != last:
            stages.append([])
            last = stage
        stages[-1].append(obj)
    return stages


async def _create(client: httpx.AsyncClient, obj: Mapping[str, Any]) -> None:
    made = await kube.create(client, obj)
    if made is not None and obj["kind"] == "ParallelRegion":
        # the width it was fused at: no re-fusion is due until `/scale` changes spec.width
        await kube.put_status(client, made, {"width": obj["spec"]["width"]})


# What a bad bundle, ADL or spec raises: the job fails with it, the controller carries on.
SUBMISSION_ERRORS = (StreamsError,)
