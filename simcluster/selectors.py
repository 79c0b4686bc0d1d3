r"""Label and field selectors, parsed once per request and matched against plain object dicts.

Label selectors: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`, comma separated
(all must hold). Field selectors: `f=v`, `f==v`, `f!=v` on the fields a resource allows
(`metadata.name`, `metadata.namespace`, `spec.nodeName`, `spec.schedulerName`, `status.phase`, ...);
an unknown field label is a 400, as on a real apiserver.

Field selectors have kube's grammar (apimachinery `fields.ParseSelector`), in one parser
(`field_requirements`) that both the authorizer (`requestinfo`: the name a `resourceNames` rule
sees) and the list filter use, so the two can never read one selector two ways (review 2026-11-28,
N6: `metadata.name!=(,metadata.name=allowed,)` was one term to the filter, and `allowed` to the
authorizer). Terms are split on commas not escaped by `\`; a term's operator is the first unescaped
`!=`, `==` or `=`; in a value `\\`, `\,` and `\=` are the only escapes and an unescaped `,` or `=`
is an error (400). No parentheses, no trimming: `metadata.name=(x` is the name `(x`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
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


@dataclass(frozen=True)
class FieldRequirement:
    """One term of a field selector: `field` equals (or, negated, differs from) `value`."""

    field: str
    negate: bool
    value: str


def _split_terms(text: str) -> list[str]:
    """Split on commas that no backslash escapes (the escapes stay for the value's unescaping)."""
    terms, start, escaped = [], 0, False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def _split_term(term: str, text: str) -> FieldRequirement:
    escaped = False
    for i, ch in enumerate(term):
        if escaped:
            escaped = False
            continue
        if ch == "\\":
            escaped = True
            continue
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return FieldRequirement(term[:i], op == "!=", _unescape(term[i + len(op):], text))
    raise BadRequest(f"invalid selector: '{text}'; can't understand '{term}'")


def _unescape(value: str, text: str) -> str:
    out, escaped = [], False
    for ch in value:
        if escaped:
            if ch not in "\\,=":
                raise BadRequest(f"invalid field selector: '{text}': invalid escape sequence: \\{ch}")
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in ",=":
            raise BadRequest(f"invalid field selector: '{text}': unescaped {ch!r} in a value")
        else:
            out.append(ch)
    if escaped:
        raise BadRequest(f"invalid field selector: '{text}': a value ends with a lone backslash")
    return "".join(out)


def field_requirements(text: str | None) -> list[FieldRequirement]:
    """A field selector's terms (see the module text); BadRequest when it does not parse."""
    return [_split_term(term, text or "") for term in _split_terms(text or "") if term]


def exact_name(reqs: list[FieldRequirement]) -> str:
    """The name a list/watch is limited to: the value of its one `metadata.name=`/`==` term, else ""
    (none, several, or only `!=`): the request is then for every name, and a `resourceNames` rule
    does not cover it. kube-apiserver takes the first such term (its filter ANDs the rest); one
    exactly is the same for every selector that can match anything."""
    names = [r.value for r in reqs if r.field == "metadata.name" and not r.negate]
    return names[0] if len(names) == 1 else ""


def parse_field_selector(text: str | None, allowed: frozenset[str], kind: str) -> Matcher | None:
    """A matcher on the allowed fields of a resource, or None for an empty selector."""
    reqs = field_requirements(text)
    if not reqs:
        return None
    for req in reqs:
        if req.field not in allowed:
            raise BadRequest(f'field label not supported: {req.field}')

    def matches(obj: Mapping[str, Any]) -> bool:
        return all((field_value(obj, r.field) == r.value) != r.negate for r in reqs)

    return matches
