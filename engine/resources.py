"""Resources as YuniKorn counts them: a mapping of resource name to a non-negative integer.

A resource is a plain `dict[str, int]` ("memory" in bytes, "vcore" in milli-CPU, "pods", any
extended resource by its Kubernetes name). Functions here never mutate their arguments. A name
missing from a resource counts as 0, except in a *limit* (queue max, user/group maxresources), where
a missing name means "no limit on that resource" — exactly YuniKorn's semantics.

Also here, because the engine (config), the UGM and the shim (pod specs) all need it: parsing of
Kubernetes quantities ("500m", "1Gi", "2") with YuniKorn's vcore rule (cores -> milli).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import ROUND_CEILING, Decimal, InvalidOperation

Resource = dict[str, int]

_SUFFIX = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([+]?[0-9]+(?:\.[0-9]*)?|[+]?\.[0-9]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


class QuantityError(ValueError):
    """A string is not a Kubernetes quantity we accept (negative, malformed, or too precise)."""


def _decimal_quantity(text: str) -> Decimal:
    match = _QUANTITY.match(text.strip())
    if not match:
        raise QuantityError(f"invalid quantity {text!r}")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        value = Decimal(number)
    except InvalidOperation:
        raise QuantityError(f"invalid quantity {text!r}") from None
    if suffix == "m":
        return value / 1000
    return value * _SUFFIX[suffix]


def _scaled_quantity(text: str | int, scale: int) -> int:
    """A quantity times `scale` as an integer, rounded up."""
    if isinstance(text, bool):
        raise QuantityError(f"invalid quantity {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise QuantityError(f"negative quantity {text!r}")
        return text * scale
    return int((_decimal_quantity(str(text)) * scale).to_integral_value(rounding=ROUND_CEILING))


def parse_quantity(text: str | int) -> int:
    """A Kubernetes quantity as an integer count, rounded up ("1Gi" -> 1073741824, "1.5" -> 2)."""
    return _scaled_quantity(text, 1)


def parse_milli(text: str | int) -> int:
    """A CPU quantity in milli-units ("500m" -> 500, "2" -> 2000, 1 -> 1000)."""
    return _scaled_quantity(text, 1000)


def from_config(raw: Mapping[str, object] | None) -> Resource:
    """A queues.yaml resource map ({memory: 10Gi, vcore: 10}): vcore in cores -> milli."""
    result: Resource = {}
    for name, value in (raw or {}).items():
        result[str(name)] = parse_milli(value) if name == "vcore" else parse_quantity(value)  # type: ignore[arg-type]
    return result


def from_si(raw: Mapping[str, object] | None) -> Resource:
    """An SI resource {"resources": {"memory": {"value": n}}} -> {"memory": n}.

    Raises ValueError naming the resource when a value is not a non-negative integer.
    """
    if not raw:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError("resource must be an object")
    entries = raw.get("resources") or {}
    if not isinstance(entries, Mapping):
        raise ValueError("resource.resources must be an object")
    result: Resource = {}
    for name, quantity in entries.items():
        value = quantity.get("value", 0) if isinstance(quantity, Mapping) else None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"resource {name!r}: value must be a non-negative integer")
        result[str(name)] = value
    return result


def to_si(res: Mapping[str, int]) -> dict[str, dict[str, dict[str, int]]]:
    """{"memory": n} -> {"resources": {"memory": {"value": n}}} (the SI and event JSON form)."""
    return {"resources": {name: {"value": value} for name, value in res.items()}}


def add(a: Mapping[str, int], b: Mapping[str, int]) -> Resource:
    result = dict(a)
    for name, value in b.items():
        result[name] = result.get(name, 0) + value
    return result


def sub(a: Mapping[str, int], b: Mapping[str, int]) -> Resource:
    """a - b per name; may go negative (callers that must not should use sub_floor)."""
    result = dict(a)
    for name, value in b.items():
        result[name] = result.get(name, 0) - value
    return result


def sub_floor(a: Mapping[str, int], b: Mapping[str, int]) -> Resource:
    """a - b per name, never below zero."""
    return {name: max(0, value) for name, value in sub(a, b).items()}


def total(resources: Iterable[Mapping[str, int]]) -> Resource:
    result: Resource = {}
    for res in resources:
        for name, value in res.items():
            result[name] = result.get(name, 0) + value
    return result


def fits(ask: Mapping[str, int], available: Mapping[str, int]) -> bool:
    """Every requested name fits in what is available (missing in available = 0)."""
    return all(value <= available.get(name, 0) for name, value in ask.items() if value > 0)


def within_limit(usage: Mapping[str, int], limit: Mapping[str, int] | None) -> bool:
    """usage stays within a limit; a name absent from the limit is unlimited, None = no limit."""
    if not limit:
        return True
    return all(usage.get(name, 0) <= value for name, value in limit.items())


def is_zero(res: Mapping[str, int]) -> bool:
    return all(value == 0 for value in res.values())


def strip_zero(res: Mapping[str, int]) -> Resource:
    """Drop zero entries (REST and event JSON omit them)."""
    return {name: value for name, value in res.items() if value != 0}


def share(usage: Mapping[str, int], guaranteed: Mapping[str, int] | None) -> float:
    """Dominant share of usage against guaranteed (fair sorting); 0 names in guaranteed ignored."""
    if not guaranteed:
        return 0.0
    shares = [usage.get(name, 0) / value for name, value in guaranteed.items() if value > 0]
    return max(shares, default=0.0)
