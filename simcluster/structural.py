"""Structural OpenAPI v3 schemas of CustomResourceDefinitions: pruning, defaulting, validation.

The apiextensions-apiserver handles a custom resource's body in this order, and so do we:

1. **prune**: fields the schema does not declare are dropped, except below
   `x-kubernetes-preserve-unknown-fields: true`; the dropped paths are what `?fieldValidation=Strict`
   reports (400 `strict decoding error: unknown field "spec.foo"`) and `Warn` turns into warnings.
   A `null` for a field that is not `nullable` and has a `default` is dropped too (then defaulted).
2. **default**: a missing property with a `default` gets a copy of it, top-down, so the defaults of
   nested properties apply inside a defaulted object; defaults apply only where the parent exists.
3. **validate**: type, `x-kubernetes-int-or-string`, `nullable`, `enum`, `required`, `minimum`/
   `maximum` (and the exclusive forms), `minLength`/`maxLength`, `pattern`, `minItems`/`maxItems`;
   every violation is a cause `(reason, field path, message)` worded as the apiserver's
   (`spec.width: Invalid value: 0: spec.width in body should be greater than or equal to 1`).

`apiVersion`, `kind` and `metadata` at the root are the apiserver's, not the schema's: never pruned
here (ObjectMeta has its own rules in `objects` and `schema`).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any

Schema = Mapping[str, Any]
Cause = tuple[str, str, str]
_ROOT_OWN = ("apiVersion", "kind", "metadata")
_PRESERVE = "x-kubernetes-preserve-unknown-fields"
_INT_OR_STRING = "x-kubernetes-int-or-string"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _child(schema: Schema, key: str) -> Schema | None:
    """The schema of property `key` of an object, or None when the key is unknown."""
    props = schema.get("properties")
    if isinstance(props, Mapping) and key in props:
        return props[key]
    extra = schema.get("additionalProperties")
    if isinstance(extra, Mapping):
        return extra
    if extra is True or schema.get(_PRESERVE):
        return {_PRESERVE: True}
    return None


# -- 1. pruning ---------------------------------------------------------------------------------

def prune(schema: Schema, value: Any, unknown: list[str] | None = None, path: str = "") -> Any:
    """A copy of `value` without the fields `schema` does not declare; their paths go to `unknown`."""
    found = unknown if unknown is not None else []
    if schema.get(_INT_OR_STRING) or schema.get("x-kubernetes-embedded-resource"):
        return value
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not path and key in _ROOT_OWN:
                out[key] = item
                continue
            sub = _child(schema, key)
            if sub is None:
                found.append(_join(path, key))
                continue
            if item is None and not sub.get("nullable") and "default" in sub:
                continue  # dropped, then defaulted
            out[key] = prune(sub, item, found, _join(path, key))
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [prune(schema["items"], item, found, f"{path}[{i}]") for i, item in enumerate(value)]
    return value


# -- 2. defaulting ------------------------------------------------------------------------------

def apply_defaults(schema: Schema, value: Any) -> Any:
    """Fill missing properties that declare a `default`, top-down, in place; returns `value`."""
    if isinstance(value, dict):
        props = schema.get("properties")
        if isinstance(props, Mapping):
            for key, sub in props.items():
                if key not in value and isinstance(sub, Mapping) and "default" in sub:
                    value[key] = copy.deepcopy(sub["default"])
        for key, item in value.items():
            sub = _child(schema, key)
            if sub is not None:
                apply_defaults(sub, item)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for item in value:
            apply_defaults(schema["items"], item)
    return value


# -- 3. validation ------------------------------------------------------------------------------

def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _type_ok(expected: str, actual: str) -> bool:
    return expected == actual or (expected == "number" and actual == "integer")


def _shown(value: Any) -> str:
    """A value as the apiserver prints it in a cause: numbers bare, everything else JSON."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return json.dumps(value)
    return json.dumps(value, separators=(",", ":"))


def _invalid(path: str, value: Any, why: str) -> Cause:
    return ("FieldValueInvalid", path, f"Invalid value: {_shown(value)}: {why}")


def _search(pattern: str, value: str) -> bool:
    """A pattern the CRD author got wrong matches nothing rather than failing the request."""
    try:
        return re.search(pattern, value) is not None
    except re.error:
        return False


def _bounds(schema: Schema, value: Any, path: str, causes: list[Cause]) -> None:
    where = f"{path} in body"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        lo, hi = schema.get("minimum"), schema.get("maximum")
        if lo is not None and (value <= lo if schema.get("exclusiveMinimum") else value < lo):
            op = "greater than" if schema.get("exclusiveMinimum") else "greater than or equal to"
            causes.append(_invalid(path, value, f"{where} should be {op} {_shown(lo)}"))
        if hi is not None and (value >= hi if schema.get("exclusiveMaximum") else value > hi):
            op = "less than" if schema.get("exclusiveMaximum") else "less than or equal to"
            causes.append(_invalid(path, value, f"{where} should be {op} {_shown(hi)}"))
    elif isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            causes.append(_invalid(path, value, f"{where} should be at least {schema['minLength']} chars long"))
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            causes.append(("FieldValueTooLong", path, f"Too long: may not be more than {schema['maxLength']} bytes"))
        if "pattern" in schema and not _search(str(schema["pattern"]), value):
            causes.append(_invalid(path, value, f"{where} should match '{schema['pattern']}'"))
    elif isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            causes.append(_invalid(path, value, f"{where} should have at least {schema['minItems']} items"))
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            causes.append(("FieldValueTooMany", path, f"Too many: {len(value)}: must have at most "
                                                     f"{schema['maxItems']} items"))


def validate(schema: Schema, value: Any, path: str = "", causes: list[Cause] | None = None) -> list[Cause]:
    """Every violation of `schema` by `value` (already pruned and defaulted), as causes."""
    out = causes if causes is not None else []
    actual = _json_type(value)
    if value is None:
        if not schema.get("nullable") and schema.get("type"):
            out.append(("FieldValueTypeInvalid", path, f'Invalid value: "null": {path} in body must be of type '
                                                       f'{schema["type"]}: "null"'))
        return out
    if schema.get(_INT_OR_STRING):
        if actual not in ("integer", "string"):
            out.append(("FieldValueTypeInvalid", path, f'Invalid value: "{actual}": {path} in body must be of type '
                                                       f'integer,string: "{actual}"'))
        return out
    expected = schema.get("type")
    if expected and not _type_ok(expected, actual):
        out.append(("FieldValueTypeInvalid", path, f'Invalid value: "{actual}": {path} in body must be of type '
                                                   f'{expected}: "{actual}"'))
        return out
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        supported = ", ".join(_shown(v) for v in enum)
        out.append(("FieldValueNotSupported", path, f"Unsupported value: {_shown(value)}: supported values: {supported}"))
    _bounds(schema, value, path, out)
    if isinstance(value, dict):
        for key in schema.get("required") or ():
            if key not in value:
                out.append(("FieldValueRequired", _join(path, key), "Required value"))
        for key, item in value.items():
            if not path and key in _ROOT_OWN:
                continue
            sub = _child(schema, key)
            if sub is not None:
                validate(sub, item, _join(path, key), out)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            validate(schema["items"], item, f"{path}[{i}]", out)
    return out


def at_path(schema: Schema, dotted: str) -> Schema | None:
    """The sub-schema at `.spec.width` (object properties only), for descriptions and scale paths."""
    node: Schema | None = schema
    for part in [p for p in dotted.split(".") if p]:
        if node is None:
            return None
        node = _child(node, part)
    return node
