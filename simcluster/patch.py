"""PATCH bodies: JSON merge patch (RFC 7386), strategic merge patch (our subset), JSON patch (RFC 6902, the
`jsonpatch` library).

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

import jsonpatch
import jsonpointer

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


def _check_pointers(op: Any) -> None:
    """A patch that does not decode is the client's fault (400), before anything is applied."""
    if not isinstance(op, dict) or "op" not in op or "path" not in op:
        raise BadRequest(f"invalid json patch operation: {op!r}")
    for key in ("path", "from"):
        value = op.get(key, "")
        if not isinstance(value, str) or (value and not value.startswith("/")):
            raise BadRequest(f"json patch {key} {value!r} must start with '/'")


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 through the `jsonpatch` library, with kube-apiserver's codes: a patch that does not
    decode is a 400, one that does not apply (missing path, failed `test`) a 422 naming the path.
    Applied one operation at a time so the error can name the operation's path."""
    if not isinstance(ops, list):
        raise BadRequest("json patch must be a list of operations")
    for op in ops:
        _check_pointers(op)
    doc = copy.deepcopy(target)  # the target stays as it was
    for op in ops:
        try:
            doc = jsonpatch.JsonPatch([op]).apply(doc, in_place=True)
        except jsonpatch.JsonPatchTestFailed:
            raise Invalid(f"jsonpatch: test operation for path {op['path']!r} failed") from None
        except jsonpatch.InvalidJsonPatch as e:
            raise BadRequest(f"invalid json patch operation: {e}") from None
        except jsonpatch.JsonPatchConflict as e:
            raise Invalid(f"jsonpatch: path {op['path']!r}: {e}") from None
        except jsonpointer.JsonPointerException:  # its message quotes the whole document
            path = op.get("from", op["path"]) if op["op"] in ("move", "copy") else op["path"]
            raise Invalid(f"jsonpatch: path {path!r} does not exist") from None
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
