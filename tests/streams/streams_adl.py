"""Small ADL documents in the Streams compiler's schema (v4200), written by the tests.

`Op` describes a primitive operator; `adl(...)` lays them out under one top-level composite (and
optional inner composites), with connections, host pools, parallel regions and submission-time
values, as the compiler writes them.
"""

from __future__ import annotations

import io
import tarfile
import zipfile
from dataclasses import dataclass, field
from xml.sax.saxutils import escape
from xml.sax.saxutils import quoteattr as q

NS = "http://www.ibm.com/xmlns/prod/streams/application/v4200"
KINDS = ("spl.utility::Beacon", "spl.relational::Functor", "spl.utility::Custom")


@dataclass
class Op:
    name: str
    inputs: int = 1
    outputs: int = 1
    threaded: tuple[int, ...] = ()
    coloc: tuple[str, ...] = ()
    exloc: tuple[str, ...] = ()
    isolation: bool = False
    host_coloc: tuple[str, ...] = ()
    host_exloc: tuple[str, ...] = ()
    host_isolation: bool = False
    pool: int | None = 0
    inpool: int | None = None
    host: str | None = None
    restartable: bool = True
    relocatable: bool = True
    annotations: str = ""
    kind: int = 1
    composite: str | None = None


@dataclass
class Region:
    name: str
    operator: str          # a primitive's or a composite's name
    width: int | None = 2  # None: from the submission-time value `stv`
    stv: int | None = None


@dataclass
class Pool:
    name: str
    tags: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    size: int | None = None
    exclusive: bool = False


@dataclass
class Stv:
    name: str
    default: str | None = None
    composite: str = "t::Main"


def _b(flag: bool) -> str:
    return "true" if flag else "false"


def _primitive(op: Op, index: int, index_of: dict[str, int], ins: dict, outs: dict) -> str:
    parts = [f'<primitiveOperInstance definitionIndex="{op.kind}" endLine="1" index="{index}" '
             f'name={q(op.name)} optimized="true" relocatable="{_b(op.relocatable)}" '
             f'restartable="{_b(op.restartable)}" singleThreadedOnOutputs="true" sourceIndex="0" startLine="1">',
             op.annotations]
    if op.inputs:
        parts.append("<inputPorts>")
        for p in range(op.inputs):
            conns = "".join(f'<connection operIndex="{index_of[s]}" operName={q(s)} portIndex="{sp}" '
                            'portKind="output"/>' for s, sp in ins.get((op.name, p), []))
            threaded = '<threadedPort congestionPolicy="wait" queueSize="100"/>' if p in op.threaded else ""
            parts.append(f'<port encoding="LE" index="{p}" isMutable="false" name="in{p}" transport="TCP" '
                         f'tupleTypeIndex="0">{"<connections>" + conns + "</connections>" if conns else ""}'
                         f'{threaded}</port>')
        parts.append("</inputPorts>")
    if op.outputs:
        parts.append("<outputPorts>")
        for p in range(op.outputs):
            conns = "".join(f'<connection operIndex="{index_of[d]}" operName={q(d)} portIndex="{dp}" '
                            'portKind="input"/>' for d, dp in outs.get((op.name, p), []))
            parts.append(f'<port encoding="LE" index="{p}" isMutable="false" name="out{p}" '
                         f'streamName={q(op.name + "_s" + str(p))} transport="TCP" tupleTypeIndex="0">'
                         f'{"<connections>" + conns + "</connections>" if conns else ""}</port>')
        parts.append("</outputPorts>")
    parts.append('<envVars/>')
    res = []
    if op.host is not None:
        res.append(f"<hostLocation hostname={q(op.host)}/>")
    if op.pool is not None:
        inpool = f' inpoolIndex="{op.inpool}"' if op.inpool is not None else ""
        res.append(f'<poolLocation poolIndex="{op.pool}"{inpool}/>')
    res += [f"<coLocation colocId={q(c)}/>" for c in op.host_coloc]
    res += [f"<exLocation exlocId={q(c)}/>" for c in op.host_exloc]
    iso = ' isolation="true"' if op.host_isolation else ""
    parts.append(f"<resources{iso}>{''.join(res)}</resources><runtimeConstants/>")
    parts.append(f'<sharedObject class={q(op.name)}><wrapper>none</wrapper><uri>bin/{escape(op.name)}.so</uri>'
                 "</sharedObject>")
    if op.coloc or op.exloc or op.isolation:
        iso = ' isolation="true"' if op.isolation else ""
        parts.append(f"<partitions{iso}>" + "".join(f"<coLocation colocId={q(c)}/>" for c in op.coloc)
                     + "".join(f"<exLocation exlocId={q(c)}/>" for c in op.exloc) + "</partitions>")
    parts.append('<tracing level="error"/></primitiveOperInstance>')
    return "".join(parts)


def adl(ops: list[Op], edges: list[tuple[str, int, str, int]] = (), *, name: str = "t::Main",
        pools: list[Pool] | None = None, regions: list[Region] = (), stvs: list[Stv] = (),
        composite_annotations: str = "") -> bytes:
    """An ADL: `edges` are (source, output port, target, input port) between primitives."""
    pools = [Pool("$default")] if pools is None else pools
    index_of = {op.name: i for i, op in enumerate(ops)}
    composites = sorted({op.composite for op in ops if op.composite})
    for k, comp in enumerate(composites):
        index_of[comp] = len(ops) + 1 + k
    ins: dict = {}
    outs: dict = {}
    for s, sp, d, dp in edges:
        outs.setdefault((s, sp), []).append((d, dp))
        ins.setdefault((d, dp), []).append((s, sp))
    top = [_primitive(op, i, index_of, ins, outs) for i, op in enumerate(ops) if not op.composite]
    for comp in composites:
        inner = "".join(_primitive(op, i, index_of, ins, outs) for i, op in enumerate(ops) if op.composite == comp)
        top.append(f'<compositeOperInstance definitionIndex="1" endLine="1" index="{index_of[comp]}" '
                   f'name={q(comp)} sourceIndex="0" startLine="1">{inner}</compositeOperInstance>')
    pool_xml = "".join(
        f'<hostpool index="{i}" membershipMode="{"exclusive" if p.exclusive else "shared"}" name={q(p.name)}'
        + (f' size="{p.size}"' if p.size is not None else "") + ">"
        + "".join(f"<host hostname={q(h)}/>" for h in p.hosts)
        + "".join(f"<tag name={q(t)}/>" for t in p.tags) + "</hostpool>" for i, p in enumerate(pools))
    region_xml = ""
    if regions:
        region_xml = "<parallelRegions>" + "".join(
            f'<parallelRegion index="{i}" name={q(r.name)}><parallelOperator operIndex="{index_of[r.operator]}">'
            '<splitter iportIndex="0" kind="RoundRobin"/></parallelOperator><parallelWidth>'
            + (f"<constantWidth>{r.width}</constantWidth>" if r.width is not None else
               f"<submissionTimeParameterIndexForWidth>{r.stv}</submissionTimeParameterIndexForWidth>")
            + "</parallelWidth></parallelRegion>" for i, r in enumerate(regions)) + "</parallelRegions>"
    stv_xml = ""
    if stvs:
        stv_xml = "<submissionTimeValues>" + "".join(
            f'<submissionTimeValue compositeName={q(s.composite)} index="{i}" kind="named" name={q(s.name)} '
            + (f'defaultValue={q(chr(34) + s.default + chr(34))} required="false"/>' if s.default is not None
               else 'required="true"/>') for i, s in enumerate(stvs)) + "</submissionTimeValues>"
    main_index = len(ops)
    return (
        f'<?xml version="1.0" encoding="UTF-8" standalone="no" ?>\n<applicationSet xmlns="{NS}" '
        f'name={q(name + ".appset")}><splApplication adlPath="x.adl" applicationDirectory="." '
        f'applicationScope="Default" avoidRuntimeYield="auto" buildId="" bundle="./x.sab" name={q(name)} '
        f'outputDirectory="out" productVersion="4.3.0.0"><libraries/><hostpools>{pool_xml}</hostpools>'
        '<tupleTypes><tupleType index="0"><attribute name="i" type="uint64"/></tupleType></tupleTypes>'
        "<primitiveOperDefinitions>" + "".join(
            f'<primitiveOperDefinition index="{i}" kind="{k}" runtimeType="SPL_CPlusPlus" toolkitIndex="0"/>'
            for i, k in enumerate(KINDS)) + "</primitiveOperDefinitions>"
        '<composites><sourceUris><uri index="0" path="file:///Main.spl"/></sourceUris><compositeOperDefinitions>'
        '<compositeOperDefinition endLine="1" index="0" kind="t::Main" numberOfInputPorts="0" '
        'numberOfOutputPorts="0" sourceIndex="0" startLine="1"/><compositeOperDefinition endLine="1" index="1" '
        'kind="t::Inner" numberOfInputPorts="0" numberOfOutputPorts="0" sourceIndex="0" startLine="1"/>'
        f'</compositeOperDefinitions><compositeOperInstances><compositeOperInstance definitionIndex="0" '
        f'endLine="1" index="{main_index}" name={q(name)} sourceIndex="0" startLine="1">{"".join(top)}'
        f"{composite_annotations}</compositeOperInstance></compositeOperInstances></composites>"
        '<toolkits><toolkit index="0" name="spl" version="1.4.0"/></toolkits>'
        f"{region_xml}{stv_xml}</splApplication></applicationSet>\n").encode()


def pipeline(n: int, **kw) -> bytes:
    """n operators in a line: a source, n-2 functors, a sink."""
    ops = [Op(f"op{i}", inputs=0 if i == 0 else 1, outputs=0 if i == n - 1 else 1, kind=0 if i == 0 else 1)
           for i in range(n)]
    return adl(ops, [(f"op{i}", 0, f"op{i + 1}", 0) for i in range(n - 1)], **kw)


def sab(adl_bytes: bytes, *, adl_file: str = "t.Main.adl", out_dir: str = "out",
        info_extra: str = "", members: dict[str, bytes] | None = None) -> bytes:
    """A .sab as the compiler makes it: bundleInfo.xml + tar/bundle.tar (the ADL, a symlink, a binary)."""
    tar_buf = io.BytesIO()
    with tarfile.open(fileobj=tar_buf, mode="w") as tar:
        link = tarfile.TarInfo(f"{out_dir}/etc/adl")
        link.type, link.linkname = tarfile.SYMTYPE, f"../{adl_file}"
        tar.addfile(link)
        for name, data in {f"{out_dir}/bin/Op.so": b"\x7fELF...", f"{out_dir}/{adl_file}": adl_bytes,
                           **(members or {})}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    info_xml = (f'<bundleInfoModel adlFile="{adl_file}" applicationDirectory="streams.spl.apps" '
                f'buildDate="1551675671" buildId="abc123" bundleVersion="4300" executionMode="distributed" '
                f'outputDirectory="{out_dir}" xmlns="http://www.ibm.com/xmlns/prod/streams/spl/bundleInfoModel"'
                f'{info_extra}><toolkit name="spl" compileRoot="/x" version="1.4.0"><file name="toolkit.xml"/>'
                "</toolkit></bundleInfoModel>")
    zbuf = io.BytesIO()
    with zipfile.ZipFile(zbuf, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
        z.writestr("bundleInfo.xml", info_xml)
        z.writestr("tar/bundle.tar", tar_buf.getvalue())
    return zbuf.getvalue()
