"""Server-side apply and `metadata.managedFields`, as the apiserver's field manager keeps them.

Rules (each manager is a `managedFields` entry: manager name, operation Apply|Update, apiVersion,
subresource; its `fieldsV1` is a field set, see `fieldsets`):

1. **Update** (POST, PUT, a non-apply PATCH): the writer (`?fieldManager=`, else the first word of
   its User-Agent, as the apiserver) comes to own every field whose value it set or changed; those
   fields leave every other manager; removed fields leave everyone. Updates never conflict.
2. **Apply** (`PATCH` with `Content-Type: application/apply-patch+yaml`, `?fieldManager=` required,
   422 otherwise): the body is the manager's whole intent. A field it sets that another manager owns
   with a different value is a conflict: 409 `Apply failed with N conflict(s): conflict with "m"
   using v1: .spec.containers[name="c"].image`, one `FieldManagerConflict` cause per field, and
   nothing changes. With `?force=true` (kubectl `--force-conflicts`) the applier takes the fields.
   The result is the live object merged with the body (associative lists by key, sets by value,
   atomic lists replaced); fields the applier owned before and leaves out now are removed unless
   another manager owns them. The applier's set becomes exactly the body's.
3. **Apply to a missing object** creates it (201), the applier owning what it sent.
4. A write that sends `managedFields: [{}]` clears them; one that sends none (or `[]`) keeps them.
5. The manager `kubectl` applying fields whose only conflicts are fields its last client-side apply
   set (the `kubectl.kubernetes.io/last-applied-configuration` annotation) takes them without a
   conflict: the apiserver's upgrade path from `kubectl apply` to `kubectl apply --server-side`.

Events are not tracked (they are many and nobody applies them).
"""

from __future__ import annotations

import copy
import datetime as dt
from dataclasses import dataclass
from typing import Any

import orjson
import yaml

from . import fieldsets, timestamps
from .errors import ApiError, BadRequest, Invalid
from .fieldsets import Path, TypeInfo
from .resources import Resource

Obj = dict[str, Any]
APPLY = "application/apply-patch+yaml"
UNTRACKED = frozenset({"events"})
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


class ApplyConflict(ApiError):
    """An apply that would change fields other managers own (409, causes FieldManagerConflict)."""

    code = 409
    reason = "Conflict"


@dataclass(frozen=True)
class Manager:
    """Who writes, how: the identity of one managedFields entry."""

    name: str
    operation: str  # Apply | Update
    api_version: str
    subresource: str = ""

    def owns(self, entry: Obj) -> bool:
        return (entry.get("manager") == self.name and entry.get("operation") == self.operation
                and entry.get("subresource", "") == self.subresource)

    def entry(self, paths: set[Path]) -> Obj:
        out: Obj = {"manager": self.name, "operation": self.operation, "apiVersion": self.api_version,
                    "time": timestamps.format_time(dt.datetime.now(dt.timezone.utc)), "fieldsType": "FieldsV1",
                    "fieldsV1": fieldsets.to_fields_v1(paths)}
        if self.subresource:
            out["subresource"] = self.subresource
        return out


def is_apply(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == APPLY


def update_manager(res: Resource, field_manager: str, user_agent: str, subresource: str = "") -> Manager | None:
    """The Update manager of a write, or None for kinds that are not tracked."""
    if res.bucket in UNTRACKED:
        return None
    name = field_manager or (user_agent.split("/", 1)[0].strip() if user_agent else "") or "unknown"
    return Manager(name[:128], "Update", res.api_version, subresource)


def apply_manager(res: Resource, field_manager: str, subresource: str = "") -> Manager:
    if not field_manager:
        raise Invalid.fields("PatchOptions", "", [("FieldValueRequired", "fieldManager",
                                                   "Required value: is required for apply patch")], "meta.k8s.io")
    return Manager(field_manager[:128], "Apply", res.api_version, subresource)


def decode_config(body: bytes, res: Resource, name: str) -> Obj:
    """An apply body (YAML or JSON): an object of the resource's kind, named as the URL."""
    try:
        cfg = yaml.safe_load(body) if body.strip() else None
    except yaml.YAMLError as exc:
        raise BadRequest(f"error decoding YAML: {exc}") from None
    if not isinstance(cfg, dict):
        raise BadRequest("the apply patch must be an object (application/apply-patch+yaml)")
    cfg = orjson.loads(orjson.dumps(cfg, default=str))  # YAML timestamps and the like as JSON strings
    for key, want in (("apiVersion", res.api_version), ("kind", res.kind)):
        if not cfg.get(key):
            raise BadRequest(f"{key} must be set in an apply patch")
        if cfg[key] != want:
            raise BadRequest(f"the {key} in the apply patch ({cfg[key]}) does not match the resource ({want})")
    meta = cfg.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise BadRequest("metadata must be an object")
    if meta.get("name") not in (None, "", name):
        raise BadRequest(f"the name of the object ({meta['name']}) does not match the name on the URL ({name})")
    if meta.get("managedFields") is not None:
        raise BadRequest("metadata.managedFields must be nil in an apply patch")
    meta["name"] = name
    return cfg


# -- managedFields <-> sets ------------------------------------------------------------------------

def _entries(obj: Obj | None) -> list[Obj]:
    entries = ((obj or {}).get("metadata") or {}).get("managedFields") or []
    return [e for e in entries if isinstance(e, dict) and e]


def _sets(entries: list[Obj]) -> list[tuple[Obj, set[Path]]]:
    return [(e, fieldsets.from_fields_v1(e.get("fieldsV1"))) for e in entries]


def _write(obj: Obj, owned: list[tuple[Obj, set[Path]]]) -> None:
    entries = []
    for entry, paths in owned:
        if paths:
            entries.append({**entry, "fieldsV1": fieldsets.to_fields_v1(paths)})
    if entries:
        obj["metadata"]["managedFields"] = entries
    else:
        obj["metadata"].pop("managedFields", None)


def track_create(res: Resource, obj: Obj, mgr: Manager | None) -> None:
    """A created object: its creator owns every field (`obj` is the object to store)."""
    if mgr is None or _entries(obj):
        return
    tree = fieldsets.fields_v1(obj, fieldsets.for_resource(res), mgr.subresource)
    if tree:
        obj["metadata"]["managedFields"] = [{**mgr.entry(set()), "fieldsV1": tree}]


def track_update(res: Resource, old: Obj, new: Obj, mgr: Manager | None) -> None:
    """Rule 1 and 4 on `new` (the object to store), `old` the stored one."""
    sent = new["metadata"].get("managedFields")
    if sent == [{}]:
        new["metadata"].pop("managedFields", None)
        return
    if sent and sent != old["metadata"].get("managedFields"):
        return  # the client wrote managedFields itself
    if mgr is None:
        if old["metadata"].get("managedFields"):
            new["metadata"]["managedFields"] = old["metadata"]["managedFields"]
        return
    t = fieldsets.for_resource(res)
    before = fieldsets.leaves(old, t, mgr.subresource)
    after = fieldsets.leaves(new, t, mgr.subresource)
    changed = {p for p, v in after.items() if p not in before or before[p] != v}
    removed = before.keys() - after.keys()
    owned = _sets(_entries(old))
    if not changed and not removed:
        _write(new, owned)
        return
    mine = None
    for entry, paths in owned:
        paths -= removed
        if mgr.owns(entry):
            mine = paths
        else:
            paths -= changed
    if mine is None:
        owned.append((mgr.entry(set()), changed))
    else:
        mine |= changed
        owned = [(mgr.entry(set()) if mgr.owns(e) else e, p) for e, p in owned]
    _write(new, owned)


# -- apply -----------------------------------------------------------------------------------------

def created(res: Resource, cfg: Obj, mgr: Manager) -> Obj:
    """Rule 3: the body to create, with the applier's entry."""
    body = copy.deepcopy(cfg)
    paths = set(fieldsets.leaves(cfg, fieldsets.for_resource(res), mgr.subresource))
    body["metadata"]["managedFields"] = [mgr.entry(paths)]
    return body


def apply(res: Resource, live: Obj, cfg: Obj, mgr: Manager, force: bool) -> Obj:
    """Rule 2: the object after applying `cfg` to `live` (not yet stored), or ApplyConflict."""
    t = fieldsets.for_resource(res)
    applied = fieldsets.leaves(cfg, t, mgr.subresource)
    current = fieldsets.leaves(live, t, mgr.subresource)
    owned = _sets(_entries(live))
    conflicts: list[tuple[Obj, Path]] = []
    for entry, paths in owned:
        if mgr.owns(entry):
            continue
        for path in sorted(paths & applied.keys()):
            if applied[path] is not None and path in current and current[path] != applied[path]:
                conflicts.append((entry, path))
    if conflicts and not force and not _from_client_side_apply(live, conflicts, mgr, t):
        raise _conflict_error(conflicts)
    for entry, path in conflicts:
        for other, paths in owned:
            if other is entry:
                paths.discard(path)
    merged = _merge(live, cfg, t)
    before = next((p for e, p in owned if mgr.owns(e)), set())
    others = [p for e, p in owned if not mgr.owns(e)]
    gone: list[Path] = []
    for path in sorted(before - applied.keys(), key=len):  # parents first: an item goes whole
        if any(path[:len(g)] == g for g in gone) or any(a[:len(path)] == path for a in applied):
            continue  # under a removed parent, or a parent of what is applied now (an empty map was)
        if not any(o[:len(path)] == path for paths in others for o in paths):
            _remove(merged, path, t)
            gone.append(path)
    owned = [(e, p) for e, p in owned if not mgr.owns(e)] + [(mgr.entry(set()), set(applied))]
    merged["metadata"] = dict(merged["metadata"])
    _write(merged, owned)
    return merged


def _from_client_side_apply(live: Obj, conflicts: list[tuple[Obj, Path]], mgr: Manager, t: TypeInfo) -> bool:
    """Rule 5: `kubectl` moving from client-side to server-side apply takes over, without a conflict,
    the fields its last client-side apply set (the annotation `last-applied-configuration`)."""
    if mgr.name != "kubectl":
        return False
    raw = (live["metadata"].get("annotations") or {}).get(LAST_APPLIED)
    try:
        last = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        return False
    if not isinstance(last, dict):
        return False
    allowed = fieldsets.leaves(last, t, mgr.subresource)
    return all(path in allowed for _, path in conflicts)


def _conflict_error(conflicts: list[tuple[Obj, Path]]) -> ApplyConflict:
    def who(entry: Obj) -> str:
        return f'"{entry.get("manager")}"' + (f' using {entry["apiVersion"]}' if entry.get("apiVersion") else "")

    causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {who(e)}", "field": fieldsets.describe(p)}
              for e, p in conflicts]
    n = len(conflicts)
    if n == 1:
        text = f"conflict with {who(conflicts[0][0])}: {fieldsets.describe(conflicts[0][1])}"
    else:
        by: dict[str, list[str]] = {}
        for e, p in conflicts:
            by.setdefault(who(e), []).append(fieldsets.describe(p))
        text = "\n".join(f"conflicts with {m}:\n" + "".join(f"- {p}\n" for p in ps) for m, ps in by.items()).rstrip()
    return ApplyConflict(f"Apply failed with {n} conflict{'s' if n > 1 else ''}: {text}", {"causes": causes})


def _merge(live: Any, cfg: Any, t: TypeInfo) -> Any:
    if isinstance(live, dict) and isinstance(cfg, dict) and not t.atomic_map:
        out = dict(live)
        for key, value in cfg.items():
            out[key] = _merge(live[key], value, t.field(key)) if key in live else copy.deepcopy(value)
        return out
    if isinstance(live, list) and isinstance(cfg, list) and t.list_type != "atomic":
        out_list = list(live)
        index = {fieldsets.item_key(item, t): i for i, item in enumerate(out_list)}
        for item in cfg:
            key = fieldsets.item_key(item, t)
            if key in index:
                if t.list_type == "map":
                    out_list[index[key]] = _merge(out_list[index[key]], item, t.items())
            else:
                index[key] = len(out_list)
                out_list.append(copy.deepcopy(item))
        return out_list
    return copy.deepcopy(cfg)


def _remove(obj: Any, path: Path, t: TypeInfo) -> None:
    """Delete the field or list item at `path` (nothing when it is not there)."""
    node, node_t = obj, t
    for i, element in enumerate(path):
        last = i == len(path) - 1
        kind, _, rest = element.partition(":")
        if kind == "f" and isinstance(node, dict):
            if rest not in node:
                return
            if last:
                del node[rest]
                return
            node_t = node_t.field(rest)
            node[rest] = _copy_shallow(node[rest])
            node = node[rest]
        elif kind in ("k", "v") and isinstance(node, list):
            at = next((j for j, item in enumerate(node) if fieldsets.item_key(item, node_t) == element), None)
            if at is None:
                return
            if last:
                del node[at]
                return
            node[at] = _copy_shallow(node[at])
            node, node_t = node[at], node_t.items()
        else:
            return


def _copy_shallow(value: Any) -> Any:
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return list(value)
    return value
