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


def test_drain_rounds_pair_the_watch_with_the_operators_own_drain_time():
    """`bench streams` times a round from the watch (DRAINING seq N -> PROCESSING with
    lastCompletedSeqID N) and quotes the operator's own sample of that same round; a PROCESSING
    of another round, or metrics of an older drain, add nothing."""
    from bench.streams_bench import DrainRounds

    rounds = DrainRounds()
    rounds.feed(10.0, {"state": "DRAINING", "currentSeqID": 3})
    rounds.feed(10.01, {"state": "DRAINING", "currentSeqID": 3})       # a later write of the same drain
    rounds.feed(10.2, {"state": "PROCESSING", "lastCompletedSeqID": 2})  # not this round
    rounds.feed(10.25, {"state": "PROCESSING", "lastCompletedSeqID": 3,
                        "metrics": {"lastCompletedDrain": 3, "drainSamples": [30.0, 12.5]}})
    rounds.feed(11.0, {"state": "DRAINING", "currentSeqID": 5})
    rounds.feed(11.1, {"state": "PROCESSING", "lastCompletedSeqID": 5,
                       "metrics": {"lastCompletedDrain": 3, "drainSamples": [30.0, 12.5]}})
    assert [round(t, 3) for t in rounds.watched] == [0.25, 0.1]
    assert rounds.own == [0.0125]
