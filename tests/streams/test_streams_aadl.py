"""One AADL per PE: what a PE runs and whom it talks to, deterministic, and a content id that only
changes when that does (the controller replaces exactly those PEs)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from streams.aadl import aadl_for, aadls, content_id
from streams.adl import parse_adl
from streams.fusion import FusionSpec, fuse, refuse
from streams_adl import Op, Region, adl, pipeline

NS = "{http://www.ibm.com/xmlns/prod/streams/application/augmented}"
B = "{http://www.ibm.com/xmlns/prod/streams/application}"


def test_an_aadl_holds_the_job_the_pe_and_its_operators_with_their_connections():
    app = parse_adl(pipeline(4))
    pes = fuse(app, 2, FusionSpec.from_job({"manual": 2}))
    docs = aadls(app, pes, job="my-job")
    root = ET.fromstring(docs[1])
    assert root.tag == NS + "augmentedPE"
    assert (root.get("jobName"), root.get("applicationName")) == ("my-job", "t::Main")
    assert root.get("id") == "1"
    ops = {op.get("index"): op.get("name") for op in root.iter(B + "operInstance")}
    assert list(ops.values()) == ["op2", "op3"]
    inter = [c.get("operInstanceIndex") for c in root.iter(B + "interPeConnection")]
    intra = [c.get("operInstanceIndex") for c in root.iter(B + "intraPeConnection")]
    # op2 is fed by op1 in PE 0 (an inter-PE connection through PE input port 0) and feeds op3 here
    assert inter == ["1"] and sorted(intra) == ["2", "3"]
    (port,) = root.find(NS + "inputPorts")
    (static,) = port.find(NS + "staticConnections")
    assert (static.get("peId"), static.get("oportIndex")) == ("0", "0")       # names the other PE
    assert root.find(NS + "outputPorts").findall(NS + "outputPort") == []     # op3 is the sink
    assert docs[1] == aadl_for(app, pes[1], pes, job="my-job")





def test_the_same_fusion_gives_the_same_bytes_and_content_ids():
    doc = pipeline(30, regions=[Region("R", "op10", width=3)])
    spec = FusionSpec.from_job({"manual": 5, "type": "channelIsolation"})
    first = aadls(parse_adl(doc), fuse(parse_adl(doc), 5, spec), job="j")
    second = aadls(parse_adl(doc), fuse(parse_adl(doc), 5, spec), job="j")
    assert first == second
    ids = [content_id(d) for d in first.values()]
    assert all(re.fullmatch(r"[0-9a-f]{16}", i) for i in ids) and len(set(ids)) == len(ids)
    assert content_id(b"x") != content_id(b"y")


def test_special_characters_are_escaped():
    ops = [Op('a&"<b>', inputs=0), Op("c", outputs=0)]
    app = parse_adl(adl(ops, [('a&"<b>', 0, "c", 0)]))
    pes = fuse(app, 1, FusionSpec.from_job({"manual": 1}))
    root = ET.fromstring(aadl_for(app, pes[0], pes, job='j"<'))
    assert root.get("jobName") == 'j"<'
    assert [o.get("name") for o in root.iter(B + "operInstance")] == ['a&"<b>', "c"]


def line_with_region():
    """src, p0..p5, W (parallel: W.a -> W.b), sink, q0..q5: PEs far from the region exist."""
    ops = ([Op("src", inputs=0)] + [Op(f"p{k}") for k in range(6)] + [Op("W.a", composite="W"),
           Op("W.b", composite="W"), Op("sink")] + [Op(f"q{k}", outputs=0 if k == 5 else 1) for k in range(6)])
    names = ["src"] + [f"p{k}" for k in range(6)] + ["W.a", "W.b", "sink"] + [f"q{k}" for k in range(6)]
    return parse_adl(adl(ops, [(names[i], 0, names[i + 1], 0) for i in range(len(names) - 1)],
                         regions=[Region("W", "W", width=2)]))


def test_a_width_change_keeps_the_content_id_of_every_pe_it_does_not_touch():
    app = line_with_region()
    spec = FusionSpec.from_job({"manual": 6, "type": "channelIsolation"})
    pes = fuse(app, 6, spec)
    before = {i: content_id(d) for i, d in aadls(app, pes, job="j").items()}
    grown = refuse(app, pes, spec, widths={"W": 4})
    after = {i: content_id(d) for i, d in aadls(app, grown, job="j").items()}
    region_neighbours = {"p5", "sink"}  # feed the splitter / are fed by the merger: new connections
    for pe in pes:
        touches = set(pe.operators) & region_neighbours
        if touches:
            assert after[pe.index] != before[pe.index], pe.operators
        else:  # channel PEs of channels 0 and 1 included: same operators, same peers
            assert after[pe.index] == before[pe.index], pe.operators
    assert len(after) == len(before) + 2
    # the time-sensitive path reuses the bytes of the PEs that did not change, with the same result
    old_docs = aadls(app, pes, job="j")
    reused = aadls(app, grown, job="j", previous=(pes, old_docs))
    assert reused == aadls(app, grown, job="j")
    touching = sum(1 for pe in pes if set(pe.operators) & region_neighbours)
    assert touching >= 1
    assert sum(reused[i] is old_docs.get(i) for i in reused) == len(pes) - touching
    # and back to the first width: the first AADLs, byte for byte
    back = refuse(app, grown, spec, widths={"W": 2})
    assert {i: content_id(d) for i, d in aadls(app, back, job="j").items()} == before


def test_aadl_reuse_is_refused_when_peers_moved():
    app = parse_adl(pipeline(6))
    pes2 = fuse(app, 2, FusionSpec.from_job({"manual": 2}))
    pes3 = fuse(app, 3, FusionSpec.from_job({"manual": 3}))
    docs2 = aadls(app, pes2, job="j")
    assert aadls(app, pes3, job="j", previous=(pes2, docs2)) == aadls(app, pes3, job="j")
