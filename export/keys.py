"""Where an instance lives in Redis, and how an event id becomes a stream ID.

Every key of instance NAME carries the hash tag `{NAME}`, so in a Redis Cluster they all sit in one
slot on one master (a pipeline or a Lua script may touch several of them):

    ykshm:{NAME}:events      the stream: one entry per event, field `j` = the event's REST JSON
                             (the bytes /ws/v1/events/batch serves); a gap entry has field `gap`
    ykshm:{NAME}:instances   hash: `uuid:<InstanceUUID>` -> generation, `gen:<G>` -> InstanceUUID,
                             `top` -> the highest generation handed out
    ykshm:{NAME}:state       hash: the engine's state snapshot `doc` with its `generation`
    ykshm:{NAME}:exporter    hash: the exporter's status (what `ykshm status` shows, for replicas)

Stream IDs are `<generation>-<event id>`. Event ids restart at 0 with each engine instance; the
generation (1, 2, ... per instance, in the order the exporter met them) keeps the stream
monotonic across engine restarts, and an explicit ID makes Redis itself refuse an event sent twice
("equal or smaller than the target stream top item").
"""

from __future__ import annotations

import dataclasses

STREAM_FIELD = b"j"
GAP_FIELD = b"gap"
MAX_SEQ = (1 << 64) - 1


@dataclasses.dataclass(frozen=True)
class Keys:
    """The Redis keys of one ykshm instance."""

    events: str
    instances: str
    state: str
    exporter: str

    @staticmethod
    def hash_tag_safe(name: str) -> bool:
        """Whether `{NAME}` is NAME's hash tag: a brace in it would end the tag early or leave
        it empty (then each key hashes whole, and the keys of one instance land in several
        slots of a Cluster, where a pipeline or a script over them is refused)."""
        return "{" not in name and "}" not in name

    @classmethod
    def for_instance(cls, name: str) -> "Keys":
        base = f"ykshm:{{{name}}}:"
        return cls(base + "events", base + "instances", base + "state", base + "exporter")


def stream_id(generation: int, event_id: int) -> bytes:
    return b"%d-%d" % (generation, event_id)


def parse_stream_id(raw: bytes | str) -> tuple[int, int]:
    """(generation, event id) of a stream ID such as b"3-1041"."""
    text = raw.decode("ascii") if isinstance(raw, bytes) else raw
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def gap_value(first: int, last: int) -> bytes:
    """The `gap` field of a gap entry: the lost event ids, inclusive."""
    return b"%d-%d" % (first, last)


def parse_gap(raw: bytes) -> tuple[int, int]:
    first, _, last = raw.partition(b"-")
    return int(first), int(last)
