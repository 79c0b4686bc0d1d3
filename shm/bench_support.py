"""Small helpers for `ykshm bench ring` and the shm tests: the seed's "normal" event mix.

Per application of 100 pods (207 events): APP ADD DETAILS_NONE; APP SET APP_NEW, APP_ACCEPTED,
APP_STARTING; per pod APP ADD APP_REQUEST (referenceID = pod UUID) and APP ADD APP_ALLOC
(referenceID = a new allocation UUID, resource {memory, vcore, pods}); APP SET APP_RUNNING,
APP_COMPLETING, APP_COMPLETED.  objectID is spark-app-NNNNNN.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

from .events import EventChangeDetail as D
from .events import EventChangeType as C
from .events import EventRecordType as T

__all__ = ["seed_mix", "time_publish"]

_APP, _SET, _ADD = int(T.APP), int(C.SET), int(C.ADD)


def seed_mix(n: int, pods_per_app: int = 100) -> Iterator[tuple]:
    """n publish argument tuples (type, change_type, change_detail, object_id, reference_id,
    message, resource) of the seed's normal mix."""
    made = 0
    app_no = 0
    while made < n:
        app = f"spark-app-{app_no:06d}"
        app_no += 1
        res = {"memory": (1 + app_no % 8) << 30, "vcore": 500 * (1 + app_no % 4), "pods": 1}
        evs = [(_APP, _ADD, int(D.DETAILS_NONE), app, "", "", None)]
        evs += [(_APP, _SET, int(d), app, "", "", None)
                for d in (D.APP_NEW, D.APP_ACCEPTED, D.APP_STARTING)]
        for _ in range(pods_per_app):
            evs.append((_APP, _ADD, int(D.APP_REQUEST), app, str(uuid.uuid4()), "", None))
            evs.append((_APP, _ADD, int(D.APP_ALLOC), app, str(uuid.uuid4()), "", res))
        evs += [(_APP, _SET, int(d), app, "", "", None)
                for d in (D.APP_RUNNING, D.APP_COMPLETING, D.APP_COMPLETED)]
        for e in evs[: n - made]:
            yield e
        made += len(evs)


def time_publish(writer, events, sample_every: int = 1) -> list[int]:
    """Publish `events` (tuples as seed_mix makes) one by one; returns per-call ns of every
    `sample_every`-th publish (perf_counter_ns around the call)."""
    pub = writer.publish
    ns = time.perf_counter_ns
    out = []
    for i, e in enumerate(events):
        if i % sample_every:
            pub(*e)
        else:
            t0 = ns()
            pub(*e)
            out.append(ns() - t0)
    return out
