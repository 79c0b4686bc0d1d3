"""The stream-slot count of web.segment (C-level scans) against a slot-by-slot reference."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from web.segment import WebSegment

HOSTS = ["10.0.0.1", "10.0.0.10", "0.0.0.1", "::1", "unknown", "", "h" * 41, "h" * 42, "h" * 50,
         "fe80::1%eth0", "2001:db8::ff00:42:8329"]


def _reference(seg: WebSegment, hb: bytes) -> tuple[int | None, int, int]:
    free, total, per_host = None, 0, 0
    for index, pid, _start, host in seg._iter_slots():
        if pid == 0:
            free = index if free is None else free
            continue
        total += 1
        per_host += host == hb
    return free, total, per_host


@settings(max_examples=150, deadline=None)
@given(steps=st.lists(st.tuples(st.booleans(), st.sampled_from(HOSTS)), max_size=40))
def test_slot_counts_match_a_slot_by_slot_count(steps):
    seg = WebSegment.create(f"t-{uuid.uuid4().hex[:10]}", 12)
    try:
        seg.claim_region()
        held: list[int] = []
        for take, host in steps:
            if take:
                slot = seg.acquire_stream(host, 12, 5)
                if slot is not None:
                    held.append(slot)
            elif held:
                seg.release_stream(held.pop(0))
            for name in HOSTS:
                hb = name.encode()[:42]
                assert seg._count_locked(hb) == _reference(seg, hb), name
    finally:
        seg.close()
        seg.unlink()
