"""A job's retry schedule: API errors back off (up to 30 s), conflicts do not.

A conflict is a write lost to a newer version of the object (another writer, or the
controller's own width change racing a pass): the next pass on the fresher cache usually
succeeds. Before conflicts had their own schedule, a few in a row during a scale pushed the job
into the error backoff and froze it for up to 25 s (an evicted PE waited that long for its
relaunch).
"""

from __future__ import annotations

from streams.controller import CONFLICT_DELAYS, RETRY_DELAYS, Retry


def test_conflicts_in_a_row_never_wait_more_than_a_second():
    retry = Retry()
    delays = [retry.next_delay(conflict=True) for _ in range(50)]
    assert max(delays) <= 1.0
    assert retry.attempts == 0                    # the error backoff did not advance


def test_errors_in_a_row_back_off_to_the_cap():
    retry = Retry()
    delays = [retry.next_delay(conflict=False) for _ in range(12)]
    assert delays[0] <= RETRY_DELAYS[0] * 1.25
    assert delays[-1] >= RETRY_DELAYS[-1] * 0.75 >= 20


def test_a_conflict_after_errors_is_still_quick():
    retry = Retry()
    for _ in range(6):
        retry.next_delay(conflict=False)
    assert retry.next_delay(conflict=True) <= CONFLICT_DELAYS[0] * 1.25
