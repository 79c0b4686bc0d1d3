"""`bench/streams_fusion.py` measures what it says: its generated ADL is the schema, the fusion has
the PEs asked for, and the width change adds a PE per new channel and replaces only the PEs it
touches. (The figures themselves are the benchmark's business, not a test's.)"""

from __future__ import annotations

from bench.streams_fusion import REGION, measure, synthetic_adl
from streams.adl import parse_adl


def test_the_generated_adl_has_the_operators_and_region_asked_for():
    app = parse_adl(synthetic_adl(300, region_ops=5, width=3))
    assert len(app.operators) == 300
    (region,) = app.parallel_regions
    assert (region.name, region.width, len(region.operators)) == (REGION, 3, 5)


def test_the_width_change_touches_the_new_channels_and_the_region_neighbours_only():
    figures = measure(300, 10, 1)
    assert (figures["operators"], figures["pes"], figures["refused_pes"]) == (300, 10, 12)
    # 2 new channel PEs, plus the PE(s) of the splitter's feeder and the merger's consumer
    assert 3 <= figures["changed"] <= 4
