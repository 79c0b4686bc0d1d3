"""ADL -> logical model: the two real compiler ADLs, and ADLs written here in the same schema."""

from __future__ import annotations

import pathlib

import pytest

from streams.adl import parse_adl
from streams.errors import AdlError
from streams.model import PortRef
from streams_adl import Op, Pool, Region, Stv, adl, pipeline

DATA = pathlib.Path(__file__).parent / "data"


def fixture(name: str) -> bytes:
    return (DATA / f"{name}.adl").read_bytes()


def test_the_compilers_parallel_adl_resolves_connections_through_composite_ports():
    app = parse_adl(fixture("apps.parallel.Parallel"))
    assert app.name == "apps.parallel::Parallel"
    ops = {op.name: op for op in app.operators}
    assert sorted(ops) == ["Result.Region1", "Result.Region2", "Result.Region3", "Sink", "Source"]
    # Source -> (composite Result, input port 0) -> Result.Region1; Region3 -> (Result, output 0) -> Sink
    assert ops["Source"].outputs[0].connections == (PortRef("Result.Region1", 0),)
    assert ops["Result.Region3"].outputs[0].connections == (PortRef("Sink", 0),)
    assert ops["Sink"].inputs[0].connections == (PortRef("Result.Region3", 0),)
    assert ops["Source"].is_source and ops["Source"].kind == "spl.utility::Beacon"
    assert ops["Sink"].inputs[0].is_control
    assert [(r.name, r.width, r.operators, r.width_parameter) for r in app.parallel_regions] == [
        ("Result.Region1", 1, ("Result.Region1",), "width1"),
        ("Result.Region2", 1, ("Result.Region2",), "width2"),
        ("Result.Region3", 1, ("Result.Region3",), "width3")]
    assert ops["Result.Region2"].parallel_region == "Result.Region2"
    assert [(p.name, p.exclusive, p.tags) for p in app.host_pools] == [("$default", False, ())]
    assert all(op.pool_index == 0 and op.restartable and op.relocatable for op in app.operators)


def test_submission_time_values_set_widths_by_name_or_qualified_name():
    app = parse_adl(fixture("apps.parallel.Parallel"),
                    submission_values={"width1": "3", "apps.parallel::Work.width3": '"2"'})
    assert [r.width for r in app.parallel_regions] == [3, 1, 2]


def test_the_compilers_consistent_region_adl():
    app = parse_adl(fixture("apps.consistent.ConsistentRegion"))
    (region,) = app.consistent_regions
    assert (region.index, region.trigger, region.period) == (0, "operatorDriven", 0.0)
    assert (region.drain_timeout, region.reset_timeout, region.max_consecutive_reset_attempts) == (180.0, 180.0, 5)
    assert region.start_operators == ("Beat",) and region.trigger_operators == ("Beat",)
    assert region.operators == ("Beat", "Marker", "WriteA")
    ops = {op.name: op for op in app.operators}
    assert ops["Beat"].coloc == frozenset({"fused1"})
    assert all(op.consistent_regions == frozenset({0}) for op in app.operators)


def test_placement_host_pools_and_ports_are_read():
    ops = [
        Op("src", inputs=0, kind=0, coloc=("c1",), exloc=("x",), isolation=False, pool=1, inpool=1),
        Op("mid", inputs=2, threaded=(1,), host_coloc=("h",), host_exloc=("he",), host_isolation=True,
           pool=2, restartable=False, relocatable=False),
        Op("sink", outputs=0, host="node-7", pool=None, isolation=True),
    ]
    doc = adl(ops, [("src", 0, "mid", 0), ("src", 0, "mid", 1), ("mid", 0, "sink", 0)],
              pools=[Pool("$default"), Pool("hosts", hosts=("a", "b")), Pool("gpu", tags=("gpu", "ssd"), size=3,
                                                                           exclusive=True)])
    app = parse_adl(doc)
    src, mid, sink = app.operators
    assert (src.coloc, src.exloc, src.pool_index, src.in_pool_index, src.host_location) == (
        frozenset({"c1"}), frozenset({"x"}), 1, 1, "b")  # indexed host of a pool that lists its hosts
    assert (mid.threaded_inputs, mid.inputs[1].threaded, mid.inputs[1].congestion_policy,
            mid.inputs[1].queue_size) == (1, True, "wait", 100)
    assert (mid.host_coloc, mid.host_exloc, mid.host_isolation) == (frozenset({"h"}), frozenset({"he"}), True)
    assert (mid.restartable, mid.relocatable, mid.is_source) == (False, False, False)
    assert [p.connections for p in mid.inputs] == [(PortRef("src", 0),), (PortRef("src", 0),)]
    assert (sink.host_location, sink.isolation, sink.pool_index) == ("node-7", True, None)
    assert [(p.name, p.tags, p.hosts, p.size, p.exclusive) for p in app.host_pools] == [
        ("$default", (), (), None, False), ("hosts", (), ("a", "b"), None, False),
        ("gpu", ("gpu", "ssd"), (), 3, True)]


def consistent(index: int, *, start=False, trigger=False) -> str:
    return ('<splAnnotation internal="true" tag="consistentRegionEntry">'
            f'<value key="index" type="int32">{index}</value>'
            f'<value key="isStartOfRegion" type="boolean">{str(start).lower()}</value>'
            f'<value key="isTriggerOperator" type="boolean">{str(trigger).lower()}</value></splAnnotation>')


def annotation(**values) -> str:
    return '<splAnnotation tag="consistent">' + "".join(
        f'<value key="{k}" type="x">{v}</value>' for k, v in values.items()) + "</splAnnotation>"


def test_a_periodic_region_takes_its_values_and_spl_defaults():
    ops = [Op("src", inputs=0, kind=0, annotations=annotation(trigger="periodic", period="2.5", resetTimeout="30")
              + consistent(0, start=True)),
           Op("sink", outputs=0, annotations=consistent(0))]
    (region,) = parse_adl(adl(ops, [("src", 0, "sink", 0)])).consistent_regions
    assert (region.trigger, region.period, region.drain_timeout, region.reset_timeout,
            region.max_consecutive_reset_attempts) == ("periodic", 2.5, 180.0, 30.0, 5)
    assert region.start_operators == ("src",) and region.trigger_operators == ()


def test_the_compilers_internal_consistent_region_annotation_wins():
    start = annotation(trigger="periodic", period="1") + consistent(3, start=True)
    ops = [Op("src", inputs=0, kind=0, annotations=start),
           Op("sink", outputs=0, annotations=consistent(3))]
    internal = ('<splAnnotation internal="true" tag="consistentRegion"><value key="index" type="int64">3</value>'
                '<value key="trigger" type="x">periodic</value><value key="period" type="x">9</value>'
                '<value key="maxConsecutiveResetAttempts" type="int32">2</value></splAnnotation>')
    (region,) = parse_adl(adl(ops, [("src", 0, "sink", 0)], composite_annotations=internal)).consistent_regions
    assert (region.index, region.period, region.max_consecutive_reset_attempts) == (3, 9.0, 2)


@pytest.mark.parametrize("values, message", [
    ({"trigger": "periodic"}, "periodic trigger needs a period"),
    ({"trigger": "sometimes"}, "trigger='sometimes'"),
    ({"trigger": "operatorDriven", "drainTimeout": "-1"}, "drainTimeout='-1' must be a positive"),
    ({"trigger": "operatorDriven", "maxConsecutiveResetAttempts": "many"}, "maxConsecutiveResetAttempts='many'"),
    ({}, "no trigger"),
])
def test_bad_consistent_region_values_name_the_key(values, message):
    ops = [Op("src", inputs=0, kind=0, annotations=annotation(**values) + consistent(0, start=True)),
           Op("sink", outputs=0)]
    with pytest.raises(AdlError, match=message):
        parse_adl(adl(ops, [("src", 0, "sink", 0)]))


def test_a_parallel_composite_replicates_every_operator_below_it():
    ops = [Op("src", inputs=0, kind=0), Op("W.a", composite="W"), Op("W.b", composite="W"), Op("sink", outputs=0)]
    doc = adl(ops, [("src", 0, "W.a", 0), ("W.a", 0, "W.b", 0), ("W.b", 0, "sink", 0)],
              regions=[Region("W", "W", width=None, stv=0)], stvs=[Stv("width", "4")])
    app = parse_adl(doc)
    (region,) = app.parallel_regions
    assert (region.operator, region.operators, region.width) == ("W", ("W.a", "W.b"), 4)
    assert parse_adl(doc, submission_values={"width": "2"}).parallel_regions[0].width == 2


def test_a_required_submission_time_width_must_be_given():
    ops = [Op("src", inputs=0, kind=0), Op("sink", outputs=0)]
    doc = adl(ops, [("src", 0, "sink", 0)], regions=[Region("R", "sink", width=None, stv=0)], stvs=[Stv("w")])
    with pytest.raises(AdlError, match="'w' is required and was not given"):
        parse_adl(doc)
    assert parse_adl(doc, submission_values={"w": "3"}).parallel_regions[0].width == 3
    with pytest.raises(AdlError, match="width 0 must be at least 1"):
        parse_adl(doc, submission_values={"w": "0"})


def test_the_same_adl_gives_the_same_model():
    doc = fixture("apps.parallel.Parallel")
    assert parse_adl(doc) == parse_adl(doc)


def replace(doc: bytes, old: str, new: str) -> bytes:
    assert old.encode() in doc
    return doc.replace(old.encode(), new.encode(), 1)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: b"not xml at all", "not well-formed XML"),
    (lambda d: b'<?xml version="1.0"?><html/>', "root element is <html>"),
    (lambda d: replace(d, ' restartable="true"', ""), "'op0'.*no attribute 'restartable'"),
    (lambda d: replace(d, 'relocatable="true"', 'relocatable="yes"'), "relocatable='yes' is not a boolean"),
    (lambda d: replace(d, '<poolLocation poolIndex="0"/>', '<poolLocation poolIndex="7"/>'),
     "poolIndex=7 names no hostpool"),
    (lambda d: replace(d, 'operIndex="1"', 'operIndex="99"'), "operIndex=99 names no operator"),
    (lambda d: replace(d, 'definitionIndex="1"', 'definitionIndex="9"'), "definitionIndex=9"),
    (lambda d: replace(d, 'name="op2"', 'name="op1"'), "'op1': the name is used by two operators"),
    (lambda d: replace(d, '<primitiveOperDefinitions>', '<primitiveOperDefinitionz>').replace(
        b"</primitiveOperDefinitions>", b"</primitiveOperDefinitionz>"), "no <primitiveOperDefinitions>"),
    (lambda d: replace(d, 'membershipMode="shared"', 'membershipMode="open"'), "membershipMode='open'"),
    (lambda d: replace(d, 'portIndex="0" portKind="input"', 'portIndex="5" portKind="input"'),
     "input port 5 of 'op1', which does not exist"),
    (lambda d: adl([]), "holds no primitiveOperInstance"),
])
def test_an_adl_that_is_not_the_schema_is_an_error_naming_what(mutate, message):
    with pytest.raises(AdlError, match=message):
        parse_adl(mutate(pipeline(3)))


def test_entity_expansion_is_refused():
    bomb = (b'<?xml version="1.0"?><!DOCTYPE a [<!ENTITY x "xxxxxxxxxx"><!ENTITY y "&x;&x;&x;&x;&x;">]>'
            b'<applicationSet xmlns="http://www.ibm.com/xmlns/prod/streams/application/v4200" name="&y;"/>')
    with pytest.raises(AdlError, match="refused"):
        parse_adl(bomb)
    utf16 = pipeline(2).decode().replace('encoding="UTF-8"', 'encoding="UTF-16"').encode("utf-16")
    assert parse_adl(utf16).name == "t::Main"  # another encoding goes through defusedxml, still parsed


def nested(depth: int) -> bytes:
    doc = pipeline(2).decode()
    start = doc.index("<primitiveOperInstance")
    end = doc.index("</compositeOperInstance></compositeOperInstances>")
    opening = "".join(f'<compositeOperInstance definitionIndex="1" endLine="1" index="{100 + i}" name="c{i}" '
                      'sourceIndex="0" startLine="1">' for i in range(depth))
    return (doc[:start] + opening + doc[start:end] + "</compositeOperInstance>" * depth + doc[end:]).encode()


def test_deep_composites_parse_up_to_a_limit():
    assert [op.name for op in parse_adl(nested(50)).operators] == ["op0", "op1"]
    with pytest.raises(AdlError, match="nested deeper than 200"):
        parse_adl(nested(2000))  # not a RecursionError


def composite_ports_doc(fanout: int, *, loop: bool) -> bytes:
    """src -> C0.in -> (C1.in, twice) -> ... -> C{n}.in -> sink: each composite port fans out to the
    next one `fanout` times (or, with loop, the last points back to the first)."""
    n = 30
    doc = pipeline(2).decode()
    comps = []
    for k in range(n):
        nxt = (f'<connection operIndex="{200 + k + 1}" portIndex="0" portKind="input"/>' * fanout if k < n - 1 else
               ('<connection operIndex="200" portIndex="0" portKind="input"/>' if loop else
                '<connection operIndex="1" operName="op1" portIndex="0" portKind="input"/>'))
        comps.append(f'<compositeOperInstance definitionIndex="1" endLine="1" index="{200 + k}" name="C{k}" '
                     'sourceIndex="0" startLine="1"><inputPorts><port index="0"><outgoingConnections>'
                     f'{nxt}</outgoingConnections></port></inputPorts></compositeOperInstance>')
    doc = doc.replace('<connection operIndex="1" operName="op1" portIndex="0" portKind="input"/>',
                      '<connection operIndex="200" portIndex="0" portKind="input"/>', 1)
    end = "</compositeOperInstance></compositeOperInstances>"
    return doc.replace(end, "".join(comps) + end).encode()


def test_composite_ports_are_followed_once_each():
    app = parse_adl(composite_ports_doc(2, loop=False))  # 2**29 paths if followed naively
    assert app.operators[0].outputs[0].connections == (PortRef("op1", 0),)
    assert app.operators[1].inputs[0].connections == (PortRef("op0", 0),)
    with pytest.raises(AdlError, match="'C0' input port 0: connections loop through composite ports"):
        parse_adl(composite_ports_doc(1, loop=True))
