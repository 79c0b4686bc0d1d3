"""Resources as YuniKorn counts them: a mapping of resource name to a non-negative integer.

A resource is a plain `dict[str, int]` ("memory" in bytes, "vcore" in milli-CPU, "pods", any
extended resource by its Kubernetes name). Functions here never mutate their arguments. A name
missing from a resource counts as 0, except in a *limit* (queue max, user/group maxresources), where
a missing name means "no limit on that resource" — exactly YuniKorn's semantics.

Kubernetes quantities ("500m", "1Gi", "2") are parsed by `common.quantity`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from common.quantity import parse_milli, parse_quantity

Resource = dict[str, int]

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
    best = None  # (a loop, not max() of a list: called once per allocation)
    for name, value in guaranteed.items():
        if value > 0:
            ratio = usage.get(name, 0) / value
            if best is None or ratio > best:
                best = ratio
    return 0.0 if best is None else best
