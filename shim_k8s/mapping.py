"""Kubernetes objects -> what the scheduler needs, by YuniKorn's conventions. Pure functions.

Pods
----
- Only pods whose `spec.schedulerName` is `yunikorn` or `ykshm` are ours (`is_ours`).
- Application ID, first found of: label `yunikorn.apache.org/app-id`, annotation
  `yunikorn.apache.org/app-id`, label `applicationId`, label `spark-app-selector`; a pod with none
  belongs to YuniKorn's default `yunikorn-<namespace>-autogen`.
- Queue: label `yunikorn.apache.org/queue`, annotation `yunikorn.apache.org/queue`, label `queue`;
  default `root.default`.
- User: annotation `yunikorn.apache.org/user.info` = JSON `{"user": .., "groups": [..]}`; default
  user `nobody`, no groups. Read as YuniKorn's shim reads it (utils.go GetUserFromPod, Go's
  json.Unmarshal: keys matched case-insensitively, unknown ones ignored): an annotation it cannot
  decode gives `nobody` without groups, logged, not an unschedulable pod; an empty user `nobody`.
- Resources: per resource name, max(sum over containers, max over init containers) plus
  `spec.overhead` (Kubernetes' rule; a restartable "sidecar" init container counts with the
  containers), a request missing but a limit present counts the limit (the apiserver's default),
  cpu -> `vcore` in milli-CPU, memory -> bytes, others by their name, and `pods: 1`.
- Task groups (gang scheduling): annotations `yunikorn.apache.org/task-group-name`,
  `yunikorn.apache.org/task-groups` (JSON list of {name, minMember, minResource, ...}),
  `yunikorn.apache.org/schedulingPolicyParameters` ("placeholderTimeoutInSeconds=30
  gangSchedulingStyle=Hard"); placeholder pods carry annotation `yunikorn.apache.org/placeholder`.

- Placement (`placement_of`): `spec.nodeSelector`, the required node affinity's
  `nodeSelectorTerms`, `spec.tolerations` and the required pod affinity and anti-affinity
  terms become the ask tag `ykshm.io/placement` (docs/CONTRACTS.md): canonical compact JSON
  (sorted keys, lists in the pod's order, only the fields the contract names, toleration
  operator defaulted to `Equal`), "" when the pod has none. Checked as the apiserver would, so
  the engine never sees a tag it must reject. Preferred terms are not sent.
- Labels (`PodInfo.labels`): sent as the tags `kubernetes.io/label/<key>` (YuniKorn's shim
  does the same), so the engine matches running pods against inter-pod terms.
- Preemption (`preemption_of`): `spec.priority` (the apiserver resolves `priorityClassName` into
  it) is the ask's priority; the annotation `yunikorn.apache.org/allow-preemption` set to a
  false value (Go's ParseBool: "false", "0", "f", ...) makes the pod a victim of last resort
  (SI allowPreemptSelf false; any other value, or none, allows it, as YuniKorn); a pod whose
  `spec.preemptionPolicy` is `Never` may not preempt others (allowPreemptOther false).

A pod we cannot map raises `PodError` whose message is the reason the shim posts as a Kubernetes
Event on the pod; the pod is skipped and nothing else is affected.

Nodes
-----
`status.allocatable` (cpu -> vcore milli, memory, pods, others), `spec.unschedulable` -> cordoned,
Ready condition (a node without conditions counts as ready: sim-cluster nodes have no kubelet),
`spec.taints` with effect NoSchedule or NoExecute (the ones the filter obeys). A malformed taint
entry is skipped, never fatal: a real apiserver rejects them, so only a hand-edited sim-cluster
node can carry one, and a node must never be lost over it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

import orjson

from common.quantity import QuantityError, parse_milli, parse_quantity
from si import kubeschema, resources
from si.placement import PlacementPaths, placement_doc
from si.resources import Resource

log = logging.getLogger("ykshm.shim")

SCHEDULER_NAMES = frozenset({"yunikorn", "ykshm"})
DEFAULT_QUEUE = "root.default"
DEFAULT_USER = "nobody"
DEFAULT_PARTITION = "default"

ANN_APP_ID = "yunikorn.apache.org/app-id"
ANN_QUEUE = "yunikorn.apache.org/queue"
ANN_USER_INFO = "yunikorn.apache.org/user.info"
ANN_TASK_GROUP_NAME = "yunikorn.apache.org/task-group-name"
ANN_TASK_GROUPS = "yunikorn.apache.org/task-groups"
ANN_SCHED_POLICY = "yunikorn.apache.org/schedulingPolicyParameters"
ANN_PLACEHOLDER = "yunikorn.apache.org/placeholder"
ANN_ALLOW_PREEMPTION = "yunikorn.apache.org/allow-preemption"
LABEL_APP_ID = "applicationId"
LABEL_SPARK_APP = "spark-app-selector"
LABEL_QUEUE = "queue"

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})

FILTER_EFFECTS = frozenset({"NoSchedule", "NoExecute"})   # PreferNoSchedule is only a preference
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
REQUIRED_AFFINITY = f"spec.affinity.nodeAffinity.{REQUIRED}"
POD_PATHS = PlacementPaths("spec.nodeSelector", f"{REQUIRED_AFFINITY}.nodeSelectorTerms",
                           "spec.tolerations", f"spec.affinity.podAffinity.{REQUIRED}",
                           f"spec.affinity.podAntiAffinity.{REQUIRED}")


class MappingError(ValueError):
    """Base: a Kubernetes object the shim cannot use; `str()` is the reason shown to users."""


class PodError(MappingError):
    """A pod of ours that cannot be scheduled as written (bad quantity, bad annotation JSON)."""


class NodeError(MappingError):
    """A node whose allocatable resources cannot be read."""


@dataclasses.dataclass(frozen=True, slots=True)
class TaskGroup:
    """One group of the task-groups annotation. `placement_spec`: the group's nodeSelector,
    affinity and tolerations as JSON (a pod-spec fragment, "" if none), which YuniKorn copies
    onto the group's placeholder pods so they hold nodes the real pods may use. `labels`: the
    group's `labels`, which YuniKorn also puts on its placeholders (so the pod (anti-)affinity
    terms of other groups see a placeholder as the pod it stands for)."""

    name: str
    min_member: int
    min_resource: Resource
    placement_spec: str = ""
    labels: tuple[tuple[str, str], ...] = ()   # the group's `labels`, put on its placeholders


@dataclasses.dataclass(frozen=True, slots=True)
class PodInfo:
    uid: str
    namespace: str
    name: str
    app_id: str
    queue: str
    user: str
    groups: tuple[str, ...]
    resource: Resource
    node_name: str           # "" while pending
    phase: str
    deleting: bool           # metadata.deletionTimestamp set
    priority: int
    task_group: str
    placeholder: bool
    task_groups: tuple[TaskGroup, ...]
    gang_style: str          # "" | "Soft" | "Hard"
    placeholder_timeout_s: int
    placement: str           # the ykshm.io/placement tag, "" when the pod has no constraint
    allow_preempt_self: bool = True    # may be a preemption victim (annotation not false)
    allow_preempt_other: bool = True   # may preempt others (spec.preemptionPolicy not Never)
    labels: tuple[tuple[str, str], ...] = ()   # metadata.labels, sorted

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED_PHASES

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclasses.dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    allocatable: Resource
    unschedulable: bool
    ready: bool
    labels: Mapping[str, str]
    taints: tuple[tuple[str, str, str], ...]   # (key, value, effect): NoSchedule/NoExecute only

    @property
    def schedulable(self) -> bool:
        return self.ready and not self.unschedulable


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _strmap(value: Any) -> Mapping[str, str]:
    return value if isinstance(value, Mapping) else {}


def is_ours(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec")
    return isinstance(spec, Mapping) and spec.get("schedulerName") in SCHEDULER_NAMES


def pod_uid(pod: Mapping[str, Any]) -> str:
    meta = _meta(pod)
    return str(meta.get("uid") or f"{meta.get('namespace', 'default')}/{meta.get('name', '')}")


def pod_node(pod: Mapping[str, Any]) -> str:
    spec = pod.get("spec")
    return str(spec.get("nodeName") or "") if isinstance(spec, Mapping) else ""


def pod_phase(pod: Mapping[str, Any]) -> str:
    status = pod.get("status")
    return str(status.get("phase") or "") if isinstance(status, Mapping) else ""


def pod_finished(pod: Mapping[str, Any]) -> bool:
    return pod_phase(pod) in FINISHED_PHASES


def app_id_of(pod: Mapping[str, Any]) -> str:
    meta = _meta(pod)
    labels, annotations = _strmap(meta.get("labels")), _strmap(meta.get("annotations"))
    for value in (labels.get(ANN_APP_ID), annotations.get(ANN_APP_ID), labels.get(LABEL_APP_ID),
                  labels.get(LABEL_SPARK_APP)):
        if value:
            return str(value)
    return f"yunikorn-{meta.get('namespace') or 'default'}-autogen"


def queue_of(pod: Mapping[str, Any]) -> str:
    meta = _meta(pod)
    labels, annotations = _strmap(meta.get("labels")), _strmap(meta.get("annotations"))
    for value in (labels.get(ANN_QUEUE), annotations.get(ANN_QUEUE), labels.get(LABEL_QUEUE)):
        if value:
            return str(value)
    return DEFAULT_QUEUE


def _json_annotation(name: str, raw: str, kind: type, what: str) -> Any:
    """An annotation holding a JSON document of one type; PodError names the annotation."""
    try:
        return kubeschema.load(raw, kind, what)
    except ValueError as exc:
        raise PodError(f"annotation {name}: {exc}: {raw!r}") from None


def user_of(pod: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    """(user, groups) from the user.info annotation, as YuniKorn's shim decodes it."""
    raw = _strmap(_meta(pod).get("annotations")).get(ANN_USER_INFO)
    if not raw:
        return DEFAULT_USER, ()
    decoded = _go_user_info(raw)
    if decoded is None:
        log.error("unable to process user info annotation of pod %s/%s, using %s: %r",
                  _meta(pod).get("namespace"), _meta(pod).get("name"), DEFAULT_USER, raw[:200])
        return DEFAULT_USER, ()
    user, groups = decoded
    return user or DEFAULT_USER, groups


def _go_user_info(raw: str) -> tuple[str, tuple[str, ...]] | None:
    """What Go's json.Unmarshal into si.UserGroupInformation{user, groups} makes of `raw`;
    None where it returns an error (not JSON, not an object, a field of another type)."""
    try:
        info = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if info is None:
        return "", ()
    if not isinstance(info, dict):
        return None
    user: Any = ""
    groups: Any = []
    for key, value in info.items():  # Go: case-insensitive, the last key wins; null: no change
        if key.lower() == "user" and value is not None:
            user = value
        elif key.lower() == "groups" and value is not None:
            groups = value
    if not isinstance(user, str) or not isinstance(groups, list) or not all(
            isinstance(g, str) or g is None for g in groups):
        return None
    return user, tuple(g or "" for g in groups)


def _quantity(name: str, value: Any, where: str, error: type[MappingError]) -> int:
    try:
        return parse_milli(value) if name == "cpu" else parse_quantity(value)
    except QuantityError as exc:
        raise error(f"{where}: {name}: {exc}") from None


def _resource_name(name: str) -> str:
    return "vcore" if name == "cpu" else name


def resource_list(raw: Any, where: str, error: type[MappingError] = PodError) -> Resource:
    """A Kubernetes ResourceList {"cpu": "500m", "memory": "1Gi"} -> {"vcore": 500, "memory": ...}."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise error(f"{where} must be a map of resource name to quantity")
    return {_resource_name(str(k)): _quantity(str(k), v, where, error) for k, v in raw.items()}


def _container_request(container: Any, where: str) -> Resource:
    if not isinstance(container, Mapping):
        raise PodError(f"{where} must be an object")
    res = container.get("resources") or {}
    if not isinstance(res, Mapping):
        raise PodError(f"{where}.resources must be an object")
    requests = resource_list(res.get("requests"), f"{where}.resources.requests")
    limits = resource_list(res.get("limits"), f"{where}.resources.limits")
    for name, value in limits.items():
        requests.setdefault(name, value)
    return requests


def pod_resource(pod: Mapping[str, Any]) -> Resource:
    """The pod's request as YuniKorn counts it (see module doc). Raises PodError."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise PodError("pod has no spec")
    containers = spec.get("containers") or []
    inits = spec.get("initContainers") or []
    if not isinstance(containers, list) or not isinstance(inits, list):
        raise PodError("spec.containers and spec.initContainers must be lists")
    total = resources.total(_container_request(c, f"spec.containers[{i}]")
                            for i, c in enumerate(containers))
    init_max: Resource = {}
    sidecars: Resource = {}
    for i, c in enumerate(inits):
        req = _container_request(c, f"spec.initContainers[{i}]")
        if isinstance(c, Mapping) and c.get("restartPolicy") == "Always":
            # a sidecar runs for the pod's life; later init containers run beside it
            sidecars = resources.add(sidecars, req)
            continue
        for name, value in req.items():
            init_max[name] = max(init_max.get(name, 0), value + sidecars.get(name, 0))
    total = resources.add(total, sidecars)
    for name, value in init_max.items():
        total[name] = max(total.get(name, 0), value)
    total = resources.add(total, resource_list(spec.get("overhead"), "spec.overhead"))
    total["pods"] = 1
    return {k: v for k, v in total.items() if v or k == "pods"}


def _task_groups(annotations: Mapping[str, str]) -> tuple[TaskGroup, ...]:
    raw = annotations.get(ANN_TASK_GROUPS)
    if not raw:
        return ()
    groups = _json_annotation(ANN_TASK_GROUPS, raw, list, "list")
    result = []
    for i, g in enumerate(groups):
        if not isinstance(g, Mapping) or not isinstance(g.get("name"), str) or not g["name"]:
            raise PodError(f"annotation {ANN_TASK_GROUPS}[{i}] needs a name")
        member = g.get("minMember", 0)
        if not isinstance(member, int) or isinstance(member, bool) or member < 0:
            raise PodError(f"annotation {ANN_TASK_GROUPS}[{i}].minMember must be an integer >= 0")
        res = resource_list(g.get("minResource"), f"annotation {ANN_TASK_GROUPS}[{i}].minResource")
        res["pods"] = 1
        result.append(TaskGroup(g["name"], member, res, _group_placement(g, i),
                                _group_labels(g, i)))
    return tuple(result)


_PLACEMENT_FIELDS = ("nodeSelector", "affinity", "tolerations")


def _group_placement(group: Mapping[str, Any], i: int) -> str:
    """A task group's nodeSelector, affinity and tolerations as a pod-spec fragment in JSON, ""
    if it has none; checked as a pod's would be, so a placeholder pod is never invalid."""
    spec = {key: group[key] for key in _PLACEMENT_FIELDS if group.get(key) is not None}
    if not spec:
        return ""
    try:
        placement_of(spec)
    except PodError as exc:
        where = str(exc).removeprefix("spec.")
        raise PodError(f"annotation {ANN_TASK_GROUPS}[{i}].{where}") from None
    return orjson.dumps(spec, option=orjson.OPT_SORT_KEYS).decode()


def _group_labels(group: Mapping[str, Any], i: int) -> tuple[tuple[str, str], ...]:
    """A task group's `labels` (YuniKorn copies them onto its placeholder pods, so the group's
    pod affinity terms can select them), checked as the apiserver checks pod labels."""
    where = f"annotation {ANN_TASK_GROUPS}[{i}].labels"
    try:
        raw = kubeschema.obj(group.get("labels"), where)
        return tuple(sorted((kubeschema.label_key(k, where),
                             kubeschema.label_value(v, f"{where}.{k}")) for k, v in raw.items()))
    except ValueError as exc:
        raise PodError(str(exc)) from None


def _policy(annotations: Mapping[str, str]) -> tuple[str, int]:
    raw = annotations.get(ANN_SCHED_POLICY) or ""
    style, timeout = "", 0
    for item in raw.split():
        key, _, value = item.partition("=")
        if key == "gangSchedulingStyle":
            if value not in ("Soft", "Hard"):
                raise PodError(f"{ANN_SCHED_POLICY}: gangSchedulingStyle must be Soft or Hard, "
                               f"got {value!r}")
            style = value
        elif key == "placeholderTimeoutInSeconds":
            if not value.isdigit():
                raise PodError(f"{ANN_SCHED_POLICY}: placeholderTimeoutInSeconds must be a "
                               f"non-negative integer, got {value!r}")
            timeout = int(value)
    return style, timeout


def _required_terms(affinity: Any) -> Any:
    """The required node affinity's nodeSelectorTerms as written (preferred terms are not
    sent); None without a required node affinity."""
    if affinity is None:
        return None
    if not isinstance(affinity, Mapping):
        raise PodError("spec.affinity: must be an object")
    node_affinity = affinity.get("nodeAffinity")
    if node_affinity is None:
        return None
    if not isinstance(node_affinity, Mapping):
        raise PodError("spec.affinity.nodeAffinity: must be an object")
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return None
    if not isinstance(required, Mapping):
        raise PodError(f"{REQUIRED_AFFINITY}: must be an object")
    terms = required.get("nodeSelectorTerms")
    return [] if terms is None else terms


def _required_pod_terms(affinity: Any, kind: str) -> Any:
    """The required terms of `podAffinity` or `podAntiAffinity` as written (a list, checked by
    the engine's validator); None without any."""
    if not isinstance(affinity, Mapping):
        return None
    section = affinity.get(kind)
    if section is None:
        return None
    if not isinstance(section, Mapping):
        raise PodError(f"spec.affinity.{kind}: must be an object")
    return section.get(REQUIRED)


def placement_of(spec: Mapping[str, Any]) -> str:
    """The ask tag ykshm.io/placement for a pod spec, "" when unconstrained. Raises PodError
    naming the pod field (the rules are the SI's: `si.placement.placement_doc`)."""
    affinity = spec.get("affinity")
    try:
        doc = placement_doc(spec.get("nodeSelector"), _required_terms(affinity),
                            spec.get("tolerations"), POD_PATHS,
                            pod_affinity=_required_pod_terms(affinity, "podAffinity"),
                            pod_anti_affinity=_required_pod_terms(affinity, "podAntiAffinity"))
    except ValueError as exc:
        raise PodError(str(exc)) from None
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS).decode() if doc else ""


def pod_info(pod: Mapping[str, Any], prev: PodInfo | None = None) -> PodInfo:
    """Map one pod of ours. Raises PodError with the reason to show on the pod.

    `prev` is the same pod's previous mapping: its resource is reused, since a pod's container
    requests cannot change after creation (in-place resize is not followed). The placement is
    recomputed (cheap; tolerations may be added to a live pod).
    """
    meta = _meta(pod)
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise PodError("pod has no spec")
    annotations = _strmap(meta.get("annotations"))
    user, groups = user_of(pod)
    style, timeout = _policy(annotations)
    priority = spec.get("priority") or 0
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise PodError("spec.priority must be an integer")
    allow_self, allow_other = preemption_of(annotations, spec)
    return PodInfo(
        uid=pod_uid(pod),
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        app_id=app_id_of(pod),
        queue=queue_of(pod),
        user=user,
        groups=groups,
        resource=prev.resource if prev is not None else pod_resource(pod),
        node_name=pod_node(pod),
        phase=pod_phase(pod),
        deleting=bool(meta.get("deletionTimestamp")),
        priority=priority,
        task_group=str(annotations.get(ANN_TASK_GROUP_NAME) or ""),
        placeholder=str(annotations.get(ANN_PLACEHOLDER) or "").lower() == "true",
        task_groups=_task_groups(annotations),
        gang_style=style,
        placeholder_timeout_s=timeout,
        placement=placement_of(spec),
        allow_preempt_self=allow_self,
        allow_preempt_other=allow_other,
        labels=pod_labels(meta),
    )


_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def preemption_of(annotations: Mapping[str, str], spec: Mapping[str, Any]) -> tuple[bool, bool]:
    """(allow_preempt_self, allow_preempt_other) of a pod (see the module docstring)."""
    allow_self = str(annotations.get(ANN_ALLOW_PREEMPTION, "true")) not in _GO_FALSE
    return allow_self, spec.get("preemptionPolicy") != "Never"


def pod_labels(meta: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """A pod's labels, sorted (string pairs only: the apiserver allows nothing else)."""
    return tuple(sorted((k, v) for k, v in _strmap(meta.get("labels")).items()
                        if isinstance(k, str) and isinstance(v, str)))


def node_info(node: Mapping[str, Any]) -> NodeInfo:
    """Map one node. Raises NodeError on an unreadable allocatable."""
    meta = _meta(node)
    spec = node.get("spec") if isinstance(node.get("spec"), Mapping) else {}
    status = node.get("status") if isinstance(node.get("status"), Mapping) else {}
    allocatable = resource_list(status.get("allocatable") or status.get("capacity"),
                                "status.allocatable", NodeError)
    ready = True
    for cond in status.get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
    return NodeInfo(
        name=str(meta.get("name") or ""),
        allocatable=allocatable,
        unschedulable=bool(spec.get("unschedulable")),  # type: ignore[union-attr]
        ready=ready,
        labels=dict(_strmap(meta.get("labels"))),
        taints=node_taints(spec.get("taints")),  # type: ignore[union-attr]
    )


def node_taints(raw: Any) -> tuple[tuple[str, str, str], ...]:
    """(key, value, effect) of the taints the filter obeys; malformed entries are skipped."""
    taints = []
    for taint in raw if isinstance(raw, list) else ():
        if not isinstance(taint, Mapping):
            continue
        key, value, effect = taint.get("key"), taint.get("value"), taint.get("effect")
        value = "" if value is None else value
        if effect in FILTER_EFFECTS and isinstance(key, str) and key and isinstance(value, str):
            taints.append((key, value, str(effect)))
    return tuple(taints)


def taints_json(taints: tuple[tuple[str, str, str], ...]) -> str:
    """The node attribute ykshm.io/taints: a compact JSON list, "[]" when untainted."""
    return orjson.dumps([{"key": k, "value": v, "effect": e} for k, v, e in taints],
                        option=orjson.OPT_SORT_KEYS).decode()


def occupied_resource(pod: Mapping[str, Any]) -> Resource:
    """Resources a pod of another scheduler holds on its node; {} if unreadable (never fatal)."""
    try:
        return pod_resource(pod)
    except PodError:
        return {"pods": 1}
