"""The event-history codes the partition emits, as the plain ints `EventSink.emit` takes.

Record types and change types are named here once; change details are read from
`shm.events.EventChangeDetail` where they are used (`int(EventChangeDetail.QUEUE_APP)`).
"""

from __future__ import annotations

from shm.events import EventChangeType, EventRecordType

APP = int(EventRecordType.APP)
NODE = int(EventRecordType.NODE)
QUEUE = int(EventRecordType.QUEUE)

ADD = int(EventChangeType.ADD)
REMOVE = int(EventChangeType.REMOVE)
SET = int(EventChangeType.SET)
