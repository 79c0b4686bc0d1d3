"""Retention of the stream: `--maxlen N` (approximate, on every XADD) and `--max-age SECONDS`.

Stream IDs are (generation, event id), not times, so `--max-age` cannot use XTRIM MINID with a
clock value directly. Every TRIM_SECONDS the exporter finds the oldest entry whose event time
(`timestampNano` in its JSON, `ts` in a gap entry) is within the age by binary search over the
stream IDs (XRANGE id + COUNT 1 per probe: ~30 round trips inside one generation, more across
generations, a few ms a second), then XTRIM MINID ~ that ID. Approximate trimming (`~`) lets Redis
free whole macro nodes only, which keeps XADD cheap; a few hundred entries past the limit remain.
"""

from __future__ import annotations

import time

import orjson

from .keys import MAX_SEQ, STREAM_FIELD, parse_stream_id

TRIM_SECONDS = 1.0


def xadd_head(key: bytes, maxlen: int, fields: int) -> bytes:
    """The RESP prefix of an XADD of `fields` field/value pairs: array length, command, key, trim.
    The ID and the pairs follow."""
    from .redisconn import bulk

    args = [b"XADD", key]
    if maxlen > 0:
        args += [b"MAXLEN", b"~", b"%d" % maxlen]
    return b"*%d\r\n" % (len(args) + 1 + 2 * fields) + b"".join(bulk(a) for a in args)


def _entry_nano(fields: dict) -> int:
    if STREAM_FIELD in fields:
        return int(orjson.loads(fields[STREAM_FIELD]).get("timestampNano", 0))
    if b"ts" in fields:
        return int(fields[b"ts"])
    return 0


def _as_int(sid: tuple[int, int]) -> int:
    return (sid[0] << 64) | sid[1]


def _as_id(value: int) -> str:
    return f"{value >> 64}-{value & MAX_SEQ}"


def _first_at_or_after(node, key: str, value: int):
    got = node.xrange(key, min=_as_id(value), count=1)
    if not got:
        return None
    sid, fields = got[0]
    return _as_int(parse_stream_id(sid)), _entry_nano(fields)


def oldest_to_keep(node, key: str, cutoff_nano: int) -> str | None:
    """The ID of the first entry whose event time is >= cutoff (None: nothing is older)."""
    first = _first_at_or_after(node, key, 0)
    if first is None or first[1] >= cutoff_nano:
        return None
    last = node.xrevrange(key, count=1)
    lo = first[0]
    hi = _as_int(parse_stream_id(last[0][0]))
    if _entry_nano(last[0][1]) < cutoff_nano:
        return _as_id(hi)        # everything is older: keep only the newest entry
    # the answer is the smallest entry id in (lo, hi] that is not older; search the id space
    low, high = lo + 1, hi
    while low < high:
        mid = (low + high) // 2
        probe = _first_at_or_after(node, key, mid)
        if probe is None or probe[0] >= hi:
            high = mid
        elif probe[1] < cutoff_nano:
            low = probe[0] + 1
        else:
            hi = probe[0]
            high = mid
    return _as_id(hi)


class Retention:
    """Applies --max-age every TRIM_SECONDS (--maxlen rides on each XADD)."""

    def __init__(self, key: str, max_age: float) -> None:
        self.key = key
        self.max_age = max_age
        self._next_at = 0.0
        self.trimmed = 0

    def maybe_trim(self, node, now: float) -> None:
        if self.max_age <= 0 or now < self._next_at:
            return
        self._next_at = now + TRIM_SECONDS
        keep = oldest_to_keep(node, self.key, time.time_ns() - int(self.max_age * 1e9))
        if keep is not None:
            self.trimmed += int(node.execute_command("XTRIM", self.key, "MINID", "~", keep))


