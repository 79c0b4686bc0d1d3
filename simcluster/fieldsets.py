"""Field sets, as server-side apply's structured-merge-diff sees an object: which fields a manager
owns, in the `FieldsV1` form of `metadata.managedFields`.

A path is a tuple of path elements, each a string in FieldsV1 spelling:

- `f:name`  a field of a struct or a key of a map (`f:spec`, `f:labels`, `f:app`);
- `k:{...}` an item of an associative list, by its key fields as compact JSON with sorted keys
  (`k:{"name":"c"}`, `k:{"containerPort":80,"protocol":"TCP"}`);
- `v:json`  an item of a set list (`v:"kubernetes"`).

A set holds leaves (scalars, atomic lists and maps, empty objects) and the items of associative and
set lists (FieldsV1 marks an item that has fields below it with `.`). How a list is treated comes
from the schema: the vendored Kubernetes 1.32 schemas for the built-in kinds, a CRD's schema for a
custom resource: `x-kubernetes-list-type: map` with `x-kubernetes-list-map-keys`, `set`, or `atomic`
(also the default: a list the schema does not describe is atomic, as for an untyped object);
`x-kubernetes-map-type: atomic` makes a struct one leaf.

`TypeInfo` walks a schema beside the object; it never fails on unknown fields (they are granular
maps and atomic lists).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from typing import Any

from . import k8sschema

Path = tuple[str, ...]
Obj = dict[str, Any]
Schema = Mapping[str, Any]

_NO_SCHEMA: Schema = {}
# never owned: identity and system metadata (the apiserver strips them before computing sets)
_SKIP_TOP = frozenset({"apiVersion", "kind"})
_SKIP_META = frozenset({"name", "namespace", "uid", "resourceVersion", "creationTimestamp", "selfLink",
                        "generation", "managedFields", "deletionTimestamp", "deletionGracePeriodSeconds"})


class TypeInfo:
    """A schema node (already resolved; shared, never copied), or no schema. Children are
    resolved once per node and kept (`_fields`, `_items`): the built-in kinds' roots are cached
    for the life of the process (`for_resource`), so a pod's walk resolves nothing twice."""

    __slots__ = ("schema", "_fields", "_items")

    def __init__(self, schema: Schema = _NO_SCHEMA) -> None:
        self.schema = schema
        self._fields: dict[str, TypeInfo] = {}
        self._items: TypeInfo | None = None

    @staticmethod
    def of(schema: Schema | None) -> TypeInfo:
        return TypeInfo(k8sschema.resolve(schema) or _NO_SCHEMA if schema else _NO_SCHEMA)  # type: ignore[arg-type]

    def field(self, name: str) -> TypeInfo:
        known = self._fields.get(name)
        if known is not None:
            return known
        props = self.schema.get("properties")
        extra = self.schema.get("additionalProperties")
        if isinstance(props, Mapping) and name in props:
            found = TypeInfo.of(props[name])
        elif isinstance(extra, Mapping):
            found = TypeInfo.of(extra)
        else:
            found = _UNTYPED
        self._fields[name] = found
        return found

    def items(self) -> TypeInfo:
        if self._items is None:
            items = self.schema.get("items")
            self._items = TypeInfo.of(items) if isinstance(items, Mapping) else _UNTYPED
        return self._items

    @property
    def list_type(self) -> str:
        kind = self.schema.get("x-kubernetes-list-type")
        if kind in ("map", "set"):
            return kind
        if self.schema.get("x-kubernetes-patch-strategy", "").startswith("merge") and \
                self.schema.get("x-kubernetes-patch-merge-key"):
            return "map"  # a strategic merge key makes an associative list (as SMD's schema conversion)
        return "atomic"

    @property
    def keys(self) -> tuple[str, ...]:
        keys = self.schema.get("x-kubernetes-list-map-keys")
        if keys:
            return tuple(keys)
        key = self.schema.get("x-kubernetes-patch-merge-key")
        return (key,) if key else ()

    @property
    def atomic_map(self) -> bool:
        return self.schema.get("x-kubernetes-map-type") == "atomic"


class _Untyped(TypeInfo):
    """No schema: every field untyped too (maps granular, lists atomic); never caches children."""

    __slots__ = ()

    def field(self, name: str) -> TypeInfo:
        return self

    def items(self) -> TypeInfo:
        return self


_UNTYPED = _Untyped()


def for_resource(res: Any) -> TypeInfo:
    """The type of a whole object of a resource (a `resources.Resource`)."""
    if res.custom is not None:
        return TypeInfo.of(res.custom.schema)
    group = "core" if not res.group else res.group.split(".")[0]
    return _builtin(f"io.k8s.api.{group}.{res.version}.{res.kind}")


@functools.cache
def _builtin(name: str) -> TypeInfo:
    """A built-in kind's root, kept with the children it resolves (the vendored schemas never change)."""
    schema = k8sschema.definitions().get(name)
    return TypeInfo.of(schema) if schema else _UNTYPED


def item_key(item: Any, t: TypeInfo) -> str:
    """The path element of a list item: `k:{...}` (associative) or `v:json` (set)."""
    if t.list_type == "map" and isinstance(item, dict):
        return "k:" + json.dumps({k: item.get(k) for k in sorted(t.keys) if k in item},
                                 separators=(",", ":"), sort_keys=True)
    return "v:" + json.dumps(item, separators=(",", ":"), sort_keys=True)


# -- object -> leaves ------------------------------------------------------------------------------

def leaves(obj: Mapping[str, Any], t: TypeInfo, subresource: str = "") -> dict[Path, Any]:
    """Every owned path of `obj` with its value (`None` for list items), system fields left out.
    The main resource's paths leave out `status`; `/status` keeps only `status` (as the strategies)."""
    out: dict[Path, Any] = {}
    for key, value in obj.items():
        if key in _SKIP_TOP:
            continue
        if subresource == "status" and key != "status" or subresource != "status" and key == "status":
            continue
        if key == "metadata" and isinstance(value, dict):
            meta = {k: v for k, v in value.items() if k not in _SKIP_META}
            _walk(meta, t.field("metadata"), ("f:metadata",), out)
            continue
        _value(value, t.field(key), ("f:" + key,), out)
    return out


def _value(value: Any, t: TypeInfo, path: Path, out: dict[Path, Any]) -> None:
    if isinstance(value, dict) and value and not t.atomic_map:
        _walk(value, t, path, out)
    elif isinstance(value, list) and value and t.list_type != "atomic":
        it = t.items()
        for item in value:
            here = path + (item_key(item, t),)
            out[here] = None if t.list_type == "map" else item
            if t.list_type == "map" and isinstance(item, dict):
                _walk(item, it, here, out)
    else:
        out[path] = value


def _walk(obj: Mapping[str, Any], t: TypeInfo, path: Path, out: dict[Path, Any]) -> None:
    for key, value in obj.items():
        _value(value, t.field(key), path + ("f:" + key,), out)


def fields_v1(obj: dict[str, Any], t: TypeInfo, subresource: str = "") -> Obj:
    """`to_fields_v1(leaves(obj, t, subresource))` in one walk (what a create records)."""
    root: Obj = {}
    for key, value in obj.items():
        if key in _SKIP_TOP or (key == "status") != (subresource == "status"):
            continue
        if key == "metadata" and isinstance(value, dict):
            meta = {k: v for k, v in value.items() if k not in _SKIP_META}
            if meta:
                _tree(meta, t.field("metadata"), root.setdefault("f:metadata", {}))
            continue
        _tree_value(value, t.field(key), root, "f:" + key)
    return root


def _tree_value(value: Any, t: TypeInfo, node: Obj, element: str) -> None:
    if isinstance(value, dict) and value and not t.atomic_map:
        _tree(value, t, node.setdefault(element, {}))
    elif isinstance(value, list) and value and t.list_type != "atomic":
        child = node.setdefault(element, {})
        it = t.items()
        for item in value:
            entry = child.setdefault(item_key(item, t), {})
            if t.list_type == "map" and isinstance(item, dict) and item:
                entry["."] = {}
                _tree(item, it, entry)
    else:
        node[element] = {}


def _tree(obj: dict[str, Any], t: TypeInfo, node: Obj) -> None:
    for key, value in obj.items():
        _tree_value(value, t.field(key), node, "f:" + key)


# -- FieldsV1 <-> paths ----------------------------------------------------------------------------

def to_fields_v1(paths: Iterable[Path]) -> Obj:
    """`{"f:spec": {"f:containers": {"k:{\\"name\\":\\"c\\"}": {".": {}, "f:image": {}}}}}`: a member
    with members below it is marked `.`."""
    root: Obj = {}
    ordered = sorted(set(paths))
    for i, path in enumerate(ordered):
        node = root
        for element in path:
            node = node.setdefault(element, {})
        following = ordered[i + 1] if i + 1 < len(ordered) else ()
        if len(following) > len(path) and following[:len(path)] == path:  # sorted: descendants come next
            node["."] = {}
    return root


def from_fields_v1(tree: Any, prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    if not isinstance(tree, Mapping):
        return out
    if not tree and prefix:
        out.add(prefix)
    for key, sub in tree.items():
        if key == ".":
            out.add(prefix)
        else:
            out |= from_fields_v1(sub, prefix + (key,))
    return out


# -- paths in messages -----------------------------------------------------------------------------

def describe(path: Path) -> str:
    """`.spec.containers[name="c"].image`, as the apiserver names a conflicting field."""
    parts = []
    for element in path:
        kind, _, rest = element.partition(":")
        if kind == "f":
            parts.append("." + rest)
        elif kind == "k":
            keys = json.loads(rest)
            parts.append("[" + ",".join(f"{k}={json.dumps(v)}" for k, v in keys.items()) + "]")
        else:
            parts.append(f"[={rest}]")
    return "".join(parts)
