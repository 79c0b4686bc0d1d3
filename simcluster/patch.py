"""PATCH bodies: JSON merge patch (RFC 7386), strategic merge patch (our subset), JSON patch (RFC 6902).

Strategic merge differs from merge patch on lists: for the built-in kinds the real schema's
`x-kubernetes-patch-strategy`/`-patch-merge-key` decide (Service ports merge on `port`); for an
untyped field, lists named in `MERGE_KEYS` are merged element by element on their key (`conditions` by `type`, `containers` by `name`, ...), `finalizers` merges as a
set, and the directives `$patch: delete|replace|merge`, `$deleteFromPrimitiveList/<f>`,
`$setElementOrder/<f>` and `$retainKeys` are understood (the last two are accepted and ignored).
Every other list is replaced, exactly as a merge patch would.
"""

from __future__ import annotations

import copy
from typing import Any

from .errors import BadRequest, Invalid, UnsupportedMedia
from .fieldsets import TypeInfo

MERGE_KEYS = {
    "conditions": "type", "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "env": "name", "volumes": "name", "volumeMounts": "mountPath", "ports": "containerPort",
    "ownerReferences": "uid", "imagePullSecrets": "name", "addresses": "type",
    "hostAliases": "ip", "readinessGates": "conditionType", "containerStatuses": "name",
}
# not `taints`: Kubernetes gives NodeSpec.taints no patch strategy, so a patch replaces the list
# (kubectl taint sends the whole new list; merging by key would keep a removed taint, and fold
# two taints of one key with different effects into one)
PRIMITIVE_SET_LISTS = {"finalizers"}

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _list_rule(key: str, t: TypeInfo | None) -> tuple[str, str]:
    """How a strategic merge treats the list `key`: ("map", merge key), ("set", "") or ("replace", "").
    The schema's `x-kubernetes-patch-strategy`/`-merge-key` decide for a typed field (Service ports
    merge on `port`, a container's on `containerPort`); `MERGE_KEYS` for an untyped one."""
    if t is not None and t.schema:
        strategy = str(t.schema.get("x-kubernetes-patch-strategy", ""))
        merge_key = t.schema.get("x-kubernetes-patch-merge-key")
        if "merge" in strategy.split(","):
            return ("map", merge_key) if merge_key else ("set", "")
        return "replace", ""
    if key in MERGE_KEYS:
        return "map", MERGE_KEYS[key]
    if key in PRIMITIVE_SET_LISTS:
        return "set", ""
    return "replace", ""


def strategic_merge(target: Any, patch: Any, t: TypeInfo | None = None) -> Any:
    """Strategic merge patch: lists merge as the schema `t` says (or `MERGE_KEYS` without one);
    merge patch elsewhere."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            drop = set(value or [])
            result[name] = [v for v in result.get(name) or [] if v not in drop]
            continue
        sub = t.field(key) if t is not None else None
        rule, merge_key = _list_rule(key, sub) if isinstance(value, list) else ("", "")
        if value is None:
            result.pop(key, None)
        elif rule == "map" and isinstance(result.get(key), list):
            result[key] = _merge_list(result[key], value, merge_key, sub.items() if sub is not None else None)
        elif rule == "set" and isinstance(result.get(key), list):
            merged = list(result[key])
            merged.extend(v for v in value if v not in merged)
            result[key] = merged
        elif isinstance(value, list):
            item_t = sub.items() if sub is not None else None
            result[key] = [strategic_merge(None, v, item_t) if isinstance(v, dict) else copy.deepcopy(v) for v in value]
        else:
            result[key] = strategic_merge(result.get(key), value, sub)
    return result


def _merge_list(current: list[Any], patch: list[Any], merge_key: str, t: TypeInfo | None = None) -> list[Any]:
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [copy.deepcopy(p) for p in patch if not (isinstance(p, dict) and "$patch" in p)]
    result = [copy.deepcopy(c) for c in current]
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            result.append(copy.deepcopy(item))
            continue
        idx = next((i for i, c in enumerate(result) if isinstance(c, dict) and c.get(merge_key) == item[merge_key]), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                del result[idx]
            continue
        if idx is None:
            result.append(strategic_merge(None, item, t))
        else:
            result[idx] = strategic_merge(result[idx], item, t)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise BadRequest(f"json patch path {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str], path: str) -> Any:
    for part in parts:
        if isinstance(doc, dict):
            if part not in doc:
                raise Invalid(f"jsonpatch: path {path!r} does not exist")
            doc = doc[part]
        elif isinstance(doc, list):
            try:
                doc = doc[int(part)]
            except (ValueError, IndexError):
                raise Invalid(f"jsonpatch: path {path!r} does not exist") from None
        else:
            raise Invalid(f"jsonpatch: path {path!r} does not exist")
    return doc


def _jp_get(doc: Any, path: str) -> Any:
    return _walk(doc, _pointer(path), path)


def _jp_remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        raise Invalid("jsonpatch: cannot remove the root")
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    try:
        if isinstance(parent, dict):
            return parent.pop(last)
        return parent.pop(int(last))
    except (KeyError, ValueError, IndexError):
        raise Invalid(f"jsonpatch: path {path!r} does not exist") from None


def _jp_add(doc: Any, path: str, value: Any, replace: bool = False) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise Invalid(f"jsonpatch: replace of missing path {path!r}")
        parent[last] = value
    elif isinstance(parent, list):
        try:
            idx = len(parent) if last == "-" else int(last)
        except ValueError:
            raise Invalid(f"jsonpatch: bad array index in {path!r}") from None
        if replace:
            if not 0 <= idx < len(parent):
                raise Invalid(f"jsonpatch: replace of missing path {path!r}")
            parent[idx] = value
        else:
            if not 0 <= idx <= len(parent):
                raise Invalid(f"jsonpatch: index out of range in {path!r}")
            parent.insert(idx, value)
    else:
        raise Invalid(f"jsonpatch: path {path!r} does not exist")
    return doc


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 add/remove/replace/move/copy/test."""
    if not isinstance(ops, list):
        raise BadRequest("json patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise BadRequest(f"invalid json patch operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind == "add":
            doc = _jp_add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            _jp_remove(doc, path)
        elif kind == "replace":
            doc = _jp_add(doc, path, copy.deepcopy(op.get("value")), replace=True)
        elif kind == "move":
            value = _jp_remove(doc, op.get("from", ""))
            doc = _jp_add(doc, path, value)
        elif kind == "copy":
            doc = _jp_add(doc, path, copy.deepcopy(_jp_get(doc, op.get("from", ""))))
        elif kind == "test":
            if _jp_get(doc, path) != op.get("value"):
                raise Invalid(f"jsonpatch: test operation for path {path!r} failed")
        else:
            raise BadRequest(f"unsupported json patch operation {kind!r}")
    return doc


def apply_patch(content_type: str, target: Any, patch: Any, t: TypeInfo | None = None) -> Any:
    """Dispatch on the PATCH request's Content-Type (parameters ignored); `t` the object's type
    (a strategic merge follows its patch strategies)."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media == MERGE:
        return merge_patch(target, patch)
    if media == STRATEGIC:
        return strategic_merge(target, patch, t)
    if media == JSON_PATCH:
        return json_patch(target, patch)
    if media == APPLY:
        raise UnsupportedMedia("server-side apply is handled by apply.py before any patch; here (the /scale "
                               "sub-resource) it is not supported: use a merge patch")
    raise UnsupportedMedia(f'the body of the request was in an unknown format - accepted media types include: '
                           f'{JSON_PATCH}, {MERGE}, {STRATEGIC}')
