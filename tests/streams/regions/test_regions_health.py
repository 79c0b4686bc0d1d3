"""The region health rule: unknown when a PE or its pod is missing, healthy only when every PE is
Full and its pod Running, not a clean start once a PE was relaunched."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streams.regions.health import Health, PeView, Relaunches, region_health

UP = PeView("Full", 1, "Running")


def test_examples():
    assert region_health([1, 2], {1: UP, 2: UP}) == Health(True, True)
    assert region_health([1, 2], {1: UP, 2: PeView("Partial", 1, "Running")}) == Health(False, True)
    assert region_health([1, 2], {1: UP, 2: PeView("Full", 1, "Pending")}) == Health(False, True)
    assert region_health([1, 2], {1: UP, 2: PeView("Full", 2, "Running")}) == Health(True, False)
    assert region_health([1, 2], {1: UP}) == Health(None, True)  # PE 2 missing
    assert region_health([1, 2], {1: PeView("None", 1, "Failed"), 2: PeView("Full", 1, None)}) \
        == Health(None, True)  # a missing pod makes it unknown, whatever else is wrong


views = st.one_of(st.none(), st.builds(PeView, st.sampled_from(["Full", "Partial", "None"]),
                                       st.integers(1, 3),
                                       st.sampled_from([None, "Running", "Pending", "Failed"])))


@given(st.dictionaries(st.integers(1, 5), views, min_size=1))
def test_property(drawn):
    pes = sorted(drawn)
    present = {pe: v for pe, v in drawn.items() if v is not None}
    health = region_health(pes, present)
    missing = any(v is None or v.pod_phase is None for v in drawn.values())
    assert (health.healthy is None) == missing
    if not missing:
        assert health.healthy == all(v.connectivity == "Full" and v.pod_phase == "Running"
                                     for v in present.values())
    assert health.clean_start == all(v.launch_count <= 1 for v in present.values())


def test_a_relaunch_between_two_looks_is_reported_once():
    """The operator may never see a relaunched PE down (its new pod Running and Full before the
    next look): the moved launch count is what tells it the PE's state is gone."""
    seen = Relaunches()
    assert not seen.moved(0, {1: UP, 2: UP})                            # first look
    assert not seen.moved(0, {1: UP, 2: UP})
    assert seen.moved(0, {1: UP, 2: PeView("Full", 2, "Running")})      # PE 2 relaunched meanwhile
    assert not seen.moved(0, {1: UP, 2: PeView("Full", 2, "Running")})  # reported once
    assert not seen.moved(1, {2: PeView("Full", 2, "Running")})         # regions apart
    assert not seen.moved(0, {1: UP, 2: PeView("Full", 2, "Running"), 3: UP})  # a new member is no relaunch
