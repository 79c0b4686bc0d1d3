"""scheduling.k8s.io/v1 PriorityClasses and the apiserver's Priority admission for pods.

- A **PriorityClass** (cluster-scoped) has an int32 `value` (at most 1,000,000,000 unless it is one
  of the two built-in `system-` classes, which the server creates at start:
  `system-cluster-critical` 2000000000 and `system-node-critical` 2000001000), an optional
  `globalDefault` (only one class may be it), `description`, and `preemptionPolicy`
  (`PreemptLowerPriority`, the default, or `Never`). A user's class may not be named `system-*`.
  `value` and `preemptionPolicy` cannot change (422), as on a real apiserver.
- **A new pod**: `spec.priorityClassName` names a class -> `spec.priority` is set to its value and
  `spec.preemptionPolicy` to its policy; an unknown name is a 403 `no PriorityClass with name X
  was found`. No name -> the `globalDefault` class if there is one, else priority 0. A pod that
  already carries a non-zero `spec.priority` different from the resolved one is a 403, as the
  admission plug-in answers (a 0 is taken for pod defaulting's: this runs after it). This is what makes `priorityClassName` reach ykshm's engine (the shim reads
  `spec.priority`, as YuniKorn's shim does).
"""

from __future__ import annotations

from typing import Any

from .errors import Forbidden, Invalid
from .objects import Cause, invalid, required
from .resources import PRIORITYCLASSES
from .store import Store

Obj = dict[str, Any]

HIGHEST_USER_PRIORITY = 1_000_000_000
SYSTEM_CLASSES = {"system-cluster-critical": 2_000_000_000, "system-node-critical": 2_000_001_000}
POLICIES = ("PreemptLowerPriority", "Never")
FIELDS = frozenset({"apiVersion", "kind", "metadata", "value", "globalDefault", "description",
                    "preemptionPolicy"})


def system_classes() -> list[Obj]:
    """The built-in classes every cluster has (created by sim-cluster at start)."""
    return [{"metadata": {"name": name}, "value": value,
             "description": "Used for system critical pods that must run in the cluster, but can be "
                            "moved to another node if necessary." if name.endswith("cluster-critical")
             else "Used for system critical pods that must not be moved from their current node."}
            for name, value in SYSTEM_CLASSES.items()]


def _causes(obj: Obj) -> list[Cause]:
    causes: list[Cause] = []
    name = obj["metadata"]["name"]
    value = obj.get("value")
    if value is None:
        causes.append(required("value"))
    elif isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value < 2**31:
        causes.append(invalid("value", value, "must be a 32-bit integer"))
    elif name in SYSTEM_CLASSES:
        if value != SYSTEM_CLASSES[name]:
            causes.append(invalid("value", value, f"must be {SYSTEM_CLASSES[name]} for {name}"))
    elif value > HIGHEST_USER_PRIORITY:
        causes.append(invalid("value", value, f"maximum allowed value of a user defined priority is "
                                             f"{HIGHEST_USER_PRIORITY}"))
    if name.startswith("system-") and name not in SYSTEM_CLASSES:
        causes.append(invalid("metadata.name", name, "priority class names with 'system-' prefix "
                                                     "are reserved for system use only"))
    policy = obj.setdefault("preemptionPolicy", "PreemptLowerPriority")
    if policy not in POLICIES:
        causes.append(("FieldValueNotSupported", "preemptionPolicy",
                       f'Unsupported value: "{policy}": supported values: "Never", "PreemptLowerPriority"'))
    if not isinstance(obj.get("globalDefault", False), bool):
        causes.append(invalid("globalDefault", obj.get("globalDefault"), "must be a boolean"))
    if not isinstance(obj.get("description", ""), str):
        causes.append(invalid("description", obj.get("description"), "must be a string"))
    return causes


def validate_class(store: Store, obj: Obj, old: Obj | None = None) -> None:
    """422 naming each bad field; also refuses a second globalDefault and changes to fixed fields."""
    name = obj["metadata"]["name"]
    causes = _causes(obj)
    if old is not None:
        for key in ("value", "preemptionPolicy"):
            if obj.get(key) != old.get(key):
                causes.append(invalid(key, obj.get(key), "field is immutable"))
    if obj.get("globalDefault"):
        for other in store.list(PRIORITYCLASSES.bucket)[0]:
            if other.get("globalDefault") and other["metadata"]["name"] != name:
                causes.append(invalid("globalDefault", True, f"globalDefault {other['metadata']['name']} "
                                                             "already exists"))
    if causes:
        raise Invalid.fields("PriorityClass", name, causes, "scheduling.k8s.io")


def admit_pod(store: Store, pod: Obj) -> None:
    """The Priority admission plug-in: resolve the pod's class into spec.priority (in place)."""
    spec = pod.setdefault("spec", {})
    name = spec.get("priorityClassName") or ""
    classes = store.list(PRIORITYCLASSES.bucket)[0]
    if name:
        found = next((c for c in classes if c["metadata"]["name"] == name), None)
        if found is None:
            raise Forbidden(f'pods "{pod["metadata"]["name"]}" is forbidden: no PriorityClass with '
                            f'name {name} was found')
    else:
        found = next((c for c in classes if c.get("globalDefault")), None)
    if found is None:
        return  # priority 0, which pod defaulting already wrote
    value = int(found["value"])
    given = spec.get("priority")
    if given not in (None, 0) and given != value:
        raise Forbidden(f'pods "{pod["metadata"]["name"]}" is forbidden: the integer value of priority '
                        f"({given}) must not be provided in pod spec; priority admission controller "
                        f"computed {value} from the given PriorityClass name")
    spec["priority"] = value
    spec["priorityClassName"] = found["metadata"]["name"]
    spec["preemptionPolicy"] = found.get("preemptionPolicy", "PreemptLowerPriority")
