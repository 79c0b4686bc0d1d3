"""CustomResourceDefinitions (`apiextensions.k8s.io/v1`): validation, defaults, the resources they
define, and the status conditions the apiextensions controllers would write.

A CRD is accepted when its names do not collide with another resource of its group; it is then
Established at once (no controller delay) and `resources_for` gives one `Resource` per served
version, all sharing the store bucket `{plural}.{group}` (one storage for every version, as etcd
holds one). On creation the CRD gets the finalizer `customresourcecleanup.apiextensions.k8s.io`;
deleting it sets `deletionTimestamp` and the Terminating condition, the garbage collector deletes
its objects, then removes the finalizer, and the resources stop being served.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from typing import Any

from . import jsonpath
from .resources import Custom, PrinterColumn, Resource, ScalePaths

Obj = dict[str, Any]
Cause = tuple[str, str, str]

CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
COLUMN_TYPES = ("integer", "number", "string", "boolean", "date")
SCOPES = ("Cluster", "Namespaced")
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_KIND = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
_VERSION = re.compile(r"^v[0-9]+((alpha|beta)[0-9]+)?$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _req(field: str) -> Cause:
    return ("FieldValueRequired", field, "Required value")


def _bad(field: str, value: Any, why: str) -> Cause:
    return ("FieldValueInvalid", field, f'Invalid value: "{value}": {why}')


# -- validation ---------------------------------------------------------------------------------

def _validate_names(names: Any, causes: list[Cause]) -> None:
    if not isinstance(names, dict):
        causes.append(_req("spec.names"))
        return
    for key in ("plural", "singular"):
        value = names.get(key)
        if key == "plural" and not value:
            causes.append(_req("spec.names.plural"))
        elif value and (not isinstance(value, str) or not _DNS_LABEL.match(value)):
            causes.append(_bad(f"spec.names.{key}", value, "a lowercase RFC 1123 label must consist of lower case "
                                                         "alphanumeric characters or '-'"))
    for key in ("kind", "listKind"):
        value = names.get(key)
        if key == "kind" and not value:
            causes.append(_req("spec.names.kind"))
        elif value and (not isinstance(value, str) or not _KIND.match(value)):
            causes.append(_bad(f"spec.names.{key}", value, "may have mixed case, but should otherwise match: "
                                                         "[a-z]([-a-z0-9]*[a-z0-9])?"))
    for key in ("shortNames", "categories"):
        values = names.get(key) or []
        if not isinstance(values, list):
            causes.append(_bad(f"spec.names.{key}", values, "must be a list of strings"))
            continue
        for i, v in enumerate(values):
            if not isinstance(v, str) or not _DNS_LABEL.match(v):
                causes.append(_bad(f"spec.names.{key}[{i}]", v, "must be a lowercase RFC 1123 label"))


def _validate_subresources(subs: Any, path: str, causes: list[Cause]) -> None:
    if subs is None:
        return
    if not isinstance(subs, dict):
        causes.append(_bad(path, subs, "must be an object"))
        return
    scale = subs.get("scale")
    if scale is None:
        return
    if not isinstance(scale, dict):
        causes.append(_bad(f"{path}.scale", scale, "must be an object"))
        return
    for key, prefix in (("specReplicasPath", ".spec."), ("statusReplicasPath", ".status."),
                        ("labelSelectorPath", "")):
        value = scale.get(key)
        if value is None:
            if key != "labelSelectorPath":
                causes.append(_req(f"{path}.scale.{key}"))
            continue
        if not isinstance(value, str) or not value.startswith(prefix or ".") or "[" in value:
            where = f"should be a json path under {prefix.rstrip('.')}" if prefix else "should be a json path"
            causes.append(_bad(f"{path}.scale.{key}", value, where))


def _validate_columns(columns: Any, path: str, causes: list[Cause]) -> None:
    if columns is None:
        return
    if not isinstance(columns, list):
        causes.append(_bad(path, columns, "must be a list"))
        return
    for i, col in enumerate(columns):
        here = f"{path}[{i}]"
        if not isinstance(col, dict):
            causes.append(_bad(here, col, "must be an object"))
            continue
        if not col.get("name"):
            causes.append(_req(f"{here}.name"))
        if col.get("type") not in COLUMN_TYPES:
            supported = ", ".join(f'"{t}"' for t in COLUMN_TYPES)
            causes.append(("FieldValueNotSupported", f"{here}.type",
                           f'Unsupported value: "{col.get("type")}": supported values: {supported}'))
        if not col.get("jsonPath"):
            causes.append(_req(f"{here}.jsonPath"))
        else:
            try:
                jsonpath.parse(str(col["jsonPath"]))
            except jsonpath.PathError as exc:
                causes.append(_bad(f"{here}.jsonPath", col["jsonPath"], str(exc)))


def _validate_versions(versions: Any, causes: list[Cause]) -> None:
    if not isinstance(versions, list) or not versions:
        causes.append(_req("spec.versions"))
        return
    storage = 0
    seen: set[str] = set()
    for i, v in enumerate(versions):
        here = f"spec.versions[{i}]"
        if not isinstance(v, dict):
            causes.append(_bad(here, v, "must be an object"))
            continue
        name = v.get("name")
        if not name:
            causes.append(_req(f"{here}.name"))
        elif not isinstance(name, str) or not _VERSION.match(name):
            causes.append(_bad(f"{here}.name", name, "must be a DNS-1035 label"))
        elif name in seen:
            causes.append(("FieldValueDuplicate", f"{here}.name", f'Duplicate value: "{name}"'))
        else:
            seen.add(name)
        for flag in ("served", "storage"):
            if not isinstance(v.get(flag), bool):
                causes.append(_req(f"{here}.{flag}"))
        storage += v.get("storage") is True
        schema = (v.get("schema") or {}).get("openAPIV3Schema") if isinstance(v.get("schema"), dict) else None
        if not isinstance(schema, dict):
            causes.append(("FieldValueRequired", f"{here}.schema.openAPIV3Schema", "Required value: schemas are required"))
        elif schema.get("type") != "object":
            causes.append(("FieldValueRequired", f"{here}.schema.openAPIV3Schema.type",
                           'Required value: must be "object" at the root'))
        _validate_subresources(v.get("subresources"), f"{here}.subresources", causes)
        _validate_columns(v.get("additionalPrinterColumns"), f"{here}.additionalPrinterColumns", causes)
    if storage != 1:
        causes.append(_bad("spec.versions", storage, "must have exactly one version marked as storage version"))


def validate_crd(obj: Obj, causes: list[Cause]) -> None:
    """Append a cause for every bad field of a CRD (those the apiserver checks that matter here)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        causes.append(_req("spec"))
        return
    group = spec.get("group")
    if not group:
        causes.append(_req("spec.group"))
    elif not isinstance(group, str) or "." not in group:
        causes.append(_bad("spec.group", group, "should be a domain with at least one dot"))
    names = spec.get("names")
    _validate_names(names, causes)
    if spec.get("scope") not in SCOPES:
        causes.append(("FieldValueNotSupported", "spec.scope",
                       f'Unsupported value: "{spec.get("scope")}": supported values: "Cluster", "Namespaced"')
                      if spec.get("scope") else _req("spec.scope"))
    _validate_versions(spec.get("versions"), causes)
    if isinstance(names, dict) and names.get("plural") and group:
        want = f"{names['plural']}.{group}"
        if obj["metadata"].get("name") != want:
            causes.append(_bad("metadata.name", obj["metadata"].get("name"), 'must be spec.names.plural+"."+spec.group'))


def validate_crd_update(new: Obj, old: Obj, causes: list[Cause]) -> None:
    """The immutable parts: group and scope."""
    for key in ("group", "scope"):
        if (new.get("spec") or {}).get(key) != (old.get("spec") or {}).get(key):
            causes.append(("FieldValueInvalid", f"spec.{key}", f'Invalid value: "{(new.get("spec") or {}).get(key)}": '
                                                              "field is immutable"))


# -- defaults -----------------------------------------------------------------------------------

def default_crd(obj: Obj, keep_finalizer: bool) -> None:
    """singular, listKind, conversion; and the cleanup finalizer on every CRD not being deleted
    (the apiextensions finalizer controller puts it back if an update took it away)."""
    spec = obj["spec"]
    names = spec["names"]
    names.setdefault("singular", names["kind"].lower())
    names.setdefault("listKind", f"{names['kind']}List")
    spec.setdefault("conversion", {"strategy": "None"})
    if keep_finalizer:
        finalizers = obj["metadata"].setdefault("finalizers", [])
        if CLEANUP_FINALIZER not in finalizers:
            finalizers.append(CLEANUP_FINALIZER)


# -- what it serves -----------------------------------------------------------------------------

def bucket_of(crd: Obj) -> str:
    spec = crd["spec"]
    return f"{spec['names']['plural']}.{spec['group']}"


def _columns(raw: Iterable[Obj]) -> tuple[PrinterColumn, ...]:
    return tuple(PrinterColumn(str(c["name"]), str(c["type"]), str(c["jsonPath"]), str(c.get("format") or ""),
                               str(c.get("description") or ""), int(c.get("priority") or 0)) for c in raw)


def resources_for(crd: Obj) -> tuple[Resource, ...]:
    """One Resource per served version of an accepted CRD."""
    spec = crd["spec"]
    names = spec["names"]
    out = []
    for v in spec["versions"]:
        if not v.get("served"):
            continue
        subs = v.get("subresources") or {}
        scale = subs.get("scale")
        custom = Custom(
            crd=crd["metadata"]["name"], schema=v["schema"]["openAPIV3Schema"],
            columns=_columns(v.get("additionalPrinterColumns") or ()),
            scale=ScalePaths(scale["specReplicasPath"], scale["statusReplicasPath"], scale.get("labelSelectorPath"))
            if isinstance(scale, dict) else None,
        )
        sub_names = tuple(s for s in ("status", "scale") if isinstance(subs.get(s), dict))
        out.append(Resource(
            names["plural"], names["singular"], names["kind"], spec["group"], v["name"],
            spec["scope"] == "Namespaced", tuple(names.get("shortNames") or ()), tuple(names.get("categories") or ()),
            sub_names, has_status="status" in sub_names, store=bucket_of(crd), custom=custom,
        ))
    return tuple(out)


def name_conflict(crd: Obj, others: Iterable[Resource]) -> tuple[str, str] | None:
    """(reason, message) when a name of `crd` is taken by another resource of its group."""
    spec = crd["spec"]
    names = spec["names"]
    mine = crd["metadata"]["name"]
    for r in others:
        if r.group != spec["group"] or (r.custom is not None and r.custom.crd == mine):
            continue
        if r.name == names["plural"]:
            return "PluralConflict", f'"{r.name}" is already in use'
        if r.singular == names["singular"] or r.name == names["singular"]:
            return "SingularConflict", f'"{names["singular"]}" is already in use'
        taken = set(names.get("shortNames") or ()) & set(r.short_names)
        if taken:
            return "ShortNamesConflict", f'"{sorted(taken)[0]}" is already in use'
        if r.kind == names["kind"]:
            return "KindConflict", f'"{r.kind}" is already in use'
    return None


def _condition(ctype: str, status: str, reason: str, message: str, old: list[Obj]) -> Obj:
    prev = next((c for c in old if c.get("type") == ctype), None)
    since = prev["lastTransitionTime"] if prev and prev.get("status") == status and prev.get("lastTransitionTime") \
        else _now()
    return {"type": ctype, "status": status, "lastTransitionTime": since, "reason": reason, "message": message}


def terminating(crd: Obj) -> Obj:
    """The status of a CRD whose deletion started: its conditions plus Terminating."""
    status = dict(crd.get("status") or {})
    old = status.get("conditions") or []
    status["conditions"] = [c for c in old if c.get("type") != "Terminating"] + [_condition(
        "Terminating", "True", "InstanceDeletionInProgress", "CustomResource deletion is in progress", old)]
    return status


def status_for(crd: Obj, conflict: tuple[str, str] | None) -> Obj:
    """The status the apiextensions controllers converge to: accepted names and conditions."""
    spec = crd["spec"]
    old = (crd.get("status") or {}).get("conditions") or []
    conditions = []
    if conflict is None:
        conditions.append(_condition("NamesAccepted", "True", "NoConflicts", "no conflicts found", old))
        conditions.append(_condition("Established", "True", "InitialNamesAccepted",
                                     "the initial names have been accepted", old))
    else:
        conditions.append(_condition("NamesAccepted", "False", conflict[0], conflict[1], old))
        conditions.append(_condition("Established", "False", "NotAccepted", "not all names are accepted", old))
    accepted = {k: v for k, v in spec["names"].items() if v} if conflict is None else \
        (crd.get("status") or {}).get("acceptedNames") or {"plural": "", "kind": ""}
    storage = [v["name"] for v in spec["versions"] if v.get("storage")]
    stored = list((crd.get("status") or {}).get("storedVersions") or [])
    stored += [v for v in storage if v not in stored]
    return {"conditions": conditions, "acceptedNames": accepted, "storedVersions": stored}
