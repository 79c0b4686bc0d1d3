"""Label and field selectors, parsed once per request and matched against plain object dicts.

Label selectors: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`, comma separated
(all must hold). Field selectors: `f=v`, `f==v`, `f!=v` on the fields a resource allows
(`metadata.name`, `metadata.namespace`, `spec.nodeName`, `spec.schedulerName`, `status.phase`, ...);
an unknown field label is a 400, as on a real apiserver.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from .errors import BadRequest

Matcher = Callable[[Mapping[str, Any]], bool]

_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_SET_OP = re.compile(r"^\s*(!?)\s*([^\s!=()]+)\s*(?:(in|notin)\s*\(([^)]*)\))?\s*$")


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _check_key(key: str, text: str) -> str:
    if not _LABEL_KEY.match(key):
        raise BadRequest(f"unable to parse requirement: invalid label key {key!r} in selector {text!r}")
    return key


def parse_label_selector(text: str | None) -> Matcher | None:
    """A matcher on `metadata.labels`, or None for an empty selector (matches everything)."""
    if not text or not text.strip():
        return None
    reqs: list[Callable[[Mapping[str, str]], bool]] = []
    for part in _split_top(text):
        op = next((o for o in ("!=", "==", "=") if o in part and "(" not in part), None)
        if op is not None:
            key, _, value = part.partition(op)
            key, value = _check_key(key.strip(), text), value.strip()
            if op == "!=":
                reqs.append(lambda labels, k=key, v=value: labels.get(k) != v)
            else:
                reqs.append(lambda labels, k=key, v=value: labels.get(k) == v)
        else:
            match = _SET_OP.match(part)
            if not match:
                raise BadRequest(f"unable to parse requirement: {part!r}")
            neg, key, setop, values = match.groups()
            key = _check_key(key, text)
            if setop:
                if neg:
                    raise BadRequest(f"unable to parse requirement: {part!r}")
                vals = frozenset(v.strip() for v in values.split(",") if v.strip())
                if setop == "in":
                    reqs.append(lambda labels, k=key, vs=vals: labels.get(k) in vs)
                else:
                    reqs.append(lambda labels, k=key, vs=vals: labels.get(k) not in vs)
            elif neg:
                reqs.append(lambda labels, k=key: k not in labels)
            else:
                reqs.append(lambda labels, k=key: k in labels)

    def matches(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(req(labels) for req in reqs)

    return matches


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string a field selector compares: missing -> "", booleans lower-case like Go."""
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
        if cur is None:
            return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def parse_field_selector(text: str | None, allowed: frozenset[str], kind: str) -> Matcher | None:
    """A matcher on the allowed fields of a resource, or None for an empty selector."""
    if not text or not text.strip():
        return None
    reqs: list[tuple[str, bool, str]] = []
    for part in _split_top(text):
        for op in ("!=", "==", "="):
            if op in part:
                field, _, value = part.partition(op)
                field = field.strip()
                if field not in allowed:
                    raise BadRequest(f'field label not supported: {field}')
                reqs.append((field, op == "!=", value.strip()))
                break
        else:
            raise BadRequest(f"invalid selector: '{text}'; can't understand '{part}'")

    def matches(obj: Mapping[str, Any]) -> bool:
        for field, negate, value in reqs:
            if (field_value(obj, field) == value) == negate:
                return False
        return True

    return matches
