"""What the kubelet writes in a process pod's status, from the state of its containers.

Pure functions over `ContainerState` (one per container of the pod): `containerStatuses` as kubelet
fills them (waiting ContainerCreating / CreateContainerConfigError / CreateContainerError /
CrashLoopBackOff, running, terminated with exitCode, reason Completed or Error and a message; the
previous run in `lastState`; `restartCount`; `ready`, `started`), the pod's phase (kubelet's
getPhase: Pending until a container started, Running while any runs or will restart, then Succeeded
when every container exited 0, else Failed) and its conditions (Ready and ContainersReady from the
containers' readiness, reason ContainersNotReady or PodCompleted/PodFailed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import objects

Obj = dict[str, Any]


@dataclass
class ContainerState:
    """One container across its restarts (what containerStatuses[i] shows)."""

    name: str
    image: str
    process: bool = True  # False: a simulated container in a process pod (runs until deleted)
    state: Obj = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: Obj = field(default_factory=dict)
    restart_count: int = 0
    ready: bool = False
    started: bool = False
    ever_started: bool = False
    done: bool = False  # terminated and will not restart
    container_id: str = ""

    def status(self) -> Obj:
        out: Obj = {"name": self.name, "image": self.image, "imageID": f"process://{self.image}",
                    "ready": self.ready, "started": self.started, "restartCount": self.restart_count,
                    "state": self.state, "lastState": self.last_state}
        if self.container_id:
            out["containerID"] = self.container_id
        return out

    @property
    def exit_code(self) -> int | None:
        term = self.state.get("terminated")
        return None if term is None else int(term.get("exitCode", 0))


def waiting(reason: str, message: str = "") -> Obj:
    body: Obj = {"reason": reason}
    if message:
        body["message"] = message
    return {"waiting": body}


def phase(containers: list[ContainerState]) -> str:
    if containers and all(c.done for c in containers):
        return "Succeeded" if all(c.exit_code == 0 for c in containers) else "Failed"
    if any(c.ever_started for c in containers):
        return "Running"
    return "Pending"


def _condition(kind: str, ok: bool, now: str, old: dict[str, Obj], reason: str = "", message: str = "") -> Obj:
    status = "True" if ok else "False"
    prev = old.get(kind)
    since = prev.get("lastTransitionTime") if prev and prev.get("status") == status else now
    cond: Obj = {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": since}
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def pod_status(pod: Obj, containers: list[ContainerState], pod_ip: str, host_ip: str, sandbox: bool) -> Obj:
    """The whole status for `pod` now (conditions keep their transition time while unchanged)."""
    now = objects.now_rfc3339()
    status = dict(pod.get("status") or {})
    old = {c.get("type"): c for c in status.get("conditions") or []}
    ph = phase(containers)
    ready = ph == "Running" and all(c.ready for c in containers)
    reason, message = "", ""
    if ph in ("Succeeded", "Failed"):
        reason = "PodCompleted" if ph == "Succeeded" else "PodFailed"
    elif not ready:
        unready = " ".join(c.name for c in containers if not c.ready)
        reason, message = "ContainersNotReady", f"containers with unready status: [{unready}]"
    status["phase"] = ph
    status["hostIP"], status["hostIPs"] = host_ip, [{"ip": host_ip}]
    if pod_ip:
        status["podIP"], status["podIPs"] = pod_ip, [{"ip": pod_ip}]
    status.setdefault("startTime", now)
    status["conditions"] = [
        _condition("PodReadyToStartContainers", sandbox and ph not in ("Succeeded", "Failed"), now, old),
        _condition("Initialized", True, now, old),
        _condition("Ready", ready, now, old, reason, message),
        _condition("ContainersReady", ready, now, old, reason, message),
        old.get("PodScheduled") or _condition("PodScheduled", True, now, old),
    ]
    status["containerStatuses"] = [c.status() for c in containers]
    return status
