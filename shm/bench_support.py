"""The seed's "normal" event mix, for `ykshm bench ring|web` and the shm tests.

Per application of 100 pods (207 events): APP ADD DETAILS_NONE; APP SET APP_NEW, APP_ACCEPTED,
APP_STARTING; per pod APP ADD APP_REQUEST (referenceID = the pod's UUID) and APP ADD APP_ALLOC
(referenceID = a new allocation UUID), both with a {memory, vcore, pods} resource; APP SET
APP_RUNNING after the first pod; APP SET APP_COMPLETING, APP_COMPLETED.  objectID is
spark-app-NNNNNN.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from .events import EventChangeDetail, EventChangeType, EventRecordType

__all__ = ["PODS_PER_APP", "EVENTS_PER_APP", "seed_mix"]

PODS_PER_APP = 100
EVENTS_PER_APP = 7 + 2 * PODS_PER_APP  # 207

_APP, _SET, _ADD = int(EventRecordType.APP), int(EventChangeType.SET), int(EventChangeType.ADD)
_REQ = int(EventChangeDetail.APP_REQUEST)
_ALLOC = int(EventChangeDetail.APP_ALLOC)
_NONE = int(EventChangeDetail.DETAILS_NONE)
_RUNNING = int(EventChangeDetail.APP_RUNNING)
_APP_START = tuple(int(d) for d in (EventChangeDetail.APP_NEW, EventChangeDetail.APP_ACCEPTED,
                                    EventChangeDetail.APP_STARTING))
_APP_END = tuple(int(d) for d in (EventChangeDetail.APP_COMPLETING,
                                  EventChangeDetail.APP_COMPLETED))
_GIB = 1 << 30


class _Uuids:
    """Random version-4 UUID strings, faster than uuid.uuid4() (the bench needs ~9M)."""

    def __init__(self, seed: int) -> None:
        self._bits = random.Random(seed).getrandbits

    def __call__(self) -> str:
        h = f"{self._bits(128):032x}"
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:32]}"


def seed_mix(n: int, seed: int = 7) -> Iterator[tuple]:
    """n publish argument tuples (type, change_type, change_detail, object_id, reference_id,
    message, resource) of the seed's normal mix, in `RingWriter.publish` positional order.

    No timestamp: like the engine, the caller lets the ring stamp each event with the current
    time.  The UUIDs come from `seed`, so a mix is reproducible.
    """
    uuids = _Uuids(seed)
    made = 0
    app = 0
    while made < n:
        app_id = f"spark-app-{app:06d}"
        resource = {"memory": (1 + app % 8) * _GIB, "vcore": 500 * (1 + app % 4), "pods": 1}
        events = [(_APP, _ADD, _NONE, app_id, "", "", None)]
        events += [(_APP, _SET, d, app_id, "", "", None) for d in _APP_START]
        for pod in range(PODS_PER_APP):
            events.append((_APP, _ADD, _REQ, app_id, uuids(), "", resource))
            events.append((_APP, _ADD, _ALLOC, app_id, uuids(), "", resource))
            if pod == 0:
                events.append((_APP, _SET, _RUNNING, app_id, "", "", None))
        events += [(_APP, _SET, d, app_id, "", "", None) for d in _APP_END]
        yield from events[: n - made]
        made += len(events)
        app += 1
