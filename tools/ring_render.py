"""Human-readable rendering of events and numbers for `ykshm ring` and `ykshm status`."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from shm.events import EventChangeDetail, EventChangeType, EventRecordType


def _enum_name(enum_cls: type, value: int) -> str:
    try:
        return enum_cls(value).name
    except ValueError:
        return str(value)


def format_timestamp(nano: int) -> str:
    """UTC ISO 8601 with nanoseconds: 2026-11-22T03:16:12.123456789Z."""
    if nano <= 0:
        return "-"
    seconds, frac = divmod(nano, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{frac:09d}Z"


def format_resource(resource: Mapping[str, int] | None) -> str:
    if not resource:
        return "-"
    return ",".join(f"{k}={v}" for k, v in resource.items())


def format_event(event) -> str:
    """One line: id, time, type, change type, change detail, objectID, referenceID, resource,
    message (quoted, so an empty or spaced message stays one field)."""
    fields = [
        str(event.id),
        format_timestamp(event.timestamp_nano),
        _enum_name(EventRecordType, event.type),
        _enum_name(EventChangeType, event.change_type),
        _enum_name(EventChangeDetail, event.change_detail),
        event.object_id or "-",
        event.reference_id or "-",
        format_resource(event.resource),
    ]
    line = "  ".join(fields)
    if event.message:
        line += "  " + repr(event.message)
    return line


def format_bytes(n: int | float) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"  # pragma: no cover


def format_duration(seconds: float) -> str:
    if seconds < 0:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, sec = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d{hours:02d}h{minutes:02d}m"
    if hours:
        return f"{hours}h{minutes:02d}m{sec:02d}s"
    return f"{minutes}m{sec:02d}s"


def table(rows: Sequence[Sequence[str]], header: Sequence[str] | None = None) -> str:
    """Left-aligned columns separated by two spaces."""
    all_rows = ([list(header)] if header else []) + [list(map(str, r)) for r in rows]
    if not all_rows:
        return ""
    widths = [max(len(r[i]) for r in all_rows if i < len(r)) for i in range(max(map(len, all_rows)))]
    lines = []
    for row in all_rows:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def key_values(pairs: Sequence[tuple[str, str]]) -> str:
    """`key:   value` lines, keys padded to one width."""
    width = max((len(k) for k, _ in pairs), default=0) + 1
    return "".join(f"{(k + ':').ljust(width)}  {v}\n" for k, v in pairs)
