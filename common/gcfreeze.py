"""Full garbage collections that skip what survived the previous one.

The processes that cache Kubernetes objects (sim-cluster's store, an informer's, the bench's
watcher) hold hundreds of thousands of JSON dicts and lists that never form cycles, so
reference counting frees them, yet CPython's cyclic collector walks all of them in every full
(generation 2) collection. In `ykshm bench e2e` (1,000 nodes, 5,000 pods) that was 0.85 s of
sim-cluster's 7.3 s of CPU and 0.41 s of the shim's 3.9 s (gc.callbacks timing, issue 25).

`install()` makes every full collection end with `gc.freeze()`: its survivors move to the
permanent generation, so the next full collection walks only what was allocated since. Cyclic
garbage among frozen objects would never be found, so every `WHOLE_HEAP_EVERY`-th full collection
first thaws everything (`gc.unfreeze()`) and walks the whole heap, as CPython does by default.
Reference counting is untouched: a frozen object is freed as soon as nothing refers to it.
"""

from __future__ import annotations

import gc
from typing import Any

WHOLE_HEAP_EVERY = 20
"""One full collection in this many walks everything (cycles among old objects are found)."""


class _FreezeAfterFull:
    """The gc callback: freeze after a full collection, thaw before every n-th one."""

    def __init__(self, whole_heap_every: int) -> None:
        self.whole_heap_every = whole_heap_every
        self.full = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self.full += 1
            if self.full % self.whole_heap_every == 0:
                gc.unfreeze()   # this collection walks everything (the thawed join generation 2)
        elif phase == "stop":
            gc.freeze()


def install(whole_heap_every: int = WHOLE_HEAP_EVERY) -> None:
    """Freeze after every full collection in this process (once; later calls do nothing)."""
    if not any(isinstance(cb, _FreezeAfterFull) for cb in gc.callbacks):
        gc.callbacks.append(_FreezeAfterFull(whole_heap_every))


def installed() -> bool:
    return any(isinstance(cb, _FreezeAfterFull) for cb in gc.callbacks)
