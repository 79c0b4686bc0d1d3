"""Fusion: the Job's fusion spec, the automatic PE count, and the PEs (properties with hypothesis)."""

from __future__ import annotations

import pathlib

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from streams.adl import parse_adl
from streams.errors import AdlError, LogicalError
from streams.fusion import FusionSpec, fuse, pe_count, refuse
from streams.topology import expand
from streams_adl import Op, Region, adl, pipeline

# -- the spec ------------------------------------------------------------------------------------


def test_the_default_is_automatic_fusion_without_channel_influence():
    assert FusionSpec.from_job(None, None) == FusionSpec("automatic", None, "noChannelInfluence", None)
    spec = FusionSpec.from_job({"manual": 4, "type": "channelIsolation"},
                               {"dynamic": {"elastic": True, "threadCount": 3}})
    assert (spec.kind, spec.manual, spec.type, spec.threading, spec.elastic, spec.thread_count) == (
        "manual", 4, "channelIsolation", "dynamic", True, 3)


@pytest.mark.parametrize("fusion, threading, fields", [
    ({"automatic": True, "manual": 3}, None, ("spec.fusion.automatic", "spec.fusion.manual")),
    ({"legacy": True, "automatic": True, "manual": 2}, None,
     ("spec.fusion.automatic", "spec.fusion.legacy", "spec.fusion.manual")),
    (None, {"automatic": True, "dedicated": True}, ("spec.threadingModel.automatic", "spec.threadingModel.dedicated")),
    (None, {"manual": True, "dynamic": {}}, ("spec.threadingModel.dynamic", "spec.threadingModel.manual")),
    ({"manual": 0}, None, ("spec.fusion.manual",)),
    ({"manual": True}, None, ("spec.fusion.manual",)),
    ({"manual": "3"}, None, ("spec.fusion.manual",)),
    ({"automatic": False}, None, ("spec.fusion.automatic",)),
    ({"type": "channelMagic"}, None, ("spec.fusion.type",)),
    ({"colour": "red"}, None, ("spec.fusion.colour",)),
    ("manual", None, ("spec.fusion",)),
    (None, {"dynamic": {"threadCount": -1}}, ("spec.threadingModel.dynamic.threadCount",)),
    (None, {"dedicated": "yes"}, ("spec.threadingModel.dedicated",)),
])
def test_contradictions_are_logical_errors_naming_the_fields(fusion, threading, fields):
    with pytest.raises(LogicalError) as err:
        FusionSpec.from_job(fusion, threading)
    assert err.value.fields == fields
    assert all(f in str(err.value) for f in fields)


def test_disabled_kinds_next_to_the_requested_one_are_no_contradiction():
    assert FusionSpec.from_job({"automatic": False, "legacy": False, "manual": 2}).kind == "manual"
    assert FusionSpec.from_job(None, {"automatic": False, "manual": True}).threading == "manual"


# -- the automatic PE count ----------------------------------------------------------------------

def count(doc: bytes, fusion=None, threading=None, **kw) -> int:
    return pe_count(parse_adl(doc), FusionSpec.from_job(fusion, threading), **kw)


def test_automatic_count_follows_the_documented_formula():
    line = pipeline(10)  # S=1 source, 9 other operators with 1 input port each
    assert count(line, nodes=100) == 6                       # min 1, max 10 threads -> ceil((1+10)/2)
    assert count(line, nodes=4) == 4                         # no more PEs than schedulable nodes
    assert count(line, nodes=100, pod_cpu_limit_millis=2000) == 3  # 2 cores a PE: ceil((1+5)/2)
    assert count(line, threading={"manual": True}, nodes=100) == 1   # min = max = 1
    assert count(line, threading={"dedicated": True}, nodes=100) == 10  # a thread per input port
    assert count(line, threading={"dynamic": {"threadCount": 3}}, nodes=100) == 9  # ceil((4+13)/2)
    assert count(pipeline(3), nodes=100) == 2                # ceil((1+3)/2), never more than operators
    assert count(line, {"legacy": True}, nodes=1) == 10
    assert count(line, {"manual": 50}, nodes=1) == 10        # clamped: a PE is never empty


def test_automatic_count_makes_room_for_isolation_whatever_the_nodes():
    ops = [Op(f"op{i}", inputs=0 if i == 0 else 1, isolation=i in (1, 2, 3)) for i in range(5)]
    doc = adl(ops, [(f"op{i}", 0, f"op{i + 1}", 0) for i in range(4)])
    assert count(doc, nodes=1) == 4                          # 3 isolated PEs + one for the rest


# -- fusion properties -----------------------------------------------------------------------------

@st.composite
def apps(draw):
    n = draw(st.integers(2, 24))
    ids = st.sampled_from(["a", "b", "c", "d"])
    ops = []
    for i in range(n):
        ops.append(Op(f"op{i}", inputs=0 if i == 0 else 1, kind=0 if i == 0 else 1,
                      coloc=tuple(draw(st.lists(ids, max_size=1))),
                      exloc=tuple(draw(st.lists(ids, max_size=1))),
                      isolation=draw(st.booleans()) and draw(st.booleans()) and draw(st.booleans())))
    edges = [(f"op{draw(st.integers(0, i - 1))}", 0, f"op{i}", 0) for i in range(1, n)]
    return adl(ops, edges)


def check_placement(app, pes):
    names = [n for pe in pes for n in pe.operators]
    assert sorted(names) == sorted(op.name for op in expand(app))          # each operator exactly once
    where = {n: pe.index for pe in pes for n in pe.operators}
    assert [pe.index for pe in pes] == list(range(len(pes)))
    for pe in pes:
        assert pe.operators == tuple(m.name for m in pe.members)
        assert pe.restartable == all(m.restartable for m in pe.members)
        exlocs = [i for m in pe.members for i in m.exloc]
        assert len(exlocs) == len(set(exlocs))                               # exlocation honoured
        if any(m.isolation for m in pe.members):
            assert len(pe.members) == 1                                      # isolation honoured
    for a in expand(app):
        for b in expand(app):
            if a.coloc & b.coloc:
                assert where[a.name] == where[b.name]                        # colocation honoured


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=apps(), requested=st.integers(1, 30), kind=st.sampled_from(["manual", "automatic", "legacy"]))
def test_every_fusion_honours_the_adl_and_the_count(doc, requested, kind):
    app = parse_adl(doc)
    spec = FusionSpec.from_job({kind: requested if kind == "manual" else True})
    try:
        pes = fuse(app, requested, spec)
    except AdlError:
        event("ADL conflict")
        # only when colocated operators contradict each other
        groups: dict = {}
        for op in app.operators:
            for c in op.coloc:
                groups.setdefault(c, []).append(op)
        assert any(len(g) > 1 and (any(o.isolation for o in g) or
                                   len([x for o in g for x in o.exloc]) != len({x for o in g for x in o.exloc}))
                   for g in groups.values())
        return
    except LogicalError as err:
        event("too few PEs")
        assert kind == "manual" and err.fields == ("spec.fusion.manual",)
        at_least = len(fuse(app, requested, FusionSpec.from_job({"automatic": True})))
        assert at_least > requested                       # the best the fuser can do needs more
        return
    event("fused")
    check_placement(app, pes)
    units = len(fuse(app, 1, FusionSpec.from_job({"legacy": True})))
    if kind == "manual":
        assert len(pes) == min(requested, units)           # the count asked for (clamped to units)
    if kind == "legacy":
        assert len(pes) == units
    assert fuse(app, requested, spec) == pes              # deterministic


@st.composite
def parallel_apps(draw):
    """src -> W (a parallel composite of m operators, a line) -> sink, plus a tail of plain operators."""
    m = draw(st.integers(1, 4))
    tail = draw(st.integers(0, 5))
    ops = [Op("src", inputs=0, kind=0)] + [Op(f"W.o{k}", composite="W") for k in range(m)] + \
        [Op("sink")] + [Op(f"t{k}", outputs=0 if k == tail - 1 else 1) for k in range(tail)]
    if not tail:
        ops[m + 1].outputs = 0
    names = ["src"] + [f"W.o{k}" for k in range(m)] + ["sink"] + [f"t{k}" for k in range(tail)]
    edges = [(names[i], 0, names[i + 1], 0) for i in range(len(names) - 1)]
    return adl(ops, edges, regions=[Region("W", "W", width=draw(st.integers(1, 4)))])


@settings(max_examples=120, deadline=None)
@given(doc=parallel_apps(), width=st.integers(1, 6), requested=st.integers(1, 14),
       channel_type=st.sampled_from(["noChannelInfluence", "channelIsolation", "channelExlocation"]))
def test_parallel_channels_are_fused_as_the_type_says(doc, width, requested, channel_type):
    app = parse_adl(doc)
    spec = FusionSpec.from_job({"manual": requested, "type": channel_type})
    try:
        pes = fuse(app, requested, spec, widths={"W": width})
    except LogicalError as err:
        assert err.fields == ("spec.fusion.manual",)
        if channel_type == "channelIsolation":
            assert requested < width + 1                   # a PE per channel, and one for the rest
        else:
            assert channel_type == "channelExlocation" and requested < width  # channels apart
        return
    physical = expand(app, {"W": width})
    assert sorted(n for pe in pes for n in pe.operators) == sorted(op.name for op in physical)
    region_ops = {op.name: op.channels[0][1] for op in physical if op.channels}
    assert sorted(region_ops) == sorted(f"W[{c}].o{k}" for c in range(width)
                                        for k in range(len(app.region("W").operators)))
    for pe in pes:
        channels = {region_ops[n] for n in pe.operators if n in region_ops}
        if channel_type != "noChannelInfluence":
            assert len(channels) <= 1                      # channels never share a PE
        if channel_type == "channelIsolation" and channels:
            (c,) = channels
            assert set(pe.operators) == {n for n, ch in region_ops.items() if ch == c}
            assert (pe.parallel_region, pe.channel) == ("W", c)
    if channel_type != "channelIsolation":
        assert len(pes) == min(requested, len(physical))


def test_widths_name_a_region_and_are_at_least_one():
    app = parse_adl(pipeline(3, regions=[Region("R", "op1")]))
    spec = FusionSpec.from_job({"manual": 2})
    with pytest.raises(LogicalError) as err:
        fuse(app, 2, spec, widths={"Nope": 2})
    assert err.value.fields == ("widths.Nope",)
    with pytest.raises(LogicalError, match="widths.R"):
        fuse(app, 2, spec, widths={"R": 0})
    assert [op.name for op in expand(app, {"R": 3})] == ["op0", "op1[0]", "op1[1]", "op1[2]", "op2"]


def test_the_compilers_parallel_adl_replicates_channels_as_the_compiler_names_them():
    app = parse_adl((pathlib.Path(__file__).parent / "data" / "apps.parallel.Parallel.adl").read_bytes())
    ops = {op.name: op for op in expand(app, {"Result.Region1": 2, "Result.Region2": 2})}
    assert sorted(ops) == ["Result.Region1[0]", "Result.Region1[1]", "Result.Region2[0]", "Result.Region2[1]",
                           "Result.Region3[0]", "Sink", "Source"]
    # the splitter feeds every channel; two regions in a row connect all to all; the merger gathers
    assert [r.operator for r in ops["Source"].outputs[0].connections] == ["Result.Region1[0]", "Result.Region1[1]"]
    assert [r.operator for r in ops["Result.Region1[1]"].outputs[0].connections] == [
        "Result.Region2[0]", "Result.Region2[1]"]
    assert [r.operator for r in ops["Result.Region3[0]"].inputs[0].connections] == [
        "Result.Region2[0]", "Result.Region2[1]"]
    assert (ops["Result.Region1[1]"].parallel_region, ops["Result.Region1[1]"].channel) == ("Result.Region1", 1)
    pes = fuse(app, 4, FusionSpec.from_job({"manual": 4, "type": "channelExlocation"}),
               widths={"Result.Region1": 2, "Result.Region2": 2})
    assert len(pes) == 4
    for pe in pes:
        assert not {"Result.Region1[0]", "Result.Region1[1]"} <= set(pe.operators)


def test_adl_conflicts_inside_a_unit_are_named():
    ops = [Op("a", inputs=0, coloc=("g",), exloc=("x",)), Op("b", coloc=("g",), exloc=("x",), outputs=0)]
    app = parse_adl(adl(ops, [("a", 0, "b", 0)]))
    with pytest.raises(AdlError, match="share partition exlocation 'x'"):
        fuse(app, 2, FusionSpec.from_job({"manual": 2}))
    ops = [Op("a", inputs=0, coloc=("g",), isolation=True), Op("b", coloc=("g",), outputs=0)]
    with pytest.raises(AdlError, match="'a' asks for partition isolation"):
        fuse(parse_adl(adl(ops, [("a", 0, "b", 0)])), 2, FusionSpec.from_job({"manual": 2}))


def test_channel_isolation_that_contradicts_an_exlocation_is_a_logical_error():
    ops = [Op("src", inputs=0), Op("W.a", composite="W", exloc=("x",)), Op("W.b", composite="W", exloc=("x",)),
           Op("sink", outputs=0)]
    app = parse_adl(adl(ops, [("src", 0, "W.a", 0), ("W.a", 0, "W.b", 0), ("W.b", 0, "sink", 0)],
                        regions=[Region("W", "W", width=2)]))
    with pytest.raises(LogicalError) as err:
        fuse(app, 4, FusionSpec.from_job({"manual": 4, "type": "channelIsolation"}))
    assert err.value.fields == ("spec.fusion.type",)
    # without channel isolation the operators may be apart: it fuses
    assert len(fuse(app, 4, FusionSpec.from_job({"manual": 4}))) == 4


def test_host_placement_travels_with_the_pe():
    ops = [Op("a", inputs=0, host="node-1", host_exloc=("spread",)), Op("b", host_exloc=("spread",)),
           Op("c", outputs=0, restartable=False)]
    app = parse_adl(adl(ops, [("a", 0, "b", 0), ("b", 0, "c", 0)]))
    pes = fuse(app, 1, FusionSpec.from_job({"automatic": True}))  # host exlocation forces 2
    assert len(pes) == 2
    by_op = {n: pe for pe in pes for n in pe.operators}
    assert by_op["a"].host == "node-1" and by_op["a"].host_exloc == frozenset({"spread"})
    assert by_op["a"] is not by_op["b"]
    assert by_op["c"].restartable is False and by_op["a"].host_pool.name == "$default"


# -- re-fusion for a width change -------------------------------------------------------------------

def region_app():
    ops = ([Op("src", inputs=0)] + [Op(f"p{k}") for k in range(6)] + [Op("W.a", composite="W"),
           Op("W.b", composite="W"), Op("sink")] + [Op(f"q{k}", outputs=0 if k == 5 else 1) for k in range(6)])
    names = ["src"] + [f"p{k}" for k in range(6)] + ["W.a", "W.b", "sink"] + [f"q{k}" for k in range(6)]
    return parse_adl(adl(ops, [(names[i], 0, names[i + 1], 0) for i in range(len(names) - 1)],
                         regions=[Region("W", "W", width=3)]))


def test_refuse_keeps_every_pe_it_can_and_adds_a_pe_per_new_channel():
    app = region_app()
    spec = FusionSpec.from_job({"manual": 6, "type": "channelIsolation"})
    pes = fuse(app, 6, spec)
    assert len(pes) == 6
    grown = refuse(app, pes, spec, widths={"W": 5})
    assert [pe.index for pe in grown] == list(range(8))
    for old in pes:
        assert grown[old.index].operators == old.operators     # same index, same operators
    assert {(grown[i].parallel_region, grown[i].channel) for i in (6, 7)} == {("W", 3), ("W", 4)}
    assert set(grown[6].operators) | set(grown[7].operators) == {"W[3].a", "W[3].b", "W[4].a", "W[4].b"}
    shrunk = refuse(app, grown, spec, widths={"W": 3})
    assert shrunk == pes                                        # back to the original fusion, exactly
    same = refuse(app, pes, spec, widths={"W": 3})
    assert same == pes


def test_refuse_under_no_channel_influence_gives_new_channels_their_own_pes():
    app = region_app()
    spec = FusionSpec.from_job({"manual": 3})
    pes = fuse(app, 3, spec)
    grown = refuse(app, pes, spec, widths={"W": 4})
    assert len(grown) == 4
    assert set(grown[3].operators) == {"W[3].a", "W[3].b"}
    check = {n for pe in grown for n in pe.operators}
    assert check == {op.name for op in expand(app, {"W": 4})}


def test_nested_regions_multiply_and_connect_channel_to_channel():
    ops = [Op("src", inputs=0), Op("W.x", composite="W"), Op("W.y", composite="W"), Op("sink", outputs=0)]
    app = parse_adl(adl(ops, [("src", 0, "W.x", 0), ("W.x", 0, "W.y", 0), ("W.y", 0, "sink", 0)],
                        regions=[Region("W", "W", width=2), Region("W.x", "W.x", width=3)]))
    physical = {op.name: op for op in expand(app)}
    xs = sorted(n for n in physical if ".x" in n)
    assert xs == [f"W[{i}].x[{j}]" for i in range(2) for j in range(3)]
    assert [r.operator for r in physical["src"].outputs[0].connections] == xs        # fan out to all 6
    assert [r.operator for r in physical["W[1].x[2]"].outputs[0].connections] == ["W[1].y"]  # same W channel
    assert [r.operator for r in physical["W[0].y"].inputs[0].connections] == [f"W[0].x[{j}]" for j in range(3)]
    assert physical["W[1].x[2]"].channels == (("W", 1), ("W.x", 2))
    pes = fuse(app, 3, FusionSpec.from_job({"manual": 3, "type": "channelIsolation"}))
    assert [(pe.parallel_region, pe.channel) for pe in pes] == [(None, None), ("W", 0), ("W", 1)]


def test_operators_that_cannot_be_neighbours_in_a_pe_still_fuse_quickly():
    # 3,000 operators alternating between two hosts: no two neighbours may share a PE
    n = 3000
    ops = [Op(f"op{i}", inputs=0 if i == 0 else 1, outputs=0 if i == n - 1 else 1, pool=None,
              host="a" if i % 2 else "b") for i in range(n)]
    app = parse_adl(adl(ops, [(f"op{i}", 0, f"op{i + 1}", 0) for i in range(n - 1)]))
    pes = fuse(app, 10, FusionSpec.from_job({"manual": 10}))
    assert len(pes) == 10
    assert all(len({app.operator(n).host_location for n in pe.operators}) == 1 for pe in pes)
    # a thousand operators that exclude each other: as many PEs, found without a quadratic search
    ops = [Op(f"x{i}", inputs=0, outputs=0, exloc=("all",)) for i in range(1000)]
    app = parse_adl(adl(ops, []))
    assert len(fuse(app, 1, FusionSpec.from_job({"automatic": True}))) == 1000
    with pytest.raises(LogicalError, match="no fewer than 1000"):
        fuse(app, 5, FusionSpec.from_job({"manual": 5}))


def test_widths_that_would_exhaust_the_controller_are_refused(monkeypatch):
    from streams import topology

    monkeypatch.setattr(topology, "MAX_CONNECTIONS", 1000)
    ops = [Op("src", inputs=0), Op("A"), Op("B"), Op("sink", outputs=0)]
    app = parse_adl(adl(ops, [("src", 0, "A", 0), ("A", 0, "B", 0), ("B", 0, "sink", 0)],
                        regions=[Region("A", "A", width=2), Region("B", "B", width=2)]))
    spec = FusionSpec.from_job({"manual": 2})
    assert len(fuse(app, 2, spec, widths={"A": 30, "B": 30})) == 2   # 30 + 900 + 30 connections
    with pytest.raises(LogicalError, match="make 1023 connections .* over the limit of 1000"):
        fuse(app, 2, spec, widths={"A": 31, "B": 31})                # regions in a row: all to all
    with pytest.raises(LogicalError, match="must be an integer from 1 to 10000"):
        fuse(app, 2, spec, widths={"A": 10001})
    monkeypatch.setattr(topology, "MAX_OPERATORS", 50)
    with pytest.raises(LogicalError, match="make 52 operators, over the limit of 50"):
        fuse(app, 2, spec, widths={"A": 25, "B": 25})


def test_an_operator_named_like_a_channel_of_another_is_an_adl_error():
    ops = [Op("src", inputs=0), Op("A"), Op("A[1]", outputs=0)]
    app = parse_adl(adl(ops, [("src", 0, "A", 0), ("A", 0, "A[1]", 0)], regions=[Region("A", "A", width=2)]))
    with pytest.raises(AdlError, match="'A\\[1\\]': the name is used twice once parallel channels are named"):
        fuse(app, 2, FusionSpec.from_job({"manual": 2}))
