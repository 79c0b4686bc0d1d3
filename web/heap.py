"""A worker keeps the heap it freed: big answers reuse pages instead of faulting in fresh ones.

An events batch of 10,000 is ~2.8 MB of JSON, copied once or twice on its way out (a piece of the
answer, h11's framing, gzip's output). glibc gives such blocks back to the kernel when they are
freed (an mmap'd block is unmapped; the top of the heap is trimmed past M_TRIM_THRESHOLD), so the
next answer faults every page in again and the kernel zeroes it: measured 490 minor faults per
`count=10000` answer (1,320 before the answer was rendered in pieces), ~1 ms of a worker's CPU
on these VMs, more than the copies themselves. With the thresholds below a worker keeps up to
TRIM_BYTES of freed heap mapped and serves such blocks from the heap: 0 faults per answer after
the first. The price: a worker's RSS stays at its high-water mark (bounded by the largest answers
in flight plus TRIM_BYTES) instead of shrinking between big answers.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("ykshm.web")

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

MMAP_BYTES = 32 << 20
"""Blocks smaller than this come from the heap (glibc's own ceiling for its adaptive threshold)."""

TRIM_BYTES = 64 << 20
"""Freed heap kept mapped at most, per worker."""


def keep_freed_heap() -> bool:
    """Set the thresholds (glibc only; elsewhere nothing changes). True when both were set."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    ok = bool(mallopt(M_MMAP_THRESHOLD, MMAP_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_BYTES))
    if not ok:
        log.debug("web: mallopt refused the heap thresholds; big answers fault pages in")
    return ok
