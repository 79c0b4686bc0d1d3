"""`meta.k8s.io/v1` Table rendering, what `kubectl get` asks for (`Accept: ...;as=Table;...`).

Columns follow the real apiserver's printers (pods: NAME READY STATUS RESTARTS AGE, and IP, NODE,
NOMINATED NODE, READINESS GATES at priority 1 for `-o wide`). Rows carry the object as
`PartialObjectMetadata` (includeObject=Metadata, the default), the whole object (Object) or nothing
(None), so kubectl can add the NAMESPACE column and labels itself.

A custom resource's table is NAME plus its CRD's `additionalPrinterColumns` (each a JSONPath; a
`date` column shows an age, a missing value a null cell that kubectl prints empty), or
NAME and AGE when the CRD declares none, as the apiextensions-apiserver's table convertor does.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable
from typing import Any

from . import jsonpath
from .resources import PrinterColumn, Resource

Obj = dict[str, Any]
Column = tuple[str, str, str, int]  # name, type, format, priority


def human_duration(seconds: float) -> str:
    """apimachinery's duration.HumanDuration (what AGE shows)."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    if h < 24 * 8:
        return f"{h // 24}d{h % 24}h" if h % 24 else f"{h // 24}d"
    if h < 24 * 365 * 2:
        return f"{h // 24}d"
    if h < 24 * 365 * 8:
        d = h // 24
        return f"{d // 365}y{d % 365}d" if d % 365 else f"{d // 365}y"
    return f"{h // 24 // 365}y"


def _parse_time(ts: str | None) -> dt.datetime | None:
    if not ts:
        return None
    try:
        return dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None


def age(ts: str | None) -> str:
    t = _parse_time(ts)
    if t is None:
        return "<unknown>"
    return human_duration((dt.datetime.now(dt.timezone.utc) - t).total_seconds())


def _pod_status(pod: Obj) -> str:
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp"):
        return "Terminating"
    phase = status.get("phase") or "Pending"
    if status.get("reason"):
        return status["reason"]
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if "waiting" in state and state["waiting"].get("reason"):
            return state["waiting"]["reason"]
        if "terminated" in state:
            t = state["terminated"]
            return t.get("reason") or ("Completed" if t.get("exitCode") == 0 else "Error")
    if phase == "Pending" and spec.get("nodeName"):
        return "ContainerCreating"
    if phase == "Succeeded":
        return "Completed"
    return phase


def _pod_row(pod: Obj) -> list[Any]:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    total = len(spec.get("containers") or [])
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for cs in statuses if cs.get("ready"))
    restarts = sum(int(cs.get("restartCount") or 0) for cs in statuses)
    gates = spec.get("readinessGates") or []
    return [
        pod["metadata"]["name"], f"{ready}/{total}", _pod_status(pod), str(restarts),
        age(pod["metadata"].get("creationTimestamp")), status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>", status.get("nominatedNodeName") or "<none>",
        f"{len(gates)}" if gates else "<none>",
    ]


def _node_row(node: Obj) -> list[Any]:
    spec, status = node.get("spec") or {}, node.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    state = "Ready" if ready and ready.get("status") == "True" else ("NotReady" if ready else "Unknown")
    if spec.get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = node["metadata"].get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/")) or ["<none>"]
    addrs = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    info = status.get("nodeInfo") or {}
    return [
        node["metadata"]["name"], state, ",".join(roles), age(node["metadata"].get("creationTimestamp")),
        info.get("kubeletVersion", ""), addrs.get("InternalIP") or "<none>", addrs.get("ExternalIP") or "<none>",
        info.get("osImage") or "<unknown>", info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


def _event_row(ev: Obj) -> list[Any]:
    inv = ev.get("involvedObject") or {}
    src = ev.get("source") or {}
    last = ev.get("lastTimestamp") or ev.get("eventTime") or ev["metadata"].get("creationTimestamp")
    first = ev.get("firstTimestamp") or ev.get("eventTime") or ev["metadata"].get("creationTimestamp")
    source = src.get("component") or ev.get("reportingComponent") or ""
    if src.get("host"):
        source += f", {src['host']}"
    return [
        age(last), ev.get("type", ""), ev.get("reason", ""), f"{str(inv.get('kind', '')).lower()}/{inv.get('name', '')}",
        inv.get("fieldPath", ""), source, ev.get("message", ""), age(first), int(ev.get("count") or 1),
        ev["metadata"]["name"],
    ]


def _namespace_row(ns: Obj) -> list[Any]:
    return [ns["metadata"]["name"], (ns.get("status") or {}).get("phase", "Active"), age(ns["metadata"].get("creationTimestamp"))]


def _configmap_row(cm: Obj) -> list[Any]:
    return [cm["metadata"]["name"], len(cm.get("data") or {}) + len(cm.get("binaryData") or {}),
            age(cm["metadata"].get("creationTimestamp"))]


def _secret_row(secret: Obj) -> list[Any]:
    return [secret["metadata"]["name"], secret.get("type", "Opaque"), len(secret.get("data") or {}),
            age(secret["metadata"].get("creationTimestamp"))]


def _service_row(svc: Obj) -> list[Any]:
    spec = svc.get("spec") or {}
    ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    external = ",".join(i.get("ip") or i.get("hostname") or "" for i in ingress) or (
        spec.get("externalName") or ("<pending>" if spec.get("type") == "LoadBalancer" else "<none>"))
    ports = ",".join(f"{p.get('port')}{':' + str(p['nodePort']) if p.get('nodePort') else ''}/{p.get('protocol', 'TCP')}"
                     for p in spec.get("ports") or []) or "<none>"
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items())) or "<none>"
    return [svc["metadata"]["name"], spec.get("type", "ClusterIP"), spec.get("clusterIP") or "<none>", external,
            ports, age(svc["metadata"].get("creationTimestamp")), selector]


def _serviceaccount_row(sa: Obj) -> list[Any]:
    return [sa["metadata"]["name"], len(sa.get("secrets") or []), age(sa["metadata"].get("creationTimestamp"))]


def _lease_row(lease: Obj) -> list[Any]:
    return [lease["metadata"]["name"], (lease.get("spec") or {}).get("holderIdentity") or "",
            age(lease["metadata"].get("creationTimestamp"))]


def _pdb_row(pdb: Obj) -> list[Any]:
    spec = pdb.get("spec") or {}
    return [pdb["metadata"]["name"], str(spec.get("minAvailable", "N/A")), str(spec.get("maxUnavailable", "N/A")),
            int((pdb.get("status") or {}).get("disruptionsAllowed") or 0), age(pdb["metadata"].get("creationTimestamp"))]


def _crd_row(crd: Obj) -> list[Any]:
    return [crd["metadata"]["name"], crd["metadata"].get("creationTimestamp", "")]


def _cell(column: PrinterColumn, obj: Obj) -> Any:
    """One printer-column cell, typed as the apiextensions table convertor types it."""
    found = jsonpath.find(obj, column.json_path)
    if not found or found[0] is None:
        return None
    value = found[0]
    kind = column.type
    if kind == "string":
        return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    if kind == "integer" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "date" and isinstance(value, str):
        return age(value) if _parse_time(value) else "<invalid>"
    return None


def _custom_table(resource: Resource) -> tuple[list[Column], Callable[[Obj], list[Any]]]:
    assert resource.custom is not None
    columns = resource.custom.columns
    if not columns:
        return [_NAME, _AGE], _default_row
    defs: list[Column] = [_NAME] + [(c.name, c.type if c.type != "date" else "string", c.format, c.priority)
                                    for c in columns]
    return defs, lambda obj: [obj["metadata"]["name"], *(_cell(c, obj) for c in columns)]


def _binding_row(b: Obj) -> list[Any]:
    """RoleBinding/ClusterRoleBinding: NAME ROLE AGE, and USERS GROUPS SERVICEACCOUNTS for -o wide."""
    ref = b.get("roleRef") or {}
    subjects = [s for s in b.get("subjects") or [] if isinstance(s, dict)]

    def names(kind: str) -> str:
        return ", ".join(s.get("name", "") if kind != "ServiceAccount" else f"{s.get('namespace', '')}/{s.get('name')}"
                         for s in subjects if s.get("kind") == kind)

    return [b["metadata"]["name"], f"{ref.get('kind', '')}/{ref.get('name', '')}",
            age(b["metadata"].get("creationTimestamp")), names("User"), names("Group"), names("ServiceAccount")]


def _endpoints_cell(pairs: list[str]) -> str:
    """kubectl's ENDPOINTS column: the first three, then `+ N more...`."""
    if not pairs:
        return "<none>"
    more = f" + {len(pairs) - 3} more..." if len(pairs) > 3 else ""
    return ",".join(pairs[:3]) + more


def _endpoints_row(ep: Obj) -> list[Any]:
    pairs = [f"{a.get('ip')}:{p.get('port')}" for s in ep.get("subsets") or [] for a in s.get("addresses") or []
             for p in s.get("ports") or []]
    return [ep["metadata"]["name"], _endpoints_cell(pairs), age(ep["metadata"].get("creationTimestamp"))]


def _endpointslice_row(es: Obj) -> list[Any]:
    ports = ",".join(str(p.get("port")) for p in es.get("ports") or []) or "<unset>"
    addrs = [a for e in es.get("endpoints") or [] for a in e.get("addresses") or []]
    return [es["metadata"]["name"], es.get("addressType", ""), ports, _endpoints_cell(addrs),
            age(es["metadata"].get("creationTimestamp"))]


def _default_row(obj: Obj) -> list[Any]:
    return [obj["metadata"]["name"], age(obj["metadata"].get("creationTimestamp"))]


_NAME: Column = ("Name", "string", "name", 0)
_AGE: Column = ("Age", "string", "", 0)
TABLES: dict[str, tuple[list[Column], Callable[[Obj], list[Any]]]] = {
    "pods": ([_NAME, ("Ready", "string", "", 0), ("Status", "string", "", 0), ("Restarts", "string", "", 0), _AGE,
              ("IP", "string", "", 1), ("Node", "string", "", 1), ("Nominated Node", "string", "", 1),
              ("Readiness Gates", "string", "", 1)], _pod_row),
    "nodes": ([_NAME, ("Status", "string", "", 0), ("Roles", "string", "", 0), _AGE, ("Version", "string", "", 0),
               ("Internal-IP", "string", "", 1), ("External-IP", "string", "", 1), ("OS-Image", "string", "", 1),
               ("Kernel-Version", "string", "", 1), ("Container-Runtime", "string", "", 1)], _node_row),
    "events": ([("Last Seen", "string", "", 0), ("Type", "string", "", 0), ("Reason", "string", "", 0),
                ("Object", "string", "", 0), ("Subobject", "string", "", 1), ("Source", "string", "", 1),
                ("Message", "string", "", 0), ("First Seen", "string", "", 1), ("Count", "integer", "", 1),
                ("Name", "string", "", 1)], _event_row),
    "namespaces": ([_NAME, ("Status", "string", "", 0), _AGE], _namespace_row),
    "configmaps": ([_NAME, ("Data", "integer", "", 0), _AGE], _configmap_row),
    "secrets": ([_NAME, ("Type", "string", "", 0), ("Data", "integer", "", 0), _AGE], _secret_row),
    "customresourcedefinitions": ([_NAME, ("Created At", "date", "", 0)], _crd_row),
    "roles": ([_NAME, ("Created At", "date", "", 0)], _crd_row),
    "clusterroles": ([_NAME, ("Created At", "date", "", 0)], _crd_row),
    "rolebindings": ([_NAME, ("Role", "string", "", 0), _AGE, ("Users", "string", "", 1), ("Groups", "string", "", 1),
                      ("ServiceAccounts", "string", "", 1)], _binding_row),
    "clusterrolebindings": ([_NAME, ("Role", "string", "", 0), _AGE, ("Users", "string", "", 1),
                             ("Groups", "string", "", 1), ("ServiceAccounts", "string", "", 1)], _binding_row),
    "services": ([_NAME, ("Type", "string", "", 0), ("Cluster-IP", "string", "", 0), ("External-IP", "string", "", 0),
                  ("Port(s)", "string", "", 0), _AGE, ("Selector", "string", "", 1)], _service_row),
    "serviceaccounts": ([_NAME, ("Secrets", "integer", "", 0), _AGE], _serviceaccount_row),
    "endpoints": ([_NAME, ("Endpoints", "string", "", 0), _AGE], _endpoints_row),
    "endpointslices": ([_NAME, ("AddressType", "string", "", 0), ("Ports", "string", "", 0),
                        ("Endpoints", "string", "", 0), _AGE], _endpointslice_row),
    "leases": ([_NAME, ("Holder", "string", "", 0), _AGE], _lease_row),
    "poddisruptionbudgets": ([_NAME, ("Min Available", "string", "", 0), ("Max Unavailable", "string", "", 0),
                              ("Allowed Disruptions", "integer", "", 0), _AGE], _pdb_row),
}


def wants_table(accept: str) -> bool:
    return "as=Table" in accept and "g=meta.k8s.io" in accept


def table(resource: Resource, objects: Iterable[Obj], include: str = "Metadata",
          list_meta: dict[str, Any] | None = None, columns: bool = True) -> Obj:
    """A meta.k8s.io/v1 Table of the objects (events in their core/v1 form)."""
    if resource.custom is not None:
        cols, row_fn = _custom_table(resource)
    else:
        cols, row_fn = TABLES.get(resource.bucket, ([_NAME, _AGE], _default_row))
    rows = []
    for obj in objects:
        row: Obj = {"cells": row_fn(obj)}
        if include == "Object":
            row["object"] = obj
        elif include != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}
        rows.append(row)
    out: Obj = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta or {}}
    if columns:
        out["columnDefinitions"] = [
            {"name": n, "type": t, "format": f, "description": f"{n} of the {resource.singular}", "priority": p}
            for n, t, f, p in cols
        ]
    else:
        out["columnDefinitions"] = None
    out["rows"] = rows
    return out
