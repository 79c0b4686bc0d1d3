"""Streams applications written out in the compiler's own format: ADL XML and `.sab` bundles.

For tests, the benchmark and `ykshm run`'s demo: a pipeline of N operators (`Op0 -> Op1 -> ...`)
as the Streams compiler writes it (the schema of `../shared/fixtures/streams/*.adl`: an
`applicationSet` with one `splApplication`, host pools, a composite instance holding primitive
operator instances with ports and connections, `consistentRegion` annotations, parallel
regions), and a `.sab` the way the compiler packs one (a zip with `bundleInfo.xml` and
`tar/bundle.tar` holding the ADL). Nothing here is used by the controller itself.
"""

from __future__ import annotations

import dataclasses
import io
import tarfile
import zipfile
from xml.sax.saxutils import quoteattr

NS = "http://www.ibm.com/xmlns/prod/streams/application/v4200"


@dataclasses.dataclass(frozen=True)
class Region:
    """A consistent region over operators [first, last] of the pipeline."""

    first: int
    last: int
    trigger: str = "periodic"
    period: float = 1.0
    drain_timeout: float = 180.0
    reset_timeout: float = 180.0
    max_attempts: int = 5


def _connection(index: int, name: str, kind: str) -> str:
    return (f'<connection operIndex="{index}" operName={quoteattr(name)} portIndex="0" '
            f'portKind="{kind}"/>')


def _operator(i: int, n: int, *, restartable: bool, coloc: str | None, region: Region | None,
              region_index: int, pool: int) -> str:
    name = f"Op{i}"
    parts = [f'<primitiveOperInstance definitionIndex="{0 if i == 0 else 1}" index="{i}" '
             f'name="{name}" optimized="true" relocatable="true" restartable="{str(restartable).lower()}" '
             f'singleThreadedOnOutputs="true" sourceIndex="0" startLine="{i + 1}" endLine="{i + 1}">']
    if region is not None and region.first <= i <= region.last:
        if i == region.first:
            parts.append('<splAnnotation tag="consistent"><value key="trigger" '
                         f'type="enum{{periodic,operatorDriven}}">{region.trigger}</value>'
                         + (f'<value key="period" type="float64">{region.period}</value>'
                            if region.trigger == "periodic" else "") + '</splAnnotation>')
        entry = [f'<value key="index" type="int32">{region_index}</value>']
        if i == region.first:
            entry += ['<value key="isStartOfRegion" type="boolean">true</value>',
                      '<value key="isTriggerOperator" type="boolean">true</value>']
        if i == region.last:
            entry.append('<value key="isEndOfRegion" type="boolean">true</value>')
        parts.append('<splAnnotation internal="true" tag="consistentRegionEntry">' + "".join(entry)
                     + "</splAnnotation>")
    if i > 0:
        parts.append(f'<inputPorts><port encoding="LE" index="0" isMutable="false" name="Op{i - 1}" '
                     f'transport="TCP" tupleTypeIndex="0"><connections>'
                     f'{_connection(i - 1, f"Op{i - 1}", "output")}</connections></port></inputPorts>')
    if i < n - 1:
        parts.append(f'<outputPorts><port encoding="LE" index="0" isMutable="false" name="{name}" '
                     f'streamName="{name}" transport="TCP" tupleTypeIndex="0" viewable="true">'
                     f'<connections>{_connection(i + 1, f"Op{i + 1}", "input")}</connections>'
                     f'</port></outputPorts>')
    parts.append(f'<resources><poolLocation poolIndex="{pool}"/></resources>')
    parts.append(f'<sharedObject class="{name}"><wrapper>none</wrapper><uri>bin/{name}.so</uri>'
                 f'</sharedObject>')
    if coloc:
        parts.append(f'<partitions><coLocation colocId={quoteattr(coloc)}/></partitions>')
    parts.append('<tracing level="error"/></primitiveOperInstance>')
    return "".join(parts)


def pipeline_adl(name: str = "apps.gen::Pipeline", operators: int = 4, *,
                 regions: tuple[Region, ...] = (), restartable: bool = True,
                 coloc_every: int = 0, pool_tags: tuple[str, ...] = (),
                 parallel: tuple[int, int] | None = None) -> bytes:
    """An ADL of a pipeline of `operators` operators. `coloc_every=k` puts each run of k
    operators in one partition colocation group; `pool_tags` makes host pool 0 a tagged pool;
    `parallel=(i, width)` makes operator i a parallel region `Op{i}` of that width."""
    ops = []
    for i in range(operators):
        region = next((r for r in regions if r.first <= i <= r.last), None)
        coloc = f"g{i // coloc_every}" if coloc_every else None
        ops.append(_operator(i, operators, restartable=restartable, coloc=coloc, region=region,
                             region_index=regions.index(region) if region else 0, pool=0))
    tags = "".join(f'<tag name={quoteattr(t)}/>' for t in pool_tags)
    pool = (f'<hostpool index="0" membershipMode="shared" name="{"tagged" if tags else "$default"}">'
            f'{tags}</hostpool>')
    region_notes = "".join(
        f'<splAnnotation internal="true" tag="consistentRegion"><value key="index" type="int64">{k}</value>'
        f'<value key="trigger" type="enum{{periodic,operatorDriven}}">{r.trigger}</value>'
        + (f'<value key="period" type="float64">{r.period}</value>' if r.trigger == "periodic" else "")
        + f'<value key="drainTimeout" type="float64">{r.drain_timeout}</value>'
        f'<value key="resetTimeout" type="float64">{r.reset_timeout}</value>'
        f'<value key="maxConsecutiveResetAttempts" type="int32">{r.max_attempts}</value></splAnnotation>'
        for k, r in enumerate(regions))
    parallel_xml = ""
    if parallel is not None:
        at, width = parallel
        parallel_xml = (f'<parallelRegions><parallelRegion index="0" name="Op{at}">'
                        f'<parallelOperator operIndex="{at}"><splitter iportIndex="0" kind="RoundRobin"/>'
                        f'</parallelOperator><parallelWidth><constantWidth>{width}</constantWidth>'
                        f'</parallelWidth></parallelRegion></parallelRegions>')
    short = name.replace("::", ".")
    doc = f"""<?xml version="1.0" encoding="UTF-8" standalone="no" ?>
<applicationSet xmlns="{NS}" name="{name}.appset" xmlns:tt="http://www.ibm.com/xmlns/prod/streams/spl/tupleType" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
  <description>{name} application set</description>
  <splApplication adlPath="{short}.adl" applicationDirectory="toolkits/gen" applicationScope="Default" avoidRuntimeYield="auto" buildId="" bundle="./{short}.sab" checkpointDirectory="/data/ckpt" dataDirectory="/data" name="{name}" outputDirectory="out" productVersion="4.3.0.1" standaloneApplicationDirectory="toolkits/gen" version="1.0.0">
    <libraries/>
    <hostpools>{pool}</hostpools>
    <tupleTypes><tupleType index="0"><attribute name="x" type="int32"/><tuple><tt:attr name="x" type="int32"/></tuple></tupleType></tupleTypes>
    <primitiveOperDefinitions>
      <primitiveOperDefinition index="0" kind="spl.utility::Beacon" runtimeType="SPL_CPlusPlus" toolkitIndex="1"/>
      <primitiveOperDefinition index="1" kind="spl.relational::Functor" runtimeType="SPL_CPlusPlus" toolkitIndex="1"/>
    </primitiveOperDefinitions>
    <composites>
      <sourceUris><uri index="0" path="file:///gen/Pipeline.spl"/></sourceUris>
      <compositeOperDefinitions>
        <compositeOperDefinition endLine="1" index="0" kind="{name}" numberOfInputPorts="0" numberOfOutputPorts="0" sourceIndex="0" startLine="1" toolkitIndex="0"/>
      </compositeOperDefinitions>
      <compositeOperInstances>
        <compositeOperInstance definitionIndex="0" endLine="1" index="{operators}" name="{name}" sourceIndex="0" startLine="1">
{"".join(ops)}{region_notes}
        </compositeOperInstance>
      </compositeOperInstances>
    </composites>
    <toolkits>
      <toolkit index="0" name="gen" uri="file:///gen" version="1.0.0"/>
      <toolkit index="1" name="spl" uri="file:///spl" version="1.4.0"/>
    </toolkits>
    {parallel_xml}
  </splApplication>
</applicationSet>
"""
    return doc.encode()


def make_sab(adl: bytes, name: str = "apps.gen.Pipeline") -> bytes:
    """A `.sab` as the compiler packs it: bundleInfo.xml + tar/bundle.tar holding the ADL."""
    tar_buf = io.BytesIO()
    with tarfile.open(fileobj=tar_buf, mode="w") as tar:
        for path, data in ((f"out/{name}.adl", adl), ("out/bin/sab", b"")):
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    info_xml = (f'<bundleInfoModel adlFile="{name}.adl" applicationDirectory="gen" buildDate="0" '
                f'buildId="gen" bundleVersion="4300" executionMode="distributed" outputDirectory="out" '
                f'xmlns="http://www.ibm.com/xmlns/prod/streams/spl/bundleInfoModel"/>').encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
        zf.writestr("bundleInfo.xml", info_xml)
        zf.writestr("tar/bundle.tar", tar_buf.getvalue())
    return out.getvalue()
