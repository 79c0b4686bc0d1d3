"""Verification of a ring: every invariant of the layout checked in C (`ykr_verify`).

Sequence numbers encode the retained ids, every refcount equals the references from retained
records and the writer's pins (no leaked entries), hash chains hold exactly the live entries, the
entry free list and the per-class arena free lists are consistent, and live + free blocks tile
the used arena without overlap.  With a live writer the check races it: a caveat says so and
violations may be transient.  `RingReader.verify` and `shm.verify` are the entry points.
"""

from __future__ import annotations

from ._ringext import ffi, lib

__all__ = ["VerifyReport", "check"]


class VerifyReport(list):
    """verify()'s result: a list of violation strings (empty = consistent), plus context.

    The list stops at verify's `max_lines` with a last line "... and K more violations";
    `total` counts every violation found.
    """

    def __init__(self, violations, records: int, strings: int, caveats: list[str],
                 total: int) -> None:
        super().__init__(violations)
        self.records = records
        self.strings = strings
        self.caveats = caveats
        self.total = total

    @property
    def violations(self) -> list[str]:
        return list(self)

    @property
    def ok(self) -> bool:
        return not self


def check(view, hdr, max_lines: int, caveats: list[str], records: int) -> VerifyReport:
    """Run ykr_verify over a mapped events segment (`view`, `hdr`), at most `max_lines` lines."""
    counts = ffi.new("uint32_t[]", int(hdr.entries_capacity))
    bitmap = ffi.new("uint8_t[]", int(hdr.arena_capacity) // 16 // 8 + 1)
    out = ffi.new("char[]", 200 * (max_lines + 1))
    n = lib.ykr_verify(view, counts, bitmap, out, len(out))
    text = ffi.string(out).decode("utf-8", "replace")
    lines = [ln for ln in text.split("\n") if ln]
    if n > len(lines):
        lines.append(f"... and {n - len(lines)} more violations")
    return VerifyReport(lines, records, int(hdr.entries_live), caveats, n)
