"""A simulated kubelet for every node: bound pods start, run, and finish.

A pod that has `spec.nodeName` (set by a binding or at create) and is Pending turns Running after
`start_delay` seconds (status.phase, conditions, startTime, hostIP, podIP, containerStatuses), if its
node exists then (or as soon as that node is created); a Running pod with the annotation `ykshm.io/run-seconds: "N"` turns Succeeded N
seconds later (containers terminated, exit code 0, reason Completed). Without the annotation it
runs until deleted. The annotation `ykshm.io/exit-code: "C"` makes the containers exit with C
after `run-seconds` (at once without it): 0 is Succeeded, anything else Failed (reason Error), as
a kubelet reports a container that exited. `kubectl annotate pod P ykshm.io/exit-code=1` therefore
fails a running pod now: that is how tests and users make a workload crash.

One task and one timer heap serve every pod; the store listener only pushes timers (it must not
write to the store from inside a change). A timer that fires for a pod whose uid or phase changed
meanwhile does nothing.

Like a real kubelet it posts core/v1 Events on the pod (source `kubelet`, the node as host, the
container as `involvedObject.fieldPath`): Pulled, Created and Started for each container when the
pod starts, Killing when a running pod is deleted (`events=False`, `--no-kubelet-events`, skips
them: one write per event; `podevents`).

A node labelled `ykshm.io/node-agent` belongs to an external node agent (`ykshm node-agent
--api-server URL-of-this-sim-cluster`): its pods and its Lease are left to it.

A pod with a container whose image runs as a process (`procpods`, `procimages`) is handed to
`ProcPods` when it would start: its status is then what its real processes do. The exit-code
annotation works on it too: its processes are stopped once (SIGTERM, the pod's grace period) and
their run ends with exit code C, as if they had crashed with it; the pod's restartPolicy then
decides, as a kubelet's does (a Streams PE pod, `Never`, turns Failed and the controller
relaunches the PE). `ykshm.io/run-seconds` is not applied to process pods: their processes
decide when they end.
"""

from __future__ import annotations

import heapq
import ipaddress
import itertools
import logging
import math
from typing import Any

import trio

from . import objects, podevents
from .procpods import ProcPods
from .store import DELETED, Change, Store

log = logging.getLogger("ykshm.sim-cluster.kubelet")

RUN_SECONDS = "ykshm.io/run-seconds"
AGENT_LABEL = "ykshm.io/node-agent"  # a node an external node agent (nodeagent/) runs: not this kubelet's
EXIT_CODE = "ykshm.io/exit-code"
START, FINISH, KILL = "start", "finish", "kill"


class Kubelet:
    def __init__(self, store: Store, start_delay: float = 0.2, events: bool = True,
                 procpods: ProcPods | None = None, agent: bool = False,
                 sim_ips: tuple[str, int] = ("10.244.0.0", 1 << 16)) -> None:
        self.store = store
        self.agent = agent  # the node agent's kubelet (nodeagent/): runs the agent-labelled nodes
        self.procpods = procpods  # runs the pods whose images are processes (procpods.py)
        self.start_delay = start_delay
        self.events = events
        self._killed: dict[str, dict[str, Any]] = {}  # uid -> the last state of a deleted running pod
        self._heap: list[tuple[float, int, str, str, str, str]] = []  # (due, seq, action, ns, name, uid)
        self._seq = itertools.count()
        self._planned: set[tuple[str, str]] = set()  # (uid, action)
        self._wake = trio.Event()
        self._ips = itertools.count(1)
        self._ip_base, self._ip_span = ipaddress.IPv4Address(sim_ips[0]), sim_ips[1]  # simulated pods' podIPs
        self.started = 0
        self.finished = 0
        store.listeners.append(self._on_change)

    def _push(self, delay: float, action: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        key = (meta["uid"], action)
        if key in self._planned:
            return
        self._planned.add(key)
        heapq.heappush(self._heap, (trio.current_time() + delay, next(self._seq), action, meta["namespace"],
                                    meta["name"], meta["uid"]))
        self._wake.set()

    def _on_change(self, change: Change) -> None:
        if change.bucket == "nodes" and change.type == "ADDED":
            # a kubelet that registers late starts the pods already bound to its node
            name = change.obj["metadata"]["name"]
            for pod in self.store.list("pods", fields=lambda p: (p.get("spec") or {}).get("nodeName") == name)[0]:
                if (pod.get("status") or {}).get("phase") == "Pending":
                    self._push(self.start_delay, START, pod)
            return
        if change.bucket != "pods":
            return
        pod = change.obj
        if change.type == DELETED:
            uid = pod["metadata"]["uid"]
            if self.procpods is not None:
                self.procpods.stop(uid)
            self._planned.discard((uid, START))
            self._planned.discard((uid, FINISH))
            if self.events and (pod.get("status") or {}).get("phase") == "Running":
                self._killed[uid] = pod
                self._push(0, KILL, pod)
            return
        phase = (pod.get("status") or {}).get("phase")
        if phase == "Pending" and (pod.get("spec") or {}).get("nodeName"):
            self._push(self.start_delay, START, pod)
        elif phase == "Running" and self.procpods and self.procpods.handles(pod):
            code = _exit_code(pod)
            if code is not None:
                self.procpods.fail(pod["metadata"]["uid"], code)
        elif phase == "Running":
            seconds = _run_seconds(pod)
            if seconds is not None:
                self._push(seconds, FINISH, pod)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            due = self._heap[0][0] if self._heap else math.inf
            with trio.move_on_at(due):
                await self._wake.wait()
            self._wake = trio.Event()
            now = trio.current_time()
            while self._heap and self._heap[0][0] <= now:
                _, _, action, ns, name, uid = heapq.heappop(self._heap)
                self._planned.discard((uid, action))
                try:
                    self._fire(action, ns, name, uid)
                except Exception:  # a kubelet bug must not stop every other pod
                    log.exception("kubelet %s of %s/%s failed", action, ns, name)
            await trio.sleep(0)

    def _fire(self, action: str, ns: str, name: str, uid: str) -> None:
        if action == KILL:
            gone = self._killed.pop(uid, None)
            if gone is not None:
                self._post_events(gone, [("Killing", f"Stopping container {c.get('name')}", c)
                                         for c in gone["spec"].get("containers") or []])
            return
        pod = self.store.get("pods", ns, name)
        if pod is None or pod["metadata"]["uid"] != uid:
            return
        phase = (pod.get("status") or {}).get("phase")
        if action == START and phase == "Pending":
            node = self.store.get("nodes", "", pod["spec"].get("nodeName", ""))
            if node is None or external(node) != self.agent:
                return  # no kubelet on a node that does not exist (or it is another agent's): Pending
            if self.procpods is not None and self.procpods.handles(pod):
                self.procpods.start(pod, node)
                return
            running = self.store.replace("pods", self._running(pod, node))
            self.started += 1
            if self.events:
                self._post_events(running, [
                    (reason, message, c) for c in running["spec"].get("containers") or []
                    for reason, message in (("Pulled", f'Container image "{c.get("image")}" already present on machine'),
                                            ("Created", f"Created container: {c.get('name')}"),
                                            ("Started", f"Started container {c.get('name')}"))])
        elif action == FINISH and phase == "Running":
            self.store.replace("pods", self._terminated(pod, _exit_code(pod) or 0))
            self.finished += 1

    def _post_events(self, pod: dict[str, Any], events: list[tuple[str, str, dict[str, Any]]]) -> None:
        """Normal core/v1 Events on `pod` from this node's kubelet (skipped when its namespace went)."""
        for reason, message, container in events:
            podevents.post(self.store, pod, str(container.get("name")), reason, message)

    def _pod_ip(self) -> str:
        return str(self._ip_base + next(self._ips) % self._ip_span)

    def _running(self, pod: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
        now = objects.now_rfc3339()
        addrs = {a.get("type"): a.get("address") for a in (node.get("status") or {}).get("addresses") or []}
        host_ip = addrs.get("InternalIP") or "10.0.0.1"
        status = dict(pod.get("status") or {})
        status["phase"] = "Running"
        status["hostIP"] = host_ip
        status["hostIPs"] = [{"ip": host_ip}]
        ip = self._pod_ip()
        status["podIP"] = ip
        status["podIPs"] = [{"ip": ip}]
        status["startTime"] = now
        status["conditions"] = _conditions(now, ready=True, scheduled=pod)
        status["containerStatuses"] = [
            {"name": c.get("name"), "image": c.get("image"), "imageID": f"sim://{c.get('image')}",
             "containerID": f"sim://{pod['metadata']['uid'][:8]}-{i}", "ready": True, "started": True,
             "restartCount": 0, "state": {"running": {"startedAt": now}}, "lastState": {}}
            for i, c in enumerate(pod["spec"].get("containers") or [])
        ]
        return _with_status(pod, status)

    def _terminated(self, pod: dict[str, Any], code: int) -> dict[str, Any]:
        now = objects.now_rfc3339()
        status = dict(pod.get("status") or {})
        status["phase"] = "Succeeded" if code == 0 else "Failed"
        reason = "Completed" if code == 0 else "Error"
        status["conditions"] = _conditions(now, ready=False, scheduled=pod,
                                           reason="PodCompleted" if code == 0 else "PodFailed")
        started = status.get("startTime") or now
        status["containerStatuses"] = [
            {**cs, "ready": False, "started": False,
             "state": {"terminated": {"exitCode": code, "reason": reason, "startedAt": started, "finishedAt": now,
                                      "containerID": cs.get("containerID")}}}
            for cs in status.get("containerStatuses") or []
        ]
        return _with_status(pod, status)


def external(node: dict[str, Any]) -> bool:
    """A node registered by `ykshm node-agent` (label ykshm.io/node-agent): its agent runs its pods
    and keeps its Lease, sim-cluster's kubelet leaves it alone."""
    return AGENT_LABEL in (node["metadata"].get("labels") or {})


def _run_seconds(pod: dict[str, Any]) -> float | None:
    """When a running pod ends: its run-seconds, or 0 when only an exit code is set."""
    raw = (pod["metadata"].get("annotations") or {}).get(RUN_SECONDS)
    if raw is None:
        return 0.0 if _exit_code(pod) is not None else None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if value >= 0 and math.isfinite(value) else None


def _exit_code(pod: dict[str, Any]) -> int | None:
    raw = (pod["metadata"].get("annotations") or {}).get(EXIT_CODE)
    try:
        return None if raw is None else int(raw) & 0xFF
    except ValueError:
        return None


def _conditions(now: str, ready: bool, scheduled: dict[str, Any], reason: str = "") -> list[dict[str, Any]]:
    old = {c.get("type"): c for c in (scheduled.get("status") or {}).get("conditions") or []}
    sched = old.get("PodScheduled") or {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                                        "lastTransitionTime": now}
    out = [{"type": "PodReadyToStartContainers", "status": "True" if ready else "False", "lastProbeTime": None,
            "lastTransitionTime": now},
           {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": now}]
    for kind in ("Ready", "ContainersReady"):
        cond = {"type": kind, "status": "True" if ready else "False", "lastProbeTime": None, "lastTransitionTime": now}
        if reason:
            cond["reason"] = reason
        out.append(cond)
    out.append(sched)
    return out


def _with_status(pod: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    new = dict(pod)
    new["metadata"] = dict(pod["metadata"])
    new["status"] = status
    return new
