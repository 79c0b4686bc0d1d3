"""The cyclic garbage collector paused while a burst builds a large, long-lived structure.

Why: building ~10^5-10^6 container objects that all survive (an XML tree, the model parsed from it,
the documents rendered from the model) makes CPython run a full collection every time the
surviving objects grow by a quarter, each one walking everything built so far. For a
10,000-operator ADL that is 5 full collections and ~30 % of parse + fuse + AADLs (measured with
`gc.callbacks`, `bench.streams_fusion`). Paused, the new objects are examined once, by the first
young collection after the burst. Memory is still freed by reference counting meanwhile; only
cycles wait.

Safe with threads: the collector is re-enabled only by the outermost pause that disabled it, so
overlapping pauses (a worker thread parsing while the event loop renders) can end a pause early
(a cost, never a leak) but never leave the collector off.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic collection inside the block (usable as a decorator)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
