"""One way to declare a validated config section: a msgspec Struct whose fields carry Go's rules.

A section is a frozen `msgspec.Struct`; its field names give the YAML keys (`rename`, or
`msgspec.field(name=...)`), its defaults the defaults. A field typed `GoBool`, `Uint32` or
`GoDuration` parses as YuniKorn's Go code would (`strconv.ParseBool`, `strconv.ParseUint(s, 10,
32)`, `time.ParseDuration`), so a value YuniKorn accepts is accepted and nothing else is; any other
field must already have its type (msgspec checks it) or carry a parser of its own
(`Annotated[T, parsed_by(fn)]`, `fn(key, value) -> T`). `parse_section` refuses unknown keys,
naming them: a typo must not silently fall back to a default.

Errors: `ConfigError` carries the key and the value; `str(err)` is the one line a user sees
(`config: service.event.maxStreams: invalid value 'x': not an unsigned 32-bit integer`).
The hand-written parts of queues.yaml (queues, limits, placement rules) use the same helpers
(`mapping`, `seq`, `check_keys`) and value rules.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

import msgspec
import msgspec.inspect as mi


class ConfigError(Exception):
    """The configuration file is unreadable or a key has a value we do not accept."""

    def __init__(self, key: str, value: object, reason: str) -> None:
        super().__init__(f"config: {key}: invalid value {value!r}: {reason}")
        self.key = key
        self.value = value
        self.reason = reason


# --- Go's value rules ---------------------------------------------------------------------------

_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def parse_bool(key: str, value: object) -> bool:
    """Accept exactly what Go's strconv.ParseBool accepts (and YAML booleans)."""
    if isinstance(value, bool):
        return value
    text = str(value)
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(key, value, "not a boolean (use true/false, 1/0, t/f)")


def parse_uint32(key: str, value: object) -> int:
    """Accept exactly what Go's strconv.ParseUint(s, 10, 32) accepts: decimal digits, < 2**32."""
    if isinstance(value, bool):
        raise ConfigError(key, value, "not an unsigned 32-bit integer")
    text = str(value)
    if not text.isascii() or not text.isdigit():
        raise ConfigError(key, value, "not an unsigned 32-bit integer")
    number = int(text)
    if number >= 2**32:
        raise ConfigError(key, value, "out of range for an unsigned 32-bit integer")
    return number


def parse_int32(key: str, value: object) -> int:
    """A signed 32-bit decimal integer, as Go's strconv.ParseInt(s, 10, 32)."""
    text = str(value) if not isinstance(value, bool) else ""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits.isascii() or not digits.isdigit():
        raise ConfigError(key, value, "not a 32-bit integer")
    number = int(text)
    if not -2**31 <= number < 2**31:
        raise ConfigError(key, value, "out of range for a 32-bit integer")
    return number


_DURATION_UNITS = {"ns": 1, "us": 1_000, "\u00b5s": 1_000, "\u03bcs": 1_000, "ms": 1_000_000,
                   "s": 1_000_000_000, "m": 60_000_000_000, "h": 3_600_000_000_000}
_DURATION_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)([a-z\u00b5\u03bc]+)")
_NOT_DURATION = "not a duration (use Go syntax: 30s, 1m30s, 1.5h)"


def parse_duration_ns(key: str, value: object) -> int:
    """A Go `time.ParseDuration` string ("30s", "1m30s", "1.5h", "0") as nanoseconds.

    Only what Go accepts is accepted (a sign, then one or more number+unit parts; units ns, us,
    ms, s, m, h; "0" alone needs no unit); anything else is a ConfigError naming key and value."""
    text = value if isinstance(value, str) else None
    if text is None or not text:
        raise ConfigError(key, value, _NOT_DURATION)
    body = text.lstrip("+-")
    sign = -1 if text.startswith("-") else 1
    if len(text) - len(body) > 1:
        raise ConfigError(key, value, _NOT_DURATION)
    if body == "0":
        return 0
    total = 0.0
    pos = 0
    while pos < len(body):
        match = _DURATION_PART.match(body, pos)
        if match is None or match.group(1) in ("", ".") or match.group(2) not in _DURATION_UNITS:
            raise ConfigError(key, value, _NOT_DURATION)
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if not body or total >= 2**63:
        raise ConfigError(key, value, _NOT_DURATION)
    return sign * int(total)


def parsed_by(parse: Callable[[str, object], Any]) -> msgspec.Meta:
    """The field's value goes through `parse(key, value)` (a ConfigError names key and value)."""
    return msgspec.Meta(extra={"parse": parse})


GoBool = Annotated[bool, parsed_by(parse_bool)]
Uint32 = Annotated[int, parsed_by(parse_uint32)]
Int32 = Annotated[int, parsed_by(parse_int32)]
GoDuration = Annotated[int, parsed_by(parse_duration_ns)]
"""Nanoseconds."""


# --- sections -----------------------------------------------------------------------------------

S = TypeVar("S", bound=msgspec.Struct)


def _fields(cls: type[msgspec.Struct]) -> dict[str, mi.Field]:
    """The section's fields by YAML key."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType), cls
    return {f.encode_name: f for f in info.fields}


def _nested(field_type: mi.Type) -> type[msgspec.Struct] | None:
    if isinstance(field_type, mi.Metadata):
        field_type = field_type.type
    return field_type.cls if isinstance(field_type, mi.StructType) else None


def parse_section(cls: type[S], key: str, raw: object) -> S:
    """The section `cls` from the mapping at `key` (None: all defaults); a nested section is
    parsed the same way under `key.field`."""
    raw = mapping(key, raw)
    fields = _fields(cls)
    values: dict[str, Any] = {}
    for name, value in raw.items():
        where = f"{key}.{name}" if key else str(name)
        field = fields.get(name)
        if field is None:
            raise ConfigError(where, value, "unknown key")
        if value is None:
            continue
        nested = _nested(field.type)
        parse = field.type.extra.get("parse") if isinstance(field.type, mi.Metadata) and \
            field.type.extra else None
        if nested is not None:
            values[field.name] = parse_section(nested, where, value)
        elif parse is not None:
            values[field.name] = parse(where, value)
        else:
            values[field.name] = _typed(cls, field, where, value)
    return cls(**values)


def _typed(cls: type[msgspec.Struct], field: mi.Field, key: str, value: object) -> Any:
    """A field without Go rules: msgspec checks the value against the field's type."""
    probe = {field.encode_name: value}
    try:
        return getattr(msgspec.convert(probe, cls), field.name)
    except msgspec.ValidationError as exc:
        reason = str(exc).split(" - at ")[0]
        raise ConfigError(key, value, reason[:1].lower() + reason[1:]) from None


# --- helpers of the hand-written parts ----------------------------------------------------------

def mapping(key: str, value: object) -> Mapping[str, Any]:
    """The mapping at `key` (None: empty)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(key, value, "must be a mapping")
    return value


def seq(key: str, value: object) -> list[Any]:
    """The list at `key` (None: empty)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(key, value, "must be a list")
    return value


def check_keys(key: str, raw: Mapping[str, Any], allowed: set[str] | frozenset[str]) -> None:
    """Refuse the first key of `raw` not in `allowed`, naming it."""
    for name in raw:
        if name not in allowed:
            raise ConfigError(f"{key}.{name}" if key else str(name), raw[name], "unknown key")


def choice(key: str, value: str | None, choices: tuple[str, ...]) -> None:
    """Refuse a value that is not one of `choices`."""
    if value is not None and value not in choices:
        raise ConfigError(key, value, f"must be one of {', '.join(choices)}")
