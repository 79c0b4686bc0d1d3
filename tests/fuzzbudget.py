"""How many examples a Hypothesis test runs: its CI count by default, its full count with
YKSHM_FULL_FUZZ=1 (e.g. a nightly run or before a release).

Only the tests whose full count cost seconds of the serial CI run take a CI count; each names
both counts at its `@settings`, so what CI checks and what a full run checks are read in one place.
"""

from __future__ import annotations

import os

FULL = os.environ.get("YKSHM_FULL_FUZZ", "") == "1"


def examples(full: int, ci: int) -> int:
    """`full` under YKSHM_FULL_FUZZ=1, else `ci` (which is smaller)."""
    assert ci <= full
    return full if FULL else ci
