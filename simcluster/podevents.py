"""The kubelet's core/v1 Events on a pod (source `kubelet` on the pod's node, the container as
`involvedObject.fieldPath`). Stored directly, not through the API: they are ours and valid by
construction, and the shortcut keeps them cheap. Skipped when the pod's namespace is gone or going.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from . import objects
from .store import Store

Obj = dict[str, Any]


def post(store: Store, pod: Obj, container: str, reason: str, message: str, type_: str = "Normal") -> None:
    meta = pod["metadata"]
    ns = meta["namespace"]
    space = store.get("namespaces", "", ns)
    if space is None or space["metadata"].get("deletionTimestamp"):
        return
    node = (pod.get("spec") or {}).get("nodeName", "")
    now = objects.now_rfc3339()
    uid = uuid.UUID(bytes=os.urandom(16), version=4)  # a quarter of uuid4()'s cost
    store.create("events", {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{uid.hex[:16]}", "namespace": ns,
                     "uid": str(uid), "creationTimestamp": now},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": meta["name"],
                           "uid": meta["uid"], "resourceVersion": meta.get("resourceVersion", ""),
                           "fieldPath": f"spec.containers{{{container}}}"},
        "reason": reason, "message": message, "source": {"component": "kubelet", "host": node},
        "firstTimestamp": now, "lastTimestamp": now, "count": 1, "type": type_, "eventTime": None,
        "reportingComponent": "kubelet", "reportingInstance": node})
