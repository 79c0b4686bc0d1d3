"""One AADL (augmented ADL) document per PE, in the Streams runtime's schema, and its content id.

The document is what a PE's runtime reads from `/etc/config/pe/aadl.xml`: root `augmentedPE` in
`http://www.ibm.com/xmlns/prod/streams/application/augmented`, valid against the runtime's
`augmentedApplicationModel.xsd` (tests validate every PE of the real fixture bundles). It carries
the job and application, the PE's flags and directories (where OpenStreams' bootstrap unpacks the
bundle: `/tmp/assets/OUTPUT_DIR`), the ADL's context (libraries, host pools, tuple types), each
operator instance with its shared object, resources, checkpointing and runtime constants
(submission-time values filled in) and threading model (the ADL's `@threading`, else the Job's
`threadingModel`: a `threading` annotation, see `_threading`), the PE's input and output ports
with their static connections to other PEs, the operator definitions, tracing and the toolkits map
(`aadlparts` renders what comes from the ADL once per application).

Ids a runtime sees:
- a physical operator's `index` is its ADL index outside parallel regions; a channel copy's is
  `ADL index + N * (1 + k)`, N one past the largest ADL operator index, k the Cantor pairing of its
  channel numbers: unique in the job and independent of the regions' widths;
- a PE port's `id` and `index` are its position among the PE's ports (per direction): the PE's
  Service publishes input port `i` as port `10000 + i` (`<job>-<peId>` names the PE), so ids only
  need to be unique inside a PE.

Nothing else goes in — no timestamps, no launch count (the runtime takes `STREAMS_PE_LAUNCH_COUNT`
from its environment; the document says 0), no width of a region — so the bytes (and the content id)
change only when what this PE runs or whom it talks to changes; the controller replaces exactly the
PEs whose content id changed. Consistent-region membership is not part of the runtime's schema: the
PE ConfigMap's `pe.json` carries it (`objects.pe_document`).

The bytes are deterministic: elements and attributes in a fixed order, UTF-8, escaped by hand
(string building is several times faster than ElementTree for 10,000 operators).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterable, Mapping

from common.gcpause import paused_gc

from . import aadlparts
from .aadlparts import OperParts, PortParts
from .model import Application, Operator, Pe

NAMESPACE = "http://www.ibm.com/xmlns/prod/streams/application/augmented"
PHYS = "http://www.ibm.com/xmlns/prod/streams/application/physical"
ROOT = "augmentedPE"
ASSETS = "/tmp/assets"            # where the runtime image's bootstrap unpacks the bundle
EXECUTABLE = "/usr/local/streams/system/impl/bin/streams-k8s-pe"
_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "\n": "&#10;",
                          "\r": "&#13;", "\t": "&#9;"})
_SPECIAL = re.compile('[&<>"\n\r\t]').search
_NO_PORT = PortParts()


def _q(value: object) -> str:
    text = value if isinstance(value, str) else str(value)
    return '"' + (text.translate(_ESCAPES) if _SPECIAL(text) else text) + '"'


def _b(flag: bool) -> str:
    return '"true"' if flag else '"false"'


@dataclasses.dataclass(frozen=True)
class AadlContext:
    """What a job adds to its PEs' AADLs: names, ids, directories, submission-time values."""

    job: str = ""
    job_id: int = 0
    user: str = "streams"
    submission_values: Mapping[str, str] = dataclasses.field(default_factory=dict)
    data_directory: str = "/data"
    checkpoint_directory: str = "/checkpoint"
    threading: tuple[tuple[str, str], ...] = ()   # the Job's threadingModel (`threading_annotation`)


XSI = "http://www.w3.org/2001/XMLSchema-instance"


def threading_annotation(model: str | None, threads: int | None = None,
                         elastic: bool | None = None) -> tuple[tuple[str, str], ...]:
    """The Job's `threadingModel` as OpenStreams' SAM turns it into an operator's `threading`
    annotation (`ThreadingModel.create`): `model`, and `threads` / `elastic` when given."""
    if model is None:
        return ()
    out = [("model", model)]
    if threads is not None:
        out.append(("threads", str(threads)))
    if elastic is not None:
        out.append(("elastic", "true" if elastic else "false"))
    return tuple(out)


def content_id(aadl: bytes) -> str:
    """A short, stable hash of an AADL (16 hex digits; usable as a label value)."""
    return hashlib.blake2b(aadl, digest_size=8).hexdigest()


def pe_of(pes: Iterable[Pe]) -> dict[str, int]:
    """Physical operator name -> the index of the PE that runs it."""
    return {name: pe.index for pe in pes for name in pe.operators}


def physical_index(op: Operator, base: int) -> int:
    """A physical operator's AADL index (see the module docstring)."""
    if not op.channels:
        return op.index
    k = 0
    for _region, channel in op.channels:
        k = (k + channel) * (k + channel + 1) // 2 + channel
    return op.index + base * (1 + k)


@dataclasses.dataclass
class _Job:
    """The job-wide tables one batch of AADLs shares."""

    app: Application
    parts: aadlparts.AppParts
    context: AadlContext
    where: dict[str, int]
    ops: dict[str, Operator]
    base: int
    in_ports: dict[tuple[str, int], int]      # (operator, port) -> its PE input port index
    out_ports: dict[tuple[str, int], int]
    heads: dict[str, tuple[str, OperParts, str]]


def pe_ports(pes: Iterable[Pe], where: dict[str, int]) -> tuple[dict, dict]:
    """Number each PE's ports: one per operator port with a connection to another PE.
    ((operator, port) -> PE input port index, the same for output ports.)"""
    ins: dict[tuple[str, int], int] = {}
    outs: dict[tuple[str, int], int] = {}
    for pe in pes:
        i = o = 0
        for op in pe.members:
            for port in op.inputs:
                if any(where.get(r.operator, pe.index) != pe.index for r in port.connections):
                    ins[(op.name, port.index)] = i
                    i += 1
            for port in op.outputs:
                if any(where.get(r.operator, pe.index) != pe.index for r in port.connections):
                    outs[(op.name, port.index)] = o
                    o += 1
    return ins, outs


def _job(app: Application, pes: tuple[Pe, ...], context: AadlContext,
         where: dict[str, int] | None = None) -> _Job:
    where = pe_of(pes) if where is None else where
    base = app.derived.get("aadl_base")
    if base is None:
        base = app.derived["aadl_base"] = max((op.index for op in app.operators), default=0) + 1
    ins, outs = pe_ports(pes, where)
    return _Job(app, aadlparts.parts(app), context, where,
                {op.name: op for pe in pes for op in pe.members}, base, ins, outs, {})


def port_labels(app: Application, pes: tuple[Pe, ...], *, job_id: int = 0) -> dict[str, str]:
    """The job's `operator_port_labels.properties`: `JOBID.OPERINDEX.PORTINDEX` ->
    `PEID.IPORTID@JOBID` for every operator input port that is a PE input port (OpenStreams'
    `Pipeline`; the runtime's name service reads it from /etc/config/job)."""
    tables = _job(app, pes, AadlContext())
    out = {}
    for (name, port), iport in tables.in_ports.items():
        op = tables.ops[name]
        out[f"{job_id}.{physical_index(op, tables.base)}.{port}"] = f"{tables.where[name]}.{iport}@{job_id}"
    return out


def aadl_for(app: Application, pe: Pe, pes: tuple[Pe, ...], *, job: str = "",
             where: dict[str, int] | None = None, context: AadlContext | None = None) -> bytes:
    """The AADL of `pe` (use `aadls` for many: it shares the job-wide tables)."""
    context = context or AadlContext(job=job)
    return _render(_job(app, pes, context, where), pe)


@paused_gc()
def aadls(app: Application, pes: tuple[Pe, ...], *, job: str = "",
          previous: tuple[tuple[Pe, ...], Mapping[int, bytes]] | None = None,
          context: AadlContext | None = None) -> dict[int, bytes]:
    """The AADL of every PE, by PE index.

    `previous` = (the PEs before a re-fusion, their AADLs by index) lets a PE equal to its old self
    whose every peer operator is still in the same PE behind the same PE port keep its bytes
    without rebuilding them: the time-sensitive path after `fusion.refuse`."""
    tables = _job(app, pes, context or AadlContext(job=job))
    if not previous:
        return {pe.index: _render(tables, pe) for pe in pes}
    old_pes = {pe.index: pe for pe in previous[0]}
    old_where = pe_of(previous[0])
    old_in, old_out = pe_ports(previous[0], old_where)
    out = {}
    for pe in pes:
        old = old_pes.get(pe.index)
        if old is not None and pe.index in previous[1] and old == pe and \
                _peers_stay(pe, tables, old_where, old_in, old_out):
            out[pe.index] = previous[1][pe.index]
        else:
            out[pe.index] = _render(tables, pe)
    return out


def _peers_stay(pe: Pe, t: _Job, old_where: dict[str, int], old_in: dict, old_out: dict) -> bool:
    where = t.where
    for op in pe.members:
        for ports, now, before in ((op.inputs, t.out_ports, old_out), (op.outputs, t.in_ports, old_in)):
            for port in ports:
                for ref in port.connections:
                    peer = where.get(ref.operator)
                    if peer != old_where.get(ref.operator):
                        return False
                    key = (ref.operator, ref.port)
                    if peer != pe.index and now.get(key) != before.get(key):
                        return False
    return True


def _parts_of(tables: _Job, op: Operator) -> OperParts | None:
    return tables.parts.operators.get(op.logical_name or op.name)


def _render(t: _Job, pe: Pe) -> bytes:
    ctx, header = t.context, t.parts.header
    odir = header.get("outputDirectory", "")
    adir = header.get("applicationDirectory", "")
    out = ['<?xml version="1.0" encoding="UTF-8"?>\n',
           f'<{ROOT} xmlns={_q(NAMESPACE)} xmlns:b={_q(aadlparts.BASE)} xmlns:tt={_q(aadlparts.TT)} '
           f'xmlns:p={_q(PHYS)} id="{pe.index}" jobId="{ctx.job_id}" jobName={_q(ctx.job)} '
           f'user={_q(ctx.user)} applicationScope={_q(header.get("applicationScope") or "Default")} '
           f'class="pe{pe.index}" language="C++" optimized="true" restartable={_b(pe.restartable)} '
           f'relocatable={_b(pe.relocatable)} launchCount="0" dataDirectory={_q(ctx.data_directory)} '
           f'applicationDirectory={_q(f"{ASSETS}/{odir}/{adir}")} outputDirectory={_q(f"{ASSETS}/{odir}")} '
           f'checkpointDirectory={_q(ctx.checkpoint_directory)} display="" logicalIndex="{pe.index}" '
           f'buildId={_q(header.get("buildId", ""))} bundle={_q(header.get("bundle", ""))} '
           f'version={_q(header.get("version", "1.0.0"))} applicationName={_q(t.app.name)} '
           f'jobGroup="default" avoidRuntimeYield={_q(header.get("avoidRuntimeYield") or "auto")}>\n',
           t.parts.context, "\n"]
    env: dict[str, str] = {}
    for op in pe.members:
        parts = _parts_of(t, op)
        if parts is not None:
            for name, value in parts.env:
                env.setdefault(name, value)
    out.append("<envVars>" + "".join(f"<b:envVar name={_q(k)} value={_q(env[k])}/>" for k in sorted(env))
               + "</envVars>\n")
    out.append(f'<executable dynamicLoad="true" digest="none"><b:wrapper>none</b:wrapper>'
               f'<b:executableUri>{EXECUTABLE}</b:executableUri><b:arguments/><b:dependencies/>'
               f'</executable>\n<operInstances>\n')
    for op in pe.members:
        _operator(out, t, op, pe.index)
    out.append("</operInstances>\n")
    _pe_ports_xml(out, t, pe)
    _definitions(out, t, pe)
    levels = [p.tracing for p in map(lambda o: _parts_of(t, o), pe.members) if p and p.tracing]
    level = max(levels, key=aadlparts.TRACE_LEVELS.index) if levels else "error"
    out.append(f'<currentTracing><tracingUpdate level="{level}"/>'
               f'<tracingUpdateSequenceNum>0</tracingUpdateSequenceNum></currentTracing>\n')
    toolkits = t.parts.toolkits or '<p:toolkitMap index="0" name="default"/>'
    out.append(f"<toolkitsMap>{toolkits}</toolkitsMap>\n</{ROOT}>\n")
    return "".join(out).encode()


def _head(t: _Job, op: Operator) -> tuple[str, OperParts, str]:
    """The cached parts of an operator instance: its start tag and body before its ports, and its
    end: the same for every channel copy of one logical operator."""
    key = op.logical_name or op.name
    found = t.heads.get(key)
    if found is None:
        parts = _parts_of(t, op)
        if parts is None:
            parts = OperParts(_definition_index(t, op), op.kind, "true", "true", "<b:resources/>",
                              (), (), None, {}, {})
        constants = aadlparts.runtime_constants(t.parts, parts, t.context.submission_values)
        phys, tail = _threading(parts.threading or t.context.threading, key, op.index, parts.toolkit)
        found = t.heads[key] = (
            f'{phys} class={_q(parts.cls)} definitionIndex="{parts.definition}" '
            f'singleThreadedOnInputs="{parts.single_in}" singleThreadedOnOutputs="{parts.single_out}" '
            f'restartable={_b(op.restartable)} relocatable={_b(op.relocatable)}>{parts.middle}{constants}',
            parts, tail)
    return found


def _threading(model: tuple[tuple[str, str], ...], logical: str, index: int, toolkit: str) -> tuple[str, str]:
    """An operator's threading model, as OpenStreams' SAM gives it to the runtime: a `threading`
    annotation of the physical operator instance (`PrimitiveOperator.populateNode`; read by
    `OperatorContextImpl`), the ADL's own `@threading` nearest the operator, else the Job's
    `threadingModel`. The annotation is part of `physOperInstanceType`, so such an instance says
    that type (`xsi:type`, with its required logical name, index and toolkit index); an operator
    without a model is written as before (its bytes, and its PE's content id, unchanged)."""
    if not model:
        return "", "</b:operInstance>\n"
    attrs = "".join(f"<b:attr key={_q(k)} value={_q(v)}/>" for k, v in model)
    return (f' xmlns:xsi={_q(XSI)} xsi:type="p:physOperInstanceType" logicalName={_q(logical)} '
            f'logicalIndex="{index}" toolkitIndex={_q(toolkit)}',
            f'<p:annotation tag="threading"><b:tuple>{attrs}</b:tuple></p:annotation></b:operInstance>\n')


def _operator(out: list[str], t: _Job, op: Operator, pe_index: int) -> None:
    head, parts, tail = _head(t, op)
    out.append(f'<b:operInstance index="{physical_index(op, t.base)}" name={_q(op.name)}{head}')
    where, ops, base = t.where, t.ops, t.base
    out.append("<b:inputPorts>" if op.inputs else "<b:inputPorts/>")
    for port in op.inputs:
        pp = parts.inputs.get(port.index, _NO_PORT)
        out.append(f'<b:inputPort index="{port.index}" name={_q(port.name)} isMutable="{pp.mutable}" '
                   f'tupleTypeIndex="{pp.tuple_type}"' + (' isControl="true">' if port.is_control else ">"))
        intra = []
        pe_port = t.in_ports.get((op.name, port.index))
        for ref in port.connections:
            peer = ops.get(ref.operator)
            idx = physical_index(peer, base) if peer is not None else 0
            if where.get(ref.operator, pe_index) != pe_index:
                out.append(f'<b:interPeConnection operInstanceIndex="{idx}" oportIndex="{ref.port}" '
                           f'pePortIndex="{pe_port}"/>')
            else:
                intra.append(f'<b:intraPeConnection operInstanceIndex="{idx}" oportIndex="{ref.port}"/>')
        out += intra
        if port.threaded:
            queue = f' queueSize="{port.queue_size}"' if port.queue_size is not None else ""
            out.append(f'<b:threadedPort congestionPolicy={_q(port.congestion_policy or "wait")}{queue} '
                       f'singleThreadedOnInput="true" isInjected="false"/>')
        out.append("</b:inputPort>")
    if op.inputs:
        out.append("</b:inputPorts>")
    if not op.outputs:
        out.append("<b:outputPorts/>" + tail)
        return
    out.append("<b:outputPorts>")
    for port in op.outputs:
        pp = parts.outputs.get(port.index, _NO_PORT)
        viewable = f' viewable="{pp.viewable}"' if pp.viewable else ""
        out.append(f'<b:outputPort index="{port.index}" name={_q(port.name)} isMutable="{pp.mutable}" '
                   f'tupleTypeIndex="{pp.tuple_type}" streamName={_q(port.stream_name or port.name)}{viewable}>')
        intra = []
        pe_port = t.out_ports.get((op.name, port.index))
        for ref in port.connections:
            peer = ops.get(ref.operator)
            idx = physical_index(peer, base) if peer is not None else 0
            if where.get(ref.operator, pe_index) != pe_index:
                out.append(f'<b:interPeConnection operInstanceIndex="{idx}" iportIndex="{ref.port}" '
                           f'pePortIndex="{pe_port}"/>')
            else:
                intra.append(f'<b:intraPeConnection operInstanceIndex="{idx}" iportIndex="{ref.port}"/>')
        out += intra
        out.append("</b:outputPort>")
    out.append("</b:outputPorts>" + tail)


def _definition_index(t: _Job, op: Operator) -> int:
    for index, text in t.parts.definitions.items():
        if f"kind={_q(op.kind)}" in text:
            return index
    return 0


def _tuple_type(t: _Job, index: int) -> str:
    inner = t.parts.tuple_types.get(index) or '<b:attribute name="tuple" type="blob"/>'
    return f'<tupleType index="{index}">{inner}</tupleType>'


def _pe_ports_xml(out: list[str], t: _Job, pe: Pe) -> None:
    """The PE's `inputPorts` / `outputPorts`: its operators' ports that reach other PEs."""
    ins, outs = [], []
    for op in pe.members:
        parts = _parts_of(t, op)
        phys = physical_index(op, t.base)
        for port in op.inputs:
            index = t.in_ports.get((op.name, port.index))
            if index is None:
                continue
            pp = (parts.inputs if parts else {}).get(port.index, _NO_PORT)
            conns = "".join(
                f'<staticConnection peId="{t.where[r.operator]}" oportId="{t.out_ports.get((r.operator, r.port), 0)}" '
                f'oportIndex="{t.out_ports.get((r.operator, r.port), 0)}"/>'
                for r in port.connections if t.where.get(r.operator, pe.index) != pe.index)
            ins.append(f'<inputPort id="{index}" index="{index}" peId="{pe.index}" encoding="{pp.encoding}" '
                       f'transport="{pp.transport}">{_tuple_type(t, pp.tuple_type)}<staticConnections>{conns}'
                       f'</staticConnections><operInstanceConnection operInstanceIndex="{phys}" '
                       f'iportIndex="{port.index}"/></inputPort>\n')
        for port in op.outputs:
            index = t.out_ports.get((op.name, port.index))
            if index is None:
                continue
            pp = (parts.outputs if parts else {}).get(port.index, _NO_PORT)
            conns = []
            for r in port.connections:
                if t.where.get(r.operator, pe.index) == pe.index:
                    continue
                iport = t.in_ports.get((r.operator, r.port), 0)
                peer = t.ops.get(r.operator)
                conns.append(f'<staticConnection peId="{t.where[r.operator]}" iportId="{iport}" '
                             f'iportIndex="{iport}" iOperInstanceIndex="{physical_index(peer, t.base) if peer else 0}" '
                             f'iOperInstancePortIndex="{r.port}"/>')
            outs.append(f'<outputPort id="{index}" index="{index}" peId="{pe.index}" encoding="{pp.encoding}" '
                        f'transport="{pp.transport}" singleThreadedOnOutput="true">{_tuple_type(t, pp.tuple_type)}'
                        f'<staticConnections>{"".join(conns)}</staticConnections><operInstanceConnection '
                        f'operInstanceIndex="{phys}" oportIndex="{port.index}"/></outputPort>\n')
    out.append("<inputPorts>\n" + "".join(ins) + "</inputPorts>\n" if ins else "<inputPorts/>\n")
    out.append("<outputPorts>\n" + "".join(outs) + "</outputPorts>\n" if outs else "<outputPorts/>\n")


def _definitions(out: list[str], t: _Job, pe: Pe) -> None:
    found: dict[int, str] = {}
    for op in pe.members:
        parts = _parts_of(t, op)
        index = parts.definition if parts else _definition_index(t, op)
        found.setdefault(index, t.parts.definitions.get(index) or
                         f'<b:operDefinition kind={_q(op.kind)} index="{index}"/>')
    out.append("<operDefinitions>" + "".join(found[i] for i in sorted(found)) + "</operDefinitions>\n")
