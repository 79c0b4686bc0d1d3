"""Kubernetes quantities ("500m", "1Gi", "2") as integers, with YuniKorn's vcore rule (cores ->
milli). Pure functions, shared by the engine (config), the shim and Streams (pod specs) and
sim-cluster (validation), so none of them imports another for it.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

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
