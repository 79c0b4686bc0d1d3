"""The event enumerations, exactly as the event-history-tracking seed defines them.

This is the one place the numbers live: the engine emits them, the ring stores them, the web
and the tools decode them. USERGROUP (5) and its details 600-604 are ykshm's addition for
user/group usage tracking (DESIGN.md, "Events").
"""

from __future__ import annotations

import enum

MAX_MESSAGE_BYTES = 1024
"""A message longer than this (UTF-8 bytes) is cut to 1021 bytes plus "..."."""


class EventRecordType(enum.IntEnum):
    """What the objectID of an event names."""

    UNKNOWN = 0
    REQUEST = 1
    APP = 2
    NODE = 3
    QUEUE = 4
    USERGROUP = 5


class EventChangeType(enum.IntEnum):
    """What kind of change the event records."""

    NONE = 0
    SET = 1
    ADD = 2
    REMOVE = 3


class EventChangeDetail(enum.IntEnum):
    """Why the change happened; the value range says which record type it belongs to."""

    DETAILS_NONE = 0

    REQUEST_CANCEL = 100  # Request cancelled by the RM
    REQUEST_ALLOC = 101  # Request allocated
    REQUEST_TIMEOUT = 102  # Request cancelled due to timeout

    APP_ALLOC = 200  # Allocation changed
    APP_REQUEST = 201  # Request changed
    APP_REJECT = 202  # Application rejected on create
    APP_NEW = 203  # Application added with state new
    APP_ACCEPTED = 204  # State change to accepted
    APP_STARTING = 205  # State change to starting
    APP_RUNNING = 206  # State change to running
    APP_COMPLETING = 207  # State change to completing
    APP_COMPLETED = 208  # State change to completed
    APP_FAILING = 209  # State change to failing
    APP_FAILED = 210  # State change to failed
    APP_RESUMING = 211  # State change to resuming
    APP_EXPIRED = 212  # State change to expired

    NODE_DECOMISSION = 300  # Node removal
    NODE_READY = 301  # Node ready state change
    NODE_SCHEDULABLE = 302  # Node schedulable state change (cordon)
    NODE_ALLOC = 303  # Allocation changed
    NODE_CAPACITY = 304  # Capacity changed
    NODE_OCCUPIED = 305  # Occupied resource changed
    NODE_RESERVATION = 306  # Reservation/unreservation occurred

    QUEUE_CONFIG = 400  # Managed queue update or removal
    QUEUE_DYNAMIC = 401  # Dynamic queue update or removal
    QUEUE_TYPE = 402  # Queue type change
    QUEUE_MAX = 403  # Max resource changed
    QUEUE_GUARANTEED = 404  # Guaranteed resource changed
    QUEUE_APP = 405  # Application changed
    QUEUE_ALLOC = 406  # Allocation changed

    ALLOC_CANCEL = 500  # Allocation cancelled by the RM
    ALLOC_PREEMPT = 501  # Allocation preempted by the core
    ALLOC_TIMEOUT = 502  # Allocation cancelled due to timeout
    ALLOC_REPLACED = 503  # Allocation replacement (placeholder)
    ALLOC_NODEREMOVED = 504  # Allocation cancelled, node removal

    UG_USER_LIMIT = 600  # User limit configuration changed
    UG_GROUP_LIMIT = 601  # Group limit configuration changed
    UG_APP_LINK = 602  # Application linked to (or unlinked from) a user/group tracker
    UG_USER_RESOURCE = 603  # User resource usage changed
    UG_GROUP_RESOURCE = 604  # Group resource usage changed


def cut_message(message: str) -> str:
    """Cut a message to MAX_MESSAGE_BYTES of UTF-8, as the ring stores it.

    A cut never splits a UTF-8 sequence: the result is at most 1021 bytes of whole characters
    followed by "...".
    """
    raw = message.encode("utf-8")
    if len(raw) <= MAX_MESSAGE_BYTES:
        return message
    return raw[: MAX_MESSAGE_BYTES - 3].decode("utf-8", errors="ignore") + "..."
