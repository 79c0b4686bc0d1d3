"""The configuration as YuniKorn's `GET /ws/v1/config` shows it (dao.ConfigDAOInfo).

YuniKorn answers with its parsed `SchedulerConfig` marshalled again: YAML with the lower-case keys
of `queues.yaml`, or, with `Accept: application/json`, JSON with the Go field names (`Partitions`,
`Queues`, `MaxApplications`, ...), because its structs carry yaml tags only. The service settings,
which YuniKorn keeps in its configmap, appear flattened under `Extra` (`service.event.*` keys with
string values), as YuniKorn shows its configmap there; a configuration from ConfigMaps (sent by
the shim over SI) shows its keys there as in force (engine.rm_config).

We render from the mapping the engine read (values as the user wrote them, e.g. `memory: 1Gi`),
not from our parsed objects, so the answer reads like the file. `document(config)` is built by
the engine into the state snapshot; the web renders it as YAML or JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GO_NAMES = {
    "partitions": "Partitions", "name": "Name", "queues": "Queues", "parent": "Parent",
    "resources": "Resources", "guaranteed": "Guaranteed", "max": "Max",
    "maxapplications": "MaxApplications", "properties": "Properties", "adminacl": "AdminACL",
    "submitacl": "SubmitACL", "childtemplate": "ChildTemplate", "limits": "Limits",
    "limit": "Limit", "users": "Users", "groups": "Groups", "maxresources": "MaxResources",
    "placementrules": "PlacementRules", "create": "Create", "filter": "Filter", "type": "Type",
    "value": "Value", "nodesortpolicy": "NodeSortPolicy", "resourceweights": "ResourceWeights",
    "preemption": "Preemption", "enabled": "Enabled", "statedumpfilepath": "StateDumpFilePath",
}
"""queues.yaml key -> Go field name of YuniKorn's config structs (the JSON keys)."""

FREE_MAPS = {"guaranteed", "max", "properties", "maxresources", "resourceweights"}
"""Keys whose value is a map of user-chosen names: its keys are kept as written."""

DEFAULT_PARTITIONS = [{"name": "default", "queues": [{"name": "root", "submitacl": "*"}]}]
"""What an engine started without a file runs (YuniKorn's default has the same queues)."""


def document(source: Mapping[str, Any], checksum: str,
             extra: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The YAML-shaped ConfigDAOInfo: partitions, checksum and the service settings as extra
    (`extra`: the keys of an RM's configuration as in force, YuniKorn's extraConfig map)."""
    partitions = source.get("partitions") or DEFAULT_PARTITIONS
    doc: dict[str, Any] = {"partitions": _plain(partitions)}
    if checksum:
        doc["checksum"] = checksum
    extra = dict(extra) if extra is not None else _service_extra(source.get("service"))
    if extra:
        doc["extra"] = extra
    return doc


def to_json_shape(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The same document under the Go field names YuniKorn's JSON uses."""
    out: dict[str, Any] = {"Partitions": _go(doc.get("partitions") or [])}
    if doc.get("checksum"):
        out["Checksum"] = doc["checksum"]
    if doc.get("extra"):
        out["Extra"] = dict(doc["extra"])
    return out


def _service_extra(service: Any) -> dict[str, str]:
    if not isinstance(service, Mapping):
        return {}
    events = service.get("event")
    extra = {f"service.event.{key}": _text(value)
             for key, value in (events.items() if isinstance(events, Mapping) else ())}
    for key in ("applicationRetentionSeconds", "maxRetainedApplications"):
        if service.get(key) is not None:
            extra[f"service.{key}"] = _text(service[key])
    return extra


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _plain(value: Any) -> Any:
    """A YAML value made of plain dicts, lists and scalars (keys as strings)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _go(value: Any, free: bool = False) -> Any:
    if isinstance(value, Mapping):
        if free:
            return {str(k): _plain(v) for k, v in value.items()}
        return {GO_NAMES.get(str(k), str(k)): _go(v, str(k) in FREE_MAPS) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_go(v) for v in value]
    return value
