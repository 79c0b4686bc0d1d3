"""Process pods: the simulated kubelet runs ykshm's own containers as local processes.

A bound pod with a container whose image `procimages` maps to a command is handed here by the
`Kubelet` instead of being simulated. Per pod: a loopback address of this sim-cluster's block
(`loopback`, 127.N.0.x, never 127.0.0.1) as `status.podIP`, a directory (`volumes.PodDir`, 0700)
with its volumes, ServiceAccount token and logs, with sim-cluster as root a uid of its own that every
run drops to (`sandbox`), and one task per process container that

1. configures it: volumes (a missing Secret/ConfigMap: waiting `ContainerCreating`, a `FailedMount`
   event, retried every `retry` s), the environment (`podenv`; a bad reference:
   `CreateContainerConfigError`, retried), the command (`procimages`; not ykshm:
   `CreateContainerError`); `$(VAR)` in command/args expanded, in-container paths mapped;
2. starts `ykshm ARGS...` in its own session (stdout+stderr to the run's log file, stdin
   /dev/null, killed with sim-cluster even on SIGKILL through PR_SET_PDEATHSIG), `containerID`
   `process://PID`, events Pulled/Created/Started, probes (`probes`). The process is forked by
   the fork server, a warm interpreter with trio and the CLI imported (`--fork-server`, the
   default; `forkserver` says what differs from a fresh one), or with `--no-fork-server` started
   fresh as `python -I -m tools.cli ARGS` (`launcher`);
3. on exit writes `terminated` (exitCode, reason Completed or Error, the last log lines as
   `message` for a failure: a process cannot write /dev/termination-log, so `File` acts as
   `FallbackToLogsOnError`), then restarts it as `restartPolicy` says (Always; OnFailure unless
   exit 0; Never) after the kubelet's back-off: the first restart at once, then `backoff_initial`
   (10 s) doubling to `backoff_max` (300 s), reset after a run of twice the maximum; meanwhile the
   container waits in `CrashLoopBackOff` (event BackOff);
4. a failed liveness or startup probe kills the run (event Killing) and it restarts as above.

Deleting the pod stops its processes (SIGTERM to the process group, `terminationGracePeriodSeconds`,
then SIGKILL), then removes the directory and frees the address; the pod object itself is gone from
the API at once (sim-cluster has no graceful deletion). Stopping sim-cluster stops every process
pod the same way with at most `shutdown_grace` seconds each.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from common.backoff import Backoff

from common import podsandbox

from . import launcher, objects, podenv, podevents, podlogs, podstatus, podtoken, probes, procimages, sandbox, volumes
from .launcher import Child, ForkedChild
from .loopback import Block
from .store import Store

log = logging.getLogger("ykshm.sim-cluster.procpods")
Obj = dict[str, Any]


@dataclass(frozen=True)
class Settings:
    pods_dir: Path
    images: procimages.ProcessImages
    api_host: str
    api_port: int
    backoff_initial: float = 10.0
    backoff_max: float = 300.0
    retry: float = 2.0
    shutdown_grace: float = 5.0
    fork_server: bool = True  # runs forked by the warm `forkserver`; False: a fresh interpreter each
    uid_base: int | None = None  # each pod's own uid is base + index (`sandbox`); None: sim-cluster's


class ProcPods:
    """Every process pod of this sim-cluster; `run` owns their tasks."""

    def __init__(self, store: Store, settings: Settings, block: Block, signer: podtoken.Signer = podtoken.unsigned,
                 extra_env: Callable[[Obj], dict[str, str]] | None = None) -> None:
        self.store = store
        self.settings = settings
        self.block = block  # pod addresses, and the loopback address serving a ClusterIP
        self.signer = signer
        self.extra_env = extra_env  # the Service names' resolver settings (services.py)
        self.runners: dict[str, PodRunner] = {}
        self.launcher = launcher.Launcher(settings.fork_server)
        self._nursery: trio.Nursery | None = None

    def handles(self, pod: Obj) -> bool:
        return any(self.settings.images.runs(c.get("image")) for c in (pod.get("spec") or {}).get("containers") or [])

    def start(self, pod: Obj, node: Obj) -> None:
        uid = pod["metadata"]["uid"]
        if uid in self.runners or self._nursery is None:
            return
        if self.settings.uid_base is None and not self.runners:
            log.warning("process pod %s/%s runs as this user (uid %d): sim-cluster is not root, so whoever may "
                        "create a pod may act as this user (simcluster/sandbox.py)",
                        pod["metadata"]["namespace"], pod["metadata"]["name"], os.geteuid())
        runner = PodRunner(self, pod, node)
        self.runners[uid] = runner
        self._nursery.start_soon(runner.run, name=f"pod {pod['metadata']['namespace']}/{pod['metadata']['name']}")

    def stop(self, uid: str) -> None:
        runner = self.runners.get(uid)
        if runner is not None:
            runner.stop()

    def fail(self, uid: str, code: int) -> None:
        """`ykshm.io/exit-code` on a running process pod (kubelet.py): end its current runs with
        `code`, once per pod and code (the pod's every status write calls this again)."""
        runner = self.runners.get(uid)
        if runner is not None and runner.failed_with != code:
            runner.failed_with = code
            for cont in runner.containers.values():
                cont.fail(code)

    def knows(self, uid: str, container: str) -> bool:
        runner = self.runners.get(uid)
        return runner is not None and container in runner.containers

    def log_file(self, uid: str, container: str, previous: bool) -> tuple[Path | None, bool]:
        runner = self.runners.get(uid)
        cont = runner.containers.get(container) if runner else None
        return cont.log_file(previous) if cont else (None, False)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self.settings.pods_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        async with trio.open_nursery() as service:
            await service.start(self.launcher.run)
            try:
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    task_status.started()
                    await trio.sleep_forever()
            finally:
                self.launcher.close()  # every pod's processes are gone: the fork server may go


class PodRunner:
    """One process pod: its address, directory, containers and status writes."""

    def __init__(self, owner: ProcPods, pod: Obj, node: Obj) -> None:
        self.owner = owner
        self.pod = pod
        meta = pod["metadata"]
        self.uid, self.ns, self.name = meta["uid"], meta["namespace"], meta["name"]
        addrs = {a.get("type"): a.get("address") for a in (node.get("status") or {}).get("addresses") or []}
        self.host_ip = addrs.get("InternalIP") or "10.0.0.1"
        self.node = node
        self.ip = owner.block.take_pod_address()
        self.identity = sandbox.identity(owner.settings.uid_base, self.ip)
        self.dir = volumes.PodDir.create(owner.settings.pods_dir, pod, self.identity)
        self.stopping = trio.Event()
        self.failed_with: int | None = None     # the exit-code annotation already applied
        images = owner.settings.images
        self.states = [podstatus.ContainerState(str(c.get("name")), str(c.get("image")), images.runs(c.get("image")))
                       for c in pod["spec"].get("containers") or []]
        self.containers = {s.name: ContainerRunner(self, c, s)
                           for c, s in zip(pod["spec"].get("containers") or [], self.states) if s.process}

    def current(self) -> Obj | None:
        pod = self.owner.store.get("pods", self.ns, self.name)
        return pod if pod is not None and pod["metadata"]["uid"] == self.uid else None

    def write(self) -> None:
        """Store the status the containers' states make (nothing when the pod is gone)."""
        pod = self.current()
        if pod is None:
            return
        status = podstatus.pod_status(pod, self.states, self.ip, self.host_ip, sandbox=True)
        if status != pod.get("status"):
            self.owner.store.replace("pods", {**pod, "metadata": dict(pod["metadata"]), "status": status})

    def event(self, container: str, reason: str, message: str, type_: str = "Normal") -> None:
        pod = self.current()
        if pod is not None:
            podevents.post(self.owner.store, pod, container, reason, message, type_)

    def stop(self) -> None:
        self.stopping.set()
        for cont in self.containers.values():
            cont.kill.set()

    async def sleep_or_stop(self, seconds: float) -> None:
        with trio.move_on_after(seconds):
            await self.stopping.wait()

    async def run(self) -> None:
        try:
            now = objects.now_rfc3339()
            for state in self.states:
                if not state.process:  # a simulated container beside them: running until deleted
                    state.state, state.ready, state.started, state.ever_started = (
                        {"running": {"startedAt": now}}, True, True, True)
            self.write()
            try:
                async with trio.open_nursery() as nursery:
                    for cont in self.containers.values():
                        nursery.start_soon(cont.run)
                self.write()
            except Exception:  # a kubelet bug (or a full disk) stops this pod, never sim-cluster
                log.exception("process pod %s/%s failed", self.ns, self.name)
            await self.stopping.wait()  # logs stay readable until the pod is deleted
        finally:
            sandbox.kill_all(self.identity)  # nothing of this uid outlives the pod: the next one gets it
            self.dir.remove()
            self.owner.block.give_pod_address(self.ip)
            self.owner.runners.pop(self.uid, None)


@dataclass
class Launch:
    argv: list[str]
    env: dict[str, str]
    cwd: str
    identity: sandbox.PodIdentity | None = None  # who the run is (`sandbox`); None: sim-cluster's user


class ContainerRunner:
    """One process container across its runs (see the module text, steps 1-4)."""

    def __init__(self, pod: PodRunner, spec: Obj, state: podstatus.ContainerState) -> None:
        self.pod = pod
        self.spec = spec
        self.state = state
        self.kill = trio.Event()
        self.live = False
        self.forced_code: int | None = None     # fail(): the exit code the current run ends with
        settings = pod.owner.settings
        self.backoff = Backoff(settings.backoff_initial, settings.backoff_max, at_once_first=True)
        self.problem = ""  # the last configuration problem reported by an event
        self.ports = {p["name"]: p["containerPort"] for p in spec.get("ports") or [] if p.get("name")}

    # -- logs -------------------------------------------------------------------------------
    def log_file(self, previous: bool) -> tuple[Path | None, bool]:
        run = self.state.restart_count - (1 if previous else 0)
        path = podlogs.log_path(self.pod.dir.logs, self.state.name, run)
        if run < 0 or not path.exists():
            return None, False
        return path, self.live and not previous

    # -- step 1: configure ----------------------------------------------------------------------
    def _base_env(self, pod: Obj, mounts: volumes.MountMap) -> dict[str, str]:
        owner = self.pod.owner
        env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "HOSTNAME": self.pod.name,
               "HOME": str(self.pod.dir.root)}
        if (pod.get("spec") or {}).get("enableServiceLinks") is not False:
            services = owner.store.list("services", self.pod.ns)[0]
            links = podenv.service_links(services)
            env.update({k: owner.block.service_address(v) if k.endswith("_SERVICE_HOST") else v
                        for k, v in links.items()})
        host, port = owner.settings.api_host, str(owner.settings.api_port)
        env.update({"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port,
                    "KUBERNETES_SERVICE_PORT_HTTPS": port, "KUBERNETES_PORT": f"tcp://{host}:{port}"})
        return env

    def _token(self, audiences: list[str] | None, expiration: int) -> str:
        pod = self.pod.current() or self.pod.pod
        sa = self.pod.owner.store.get("serviceaccounts", self.pod.ns,
                                      (pod.get("spec") or {}).get("serviceAccountName") or "default")
        return self.pod.owner.signer(podtoken.claims(pod, sa, self.pod.node, audiences, expiration))

    def _prepare(self) -> Launch | None:
        store = self.pod.owner.store
        pod = self.pod.current() or self.pod.pod
        lookup = store.get
        sa = store.get("serviceaccounts", self.pod.ns, (pod.get("spec") or {}).get("serviceAccountName") or "default")
        try:
            mounts = volumes.materialise(pod, self.spec, self.pod.dir,
                                         volumes.Materialiser(pod, lookup, self._token, self.pod.identity), sa)
        except (volumes.VolumeError, OSError) as exc:
            self._waiting("ContainerCreating", "", "FailedMount", f"MountVolume.SetUp failed: {exc}")
            return None
        try:
            words = self.pod.owner.settings.images.argv(self.spec)
            allocatable = (self.pod.node.get("status") or {}).get("allocatable") or {}
            env = podenv.container_env(pod, self.spec, lookup, self._base_env(pod, mounts), allocatable)
            env = {k: mounts.rewrite(v) for k, v in env.items()}
            if self.pod.owner.extra_env is not None:
                env.update(self.pod.owner.extra_env(pod))
            env["YKSHM_ROOT"] = str(self.pod.dir.root)
            env[podsandbox.ENV] = str(self.pod.dir.path)  # after the pod's env: it cannot unset it
            argv = procimages.resolve([mounts.rewrite(podenv.expand(w, env)) for w in words])
        except podenv.ConfigError as exc:
            self._waiting("CreateContainerConfigError", str(exc), "Failed", f"Error: {exc}")
            return None
        except procimages.RefusedCommand as exc:
            self._waiting("CreateContainerError", str(exc), "Failed", f"Error: {exc}")
            return None
        workdir = self.spec.get("workingDir") or "/"
        cwd = mounts.host_path(workdir)
        if cwd is None:  # in root/ (never through a link the pod planted); a volume's is the pod's to make
            cwd = str(self.pod.dir.root / workdir.lstrip("/"))
            try:
                os.close(volumes.open_dirs(self.pod.dir.root, workdir.strip("/").split("/"), self.pod.identity))
            except (volumes.VolumeError, OSError) as exc:
                self._waiting("CreateContainerError", f"workingDir {workdir}: {exc}", "Failed", f"Error: {exc}")
                return None
        return Launch(argv, env, cwd, self.pod.identity)

    def _waiting(self, reason: str, message: str, event: str, event_message: str) -> None:
        if self.problem != event_message:  # once per new problem (a real kubelet repeats and counts it)
            self.problem = event_message
            self.pod.event(self.state.name, event, event_message, "Warning")
        self.state.state = podstatus.waiting(reason, message)
        self.pod.write()

    # -- the loop ------------------------------------------------------------------------------
    async def run(self) -> None:
        policy = (self.pod.pod.get("spec") or {}).get("restartPolicy") or "Always"
        while not self.pod.stopping.is_set():
            launch = self._prepare()
            if launch is None:
                await self.pod.sleep_or_stop(self.pod.owner.settings.retry)
                continue
            code, ran = await self._run_once(launch)
            if self.pod.stopping.is_set():
                return
            if policy == "Never" or (policy == "OnFailure" and code == 0):
                self.state.done = True
                self.pod.write()
                return
            await self._back_off(ran)

    async def _back_off(self, ran: float) -> None:
        settings = self.pod.owner.settings
        if ran >= 2 * settings.backoff_max:
            self.backoff.reset()
        delay = self.backoff.next()
        last = self.state.state
        if delay > 0:
            who = f"{self.pod.name}_{self.pod.ns}({self.pod.uid})"
            self.state.last_state = last
            self.state.state = podstatus.waiting(
                "CrashLoopBackOff", f"back-off {delay:g}s restarting failed container={self.state.name} pod={who}")
            self.pod.write()
            self.pod.event(self.state.name, "BackOff", f"Back-off restarting failed container {self.state.name} "
                                                        f"in pod {who}", "Warning")
            await self.pod.sleep_or_stop(delay)
        self.state.last_state = last
        self.state.restart_count += 1

    # -- step 2-4: one run -----------------------------------------------------------------------
    async def _run_once(self, launch: Launch) -> tuple[int, float]:
        state, logs = self.state, self.pod.dir.logs
        stale = podlogs.log_path(logs, state.name, state.restart_count - 2)
        stale.unlink(missing_ok=True)
        path = podlogs.log_path(logs, state.name, state.restart_count)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        started = objects.now_rfc3339()
        try:
            proc = await self.pod.owner.launcher.start(launch.argv, launch.env, launch.cwd, fd, launch.identity)
        except OSError as exc:
            os.write(fd, f"{exc}\n".encode())
            return self._exited(128, started, path, "StartError"), 0.0  # the kubelet's words for it
        finally:
            os.close(fd)
        self.problem = ""
        self.kill = trio.Event()
        if self.pod.stopping.is_set():
            self.kill.set()
        self.live = True
        t0 = trio.current_time()
        gate = self._running(proc.pid, started)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._killer, proc)
                self._start_probes(nursery, launch, gate)
                await proc.wait()
                nursery.cancel_scope.cancel()
        finally:
            self.live = False
            if proc.returncode is None:
                with trio.CancelScope(shield=True):
                    await terminate(proc, self.pod.owner.settings.shutdown_grace)
        code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        if self.forced_code is not None:
            code, self.forced_code = self.forced_code, None
        return self._exited(code, started, path), trio.current_time() - t0

    def _running(self, pid: int, started: str) -> trio.Event:
        state = self.state
        state.state = {"running": {"startedAt": started}}
        state.container_id = f"process://{pid}"
        state.started = "startupProbe" not in self.spec
        state.ready = state.started and "readinessProbe" not in self.spec
        state.ever_started = True
        self.pod.write()
        name, image = state.name, state.image
        for reason, message in (("Pulled", f'Container image "{image}" already present on machine'),
                                ("Created", f"Created container: {name}"), ("Started", f"Started container {name}")):
            self.pod.event(name, reason, message)
        gate = trio.Event()
        if state.started:
            gate.set()
        return gate

    def _exited(self, code: int, started: str, path: Path, reason: str = "") -> int:
        reason = reason or ("Completed" if code == 0 else "Error")
        term: Obj = {"exitCode": code, "reason": reason, "startedAt": started,
                     "finishedAt": objects.now_rfc3339(), "containerID": self.state.container_id}
        if code != 0:
            term["message"] = podlogs.tail(path)
        self.state.state = {"terminated": term}
        self.state.ready = self.state.started = False
        self.pod.write()
        return code

    async def _killer(self, proc: Child | ForkedChild) -> None:
        await self.kill.wait()
        grace = (self.pod.pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        await terminate(proc, 30.0 if grace is None else float(grace))

    def _start_probes(self, nursery: trio.Nursery, launch: Launch, gate: trio.Event) -> None:
        target = probes.Target(self.pod.ip, self.ports, launch.env, launch.cwd, launch.identity)
        name = self.state.name

        def failed(message: str) -> None:
            self.pod.event(name, "Unhealthy", message, "Warning")

        def startup(ok: bool) -> None:
            if ok:
                self.state.started = True
                self.state.ready = "readinessProbe" not in self.spec
                gate.set()
                self.pod.write()
            else:
                self._kill_for(f"Container {name} failed startup probe, will be restarted")

        def liveness(ok: bool) -> None:
            if not ok:
                self._kill_for(f"Container {name} failed liveness probe, will be restarted")

        def readiness(ok: bool) -> None:
            if self.live and self.state.ready != ok:
                self.state.ready = ok
                self.pod.write()

        handlers = {"startupProbe": startup, "livenessProbe": liveness, "readinessProbe": readiness}
        for kind in probes.KINDS:
            if self.spec.get(kind):
                nursery.start_soon(lambda k=kind: probes.run(k, self.spec[k], target, handlers[k], failed,
                                                             gate=None if k == "startupProbe" else gate))

    def fail(self, code: int) -> None:
        """End the current run as if its process exited with `code` (the exit-code annotation)."""
        if self.live:
            self.forced_code = code
            self.kill.set()

    def _kill_for(self, message: str) -> None:
        self.pod.event(self.state.name, "Killing", message)
        self.kill.set()


async def terminate(proc: Child | ForkedChild, grace: float) -> None:
    """SIGTERM the run's process group, SIGKILL it after `grace` seconds."""
    _signal_group(proc, signal.SIGTERM)
    with trio.move_on_after(grace):
        await proc.wait()
        return
    _signal_group(proc, signal.SIGKILL)
    await proc.wait()


def _signal_group(proc: Child | ForkedChild, sig: int) -> None:
    if proc.returncode is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
