"""`ykshm bench streams` (fusion part): the Streams backend on a 10,000-operator ADL.

Targets (issue 13): parse + fuse + every AADL and content id for a 10,000-operator ADL <= 1 s;
re-fusion for a parallel-region width change (refuse + the AADLs and content ids of every PE)
<= 100 ms. The ADL is generated in the schema of the compiler's (nested composites, composite
ports, one parallel composite region), fused into 100 PEs with channelIsolation. Each figure is
the best of a few rounds (a shared machine's noise is not the code's cost); the process CPU time is
printed next to the wall time, the target is judged on the wall time.

    python -m bench.streams_fusion [--operators N] [--pes N] [--rounds N] [--json]
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence

from common.cliutil import Parser, UsageError, run_main

PROG = "ykshm bench streams-fusion"
NS = "http://www.ibm.com/xmlns/prod/streams/application/v4200"
REGION = "Main.Par"


def _primitive(index: int, name: str, definition: int, inputs: list[tuple[int, str, int, str]],
               outputs: list[tuple[int, str, int, str]]) -> str:
    def ports(tag: str, conns: list[tuple[int, str, int, str]]) -> str:
        if not conns:
            return ""
        body = "".join(f'<connection operIndex="{oi}" operName="{on}" portIndex="{pi}" portKind="{pk}"/>'
                       for oi, on, pi, pk in conns)
        extra = ' streamName="s"' if tag == "outputPorts" else ""
        return (f'<{tag}><port encoding="LE" index="0" isMutable="false" name="p"{extra} transport="TCP" '
                f'tupleTypeIndex="0"><connections>{body}</connections></port></{tag}>')

    return (f'<primitiveOperInstance definitionIndex="{definition}" endLine="1" index="{index}" name="{name}" '
            f'optimized="true" relocatable="true" restartable="true" singleThreadedOnOutputs="true" '
            f'sourceIndex="0" startLine="1">{ports("inputPorts", inputs)}{ports("outputPorts", outputs)}'
            '<envVars><envVar name="JAVA_HOME" value="/opt/java"/></envVars>'
            '<resources><poolLocation poolIndex="0"/></resources><runtimeConstants/>'
            f'<sharedObject class="{name}"><wrapper>none</wrapper><uri>bin/{name}.so</uri></sharedObject>'
            '<tracing level="error"/></primitiveOperInstance>')


def synthetic_adl(operators: int, *, pipeline: int = 10, region_ops: int = 10, width: int = 4) -> bytes:
    """An ADL of `operators` primitives: pipelines of `pipeline` operators, the first one running
    through a parallel composite `Main.Par` of `region_ops` operators (width `width`)."""
    region_first = 1  # indexes 1..region_ops are inside the parallel composite
    par_index = operators  # composite instance indexes come after the primitives
    main_index = operators + 1
    out: list[str] = []
    # pipeline 0: Main.src0 -> [Main.Par: Main.Par.r0 .. r{k-1}] -> Main.sink0
    src, sink = 0, region_ops + 1
    inner = []
    for k in range(region_ops):
        index = region_first + k
        ins = [(par_index, "Main.Par", 0, "input")] if k == 0 else [(index - 1, f"Main.Par.r{k - 1}", 0, "output")]
        outs = [(par_index, "Main.Par", 0, "output")] if k == region_ops - 1 else \
            [(index + 1, f"Main.Par.r{k + 1}", 0, "input")]
        inner.append(_primitive(index, f"Main.Par.r{k}", 1, ins, outs))
    out.append(_primitive(src, "Main.src0", 0, [], [(par_index, "Main.Par", 0, "input")]))
    out.append(
        f'<compositeOperInstance definitionIndex="1" endLine="1" index="{par_index}" name="Main.Par" '
        'sourceIndex="0" startLine="1">'
        f'<inputPorts><port index="0"><incomingConnections><connection operIndex="{src}" operName="Main.src0" '
        f'portIndex="0" portKind="output"/></incomingConnections><outgoingConnections><connection '
        f'operIndex="{region_first}" operName="Main.Par.r0" portIndex="0" portKind="input"/>'
        '</outgoingConnections></port></inputPorts>'
        f'<outputPorts><port index="0"><incomingConnections><connection operIndex="{region_ops}" '
        f'operName="Main.Par.r{region_ops - 1}" portIndex="0" portKind="output"/></incomingConnections>'
        f'<outgoingConnections><connection operIndex="{sink}" operName="Main.sink0" portIndex="0" '
        'portKind="input"/></outgoingConnections></port></outputPorts>'
        + "".join(inner) + "</compositeOperInstance>")
    out.append(_primitive(sink, "Main.sink0", 2, [(par_index, "Main.Par", 0, "output")], []))
    index = sink + 1
    while index < operators:
        length = min(pipeline, operators - index)
        for k in range(length):
            i = index + k
            ins = [(i - 1, f"Main.op{i - 1}", 0, "output")] if k else []
            outs = [(i + 1, f"Main.op{i + 1}", 0, "input")] if k < length - 1 else []
            out.append(_primitive(i, f"Main.op{i}", 0 if k == 0 else 1, ins, outs))
        index += length
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<applicationSet xmlns="{NS}" name="bench::Main.appset">'
        '<splApplication applicationDirectory="." applicationScope="Default" avoidRuntimeYield="auto" '
        'buildId="" bundle="./bench.sab" name="bench::Main" outputDirectory="bench" productVersion="4.3.0.0">'
        '<libraries/><hostpools><hostpool index="0" membershipMode="shared" name="$default"/></hostpools>'
        '<tupleTypes><tupleType index="0"><attribute name="i" type="uint64"/></tupleType></tupleTypes>'
        '<primitiveOperDefinitions>'
        '<primitiveOperDefinition index="0" kind="spl.utility::Beacon" runtimeType="SPL_CPlusPlus" toolkitIndex="0"/>'
        '<primitiveOperDefinition index="1" kind="spl.relational::Functor" runtimeType="SPL_CPlusPlus" '
        'toolkitIndex="0"/>'
        '<primitiveOperDefinition index="2" kind="spl.utility::Custom" runtimeType="SPL_CPlusPlus" toolkitIndex="0"/>'
        '</primitiveOperDefinitions><composites><sourceUris><uri index="0" path="file:///Main.spl"/></sourceUris>'
        '<compositeOperDefinitions>'
        '<compositeOperDefinition endLine="1" index="0" kind="bench::Main" numberOfInputPorts="0" '
        'numberOfOutputPorts="0" sourceIndex="0" startLine="1"/>'
        '<compositeOperDefinition endLine="1" index="1" kind="bench::Par" numberOfInputPorts="1" '
        'numberOfOutputPorts="1" sourceIndex="0" startLine="1"/></compositeOperDefinitions>'
        f'<compositeOperInstances><compositeOperInstance definitionIndex="0" endLine="1" index="{main_index}" '
        'name="bench::Main" sourceIndex="0" startLine="1">' + "".join(out) +
        '</compositeOperInstance></compositeOperInstances></composites>'
        '<toolkits><toolkit index="0" name="spl" uri="file:///spl" version="1.4.0"/></toolkits>'
        f'<parallelRegions><parallelRegion index="0" name="{REGION}"><parallelOperator operIndex="{par_index}">'
        '<splitter iportIndex="0" kind="RoundRobin"/></parallelOperator>'
        f'<parallelWidth><constantWidth>{width}</constantWidth></parallelWidth></parallelRegion></parallelRegions>'
        '</splApplication></applicationSet>\n').encode()


def _submit(adl: bytes, pes: int):
    from streams.aadl import aadls, content_id
    from streams.adl import parse_adl
    from streams.fusion import FusionSpec, fuse

    app = parse_adl(adl)
    spec = FusionSpec.from_job({"manual": pes, "type": "channelIsolation"})
    fused = fuse(app, pes, spec)
    docs = aadls(app, fused, job="bench")
    ids = {i: content_id(doc) for i, doc in docs.items()}
    return app, spec, fused, docs, ids


def _rescale(app, spec, fused, docs, width: int):
    """What the controller does on /scale: re-fuse, then the AADL and content id of every PE
    (an unchanged PE keeps its AADL bytes: `aadls(previous=...)`)."""
    from streams.aadl import aadls, content_id
    from streams.fusion import refuse

    refused = refuse(app, fused, spec, widths={REGION: width})
    new_docs = aadls(app, refused, job="bench", previous=(fused, docs))
    ids = {i: content_id(doc) if doc is not docs.get(i) else None for i, doc in new_docs.items()}
    return refused, ids


def measure(operators: int, pes: int, rounds: int) -> dict[str, float]:
    adl = synthetic_adl(operators)
    best_submit = best_refuse = cpu_submit = cpu_refuse = float("inf")
    for _ in range(rounds):
        start, cpu = time.perf_counter(), time.process_time()
        app, spec, fused, docs, ids = _submit(adl, pes)
        best_submit = min(best_submit, time.perf_counter() - start)
        cpu_submit = min(cpu_submit, time.process_time() - cpu)
        start, cpu = time.perf_counter(), time.process_time()
        refused, new_ids = _rescale(app, spec, fused, docs, 6)
        best_refuse = min(best_refuse, time.perf_counter() - start)
        cpu_refuse = min(cpu_refuse, time.process_time() - cpu)
    changed = sum(1 for i, cid in new_ids.items() if cid is not None and ids.get(i) != cid)
    return {"operators": len(app.operators), "pes": len(fused), "refused_pes": len(refused),
            "changed": changed, "submit_s": best_submit, "refuse_s": best_refuse, "submit_cpu_s": cpu_submit,
            "refuse_cpu_s": cpu_refuse}


def _body(argv: Sequence[str]) -> int:
    parser = Parser(prog=PROG, description="Streams fusion + AADL generation, and re-fusion for a width change")
    parser.add_argument("--operators", type=int, default=10_000, help="ADL operators (default 10,000)")
    parser.add_argument("--pes", type=int, default=100, help="PEs to fuse into (default 100)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, best kept (default 3)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args(list(argv))
    if args.operators < 20 or args.pes < 6 or args.rounds < 1:
        raise UsageError("--operators must be >= 20, --pes >= 6, --rounds >= 1")
    r = measure(args.operators, args.pes, args.rounds)
    ok_submit, ok_refuse = r["submit_s"] <= 1.0, r["refuse_s"] <= 0.1
    if args.json:
        print(json.dumps({**r, "submit_ok": ok_submit, "refuse_ok": ok_refuse}))
        return 0 if ok_submit and ok_refuse else 1
    print(f"fusion: {r['operators']:,} operators -> {r['pes']} PEs, parse + fuse + AADLs + content ids "
          f"{r['submit_s'] * 1000:.0f} ms (cpu {r['submit_cpu_s'] * 1000:.0f} ms; target <= 1000 ms: "
          f"{'ok' if ok_submit else 'MISSED'})")
    print(f"re-fusion: width 4 -> 6 -> {r['refused_pes']} PEs ({r['changed']} with a new content id), "
          f"refuse + AADLs + content ids {r['refuse_s'] * 1000:.1f} ms (cpu {r['refuse_cpu_s'] * 1000:.1f} ms; "
          f"target <= 100 ms: {'ok' if ok_refuse else 'MISSED'})")
    return 0 if ok_submit and ok_refuse else 1


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(PROG, _body, list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
