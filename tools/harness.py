"""Run a real sim-cluster, engine and shim as subprocesses: end-to-end tests and `bench e2e`.

Every process is started with `python -m tools.cli ...` from the checkout, waited for until it
is ready (sim-cluster prints its URL, the engine's socket accepts, the shim's status file shows
the wanted state), and stopped by its pid (SIGTERM, then SIGKILL) by `close()` — never by name.
Instance names are unique per user (`--name`), so parallel runs do not meet. `close()` also
removes the instance's /dev/shm segments, its status file and its temporary directory (logs,
config, socket) unless YKSHM_KEEP_LOGS is set.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import httpx
import orjson

from common.shimstatus import read_status, status_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ENGINE_CONFIG = """\
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: default
          - name: a
          - name: b
service:
  event:
    requestEventsEnabled: {request_events}
"""

KUBECONFIG = """\
apiVersion: v1
kind: Config
current-context: sim
clusters:
- name: sim
  cluster: {{server: "{server}"}}
contexts:
- name: sim
  context: {{cluster: sim, user: shim}}
users:
- name: shim
  user: {{token: not-checked-by-sim-cluster}}
"""


class HarnessError(RuntimeError):
    """A process did not start or a condition was not reached in time."""


def wait_for(cond: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while True:
        try:
            value = cond()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - a condition that cannot be evaluated yet
            last_exc = exc
        if time.monotonic() > deadline:
            extra = f" (last error: {last_exc})" if last_exc else ""
            raise HarnessError(f"timed out after {timeout:.0f}s waiting for {what}{extra}")
        time.sleep(interval)


def _stream_socket(resp: httpx.Response) -> socket.socket | None:
    """The socket under a streamed response, so another thread can shut it down: a thread
    blocked reading a watch wakes only when its socket is shut down (closing the client does
    not wake it; a test's teardown then waited out the join's 10 s)."""
    stream = resp.extensions.get("network_stream")
    return stream.get_extra_info("socket") if stream is not None else None


def _shut(sock: socket.socket | None) -> None:
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class ObjectWatch:
    """`keep(event)` of every watch event of one named object (None: not kept), in `seen`, from
    a thread; `close()` ends it. What a test needs to see states it would miss by polling."""

    def __init__(self, url: str, collection: str, name: str, keep: Callable[[dict], Any]) -> None:
        self.seen: list[Any] = []
        self._keep = keep
        self._client = httpx.Client(base_url=url, timeout=httpx.Timeout(10.0, read=None))
        self._request = (collection, {"watch": "1", "fieldSelector": f"metadata.name={name}"})
        self._sock: socket.socket | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with self._client.stream("GET", self._request[0], params=self._request[1]) as resp:
                self._sock = _stream_socket(resp)
                for line in resp.iter_lines():
                    if line and (kept := self._keep(orjson.loads(line))) is not None:
                        self.seen.append(kept)
        except Exception:  # noqa: BLE001 - the client is closed under it by close(), from the test's thread
            pass

    def close(self) -> None:
        _shut(self._sock)
        self._client.close()
        self._thread.join(10)


class BindWatch:
    """Every binding of the pods of `namespace` as the API server announces it: a thread watches
    the pods (from a list's resourceVersion, so nothing is missed) and records, per pod, each
    change of `spec.nodeName` from unset (or from another node) with the time it was seen.
    A pod bound twice has two entries; `close()` ends the watch."""

    def __init__(self, url: str, namespace: str = "default") -> None:
        self.binds: dict[str, list[tuple[float, str]]] = {}
        self._node: dict[str, str] = {}
        self._lock = threading.Lock()
        self._client = httpx.Client(base_url=url, timeout=httpx.Timeout(10.0, read=None))
        self._path = f"/api/v1/namespaces/{namespace}/pods"
        listed = self._client.get(self._path).json()
        for pod in listed["items"]:
            self._see(pod)
        self._rv = listed["metadata"]["resourceVersion"]
        self._sock: socket.socket | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _see(self, pod: dict[str, Any]) -> None:
        name, node = pod["metadata"]["name"], (pod.get("spec") or {}).get("nodeName") or ""
        with self._lock:
            if node and self._node.get(name, "") != node:
                self.binds.setdefault(name, []).append((time.time(), node))
            self._node[name] = node

    def _run(self) -> None:
        try:
            with self._client.stream("GET", self._path, params={
                    "watch": "1", "resourceVersion": self._rv}) as resp:
                self._sock = _stream_socket(resp)
                for line in resp.iter_lines():
                    if line:
                        event = orjson.loads(line)
                        if event.get("type") in ("ADDED", "MODIFIED"):
                            self._see(event["object"])
        except Exception:  # noqa: BLE001 - closed under it by close(), from the test's thread
            pass

    def bound_twice(self) -> list[str]:
        with self._lock:
            return sorted(name for name, binds in self.binds.items() if len(binds) > 1)

    def bound(self) -> set[str]:
        with self._lock:
            return set(self.binds)

    def times(self) -> list[float]:
        """When each binding was seen, in order."""
        with self._lock:
            return sorted(t for binds in self.binds.values() for t, _ in binds)

    def close(self) -> None:
        _shut(self._sock)
        self._client.close()
        self._thread.join(10)


class Kubectl:
    """The real `kubectl` against a cluster URL, with no kubeconfig of the user's."""

    def __init__(self, server: str, home: str) -> None:
        path = shutil.which("kubectl")
        assert path is not None, "kubectl is part of the base image and required by this test"
        self.base = [path, "--server", server]
        self.env = {**os.environ, "KUBECONFIG": os.path.join(home, "none")}
        self.home = home

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([*self.base, *args], capture_output=True, text=True, env=self.env,
                              timeout=60, input=stdin)

    def __call__(self, *args: str, stdin: str | None = None) -> str:
        out = self.run(*args, stdin=stdin)
        assert out.returncode == 0, (args, out.stderr)
        return out.stdout

    def json(self, *args: str) -> Any:
        return orjson.loads(self(*args, "-o", "json"))


class Proc:
    def __init__(self, role: str, args: list[str], log_dir: str, env: Mapping[str, str] | None = None,
                 stdout_pipe: bool = False, prefix: Iterable[str] = ()) -> None:
        """`prefix` goes before the command, and must exec it (the pid stays the role's): e.g.
        `nsenter -t PID -n` for a role inside a real control plane's network namespace."""
        self.role = role
        self.log_path = os.path.join(log_dir, f"{role}-{int(time.time() * 1000)}.log")
        self.log = open(self.log_path, "wb")
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = ROOT + os.pathsep + full_env.get("PYTHONPATH", "")
        full_env.update(env or {})
        self.popen = subprocess.Popen(
            [*prefix, sys.executable, "-m", "tools.cli", *args], cwd=ROOT, env=full_env,
            stdout=subprocess.PIPE if stdout_pipe else self.log, stderr=self.log,
            stdin=subprocess.DEVNULL)
        self.pid = self.popen.pid
        self.signalled: int | None = None  # the signal `send` sent, so `stop` sends it once

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, n: int = 20) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode(errors="replace")
        except OSError:
            return ""

    def send(self, sig: int = signal.SIGTERM) -> None:
        """Send sig by pid if the process still runs (the first half of `stop`)."""
        if self.popen.poll() is None and self.signalled != sig:
            self.signalled = sig
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 5.0) -> int | None:
        """sig, a wait of up to timeout, then SIGKILL; a signalled process is waited for only."""
        self.send(sig)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.pid, signal.SIGKILL)
            self.popen.wait(5)
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        self.log.close()
        return self.popen.returncode


class Replica:
    """One scheduler replica of an active/standby pair: its own engine (instance name
    `NAME-rI`, socket, status file) and a shim with `--leader-elect` on the Lease `lease`,
    through its own `CutProxy` to sim-cluster (so a test can cut this replica's API links).
    `timings` = (lease duration, renew deadline, retry period) in seconds."""

    def __init__(self, cluster: "Cluster", index: int, lease: str,
                 timings: tuple[float, float, float], extra: Iterable[str] = ()) -> None:
        from tools.cutproxy import CutProxy

        self.cluster = cluster
        self.index = index
        self.name = f"{cluster.name}-r{index}"
        self.identity = f"replica-{index}"
        self.socket = os.path.join(cluster.tmp, f"engine-r{index}.sock")
        self.status_file = status_path(self.name)
        port = int(cluster.url.rsplit(":", 1)[1].split("/")[0])
        self.proxy = CutProxy(port)
        self.engine = Proc(f"engine-r{index}", ["engine", "--config", cluster.config,
                                                "--name", self.name, "--socket", self.socket],
                           cluster.log_dir)
        lease_duration, renew_deadline, retry_period = timings
        try:
            os.unlink(self.status_file)
        except FileNotFoundError:
            pass
        self.shim = Proc(f"shim-r{index}", [
            "shim", "--api-server", self.proxy.url, "--name", self.name, "--socket", self.socket,
            "--leader-elect", "--leader-elect-resource-name", lease,
            "--leader-elect-identity", self.identity,
            "--leader-elect-lease-duration", f"{lease_duration:g}",
            "--leader-elect-renew-deadline", f"{renew_deadline:g}",
            "--leader-elect-retry-period", f"{retry_period:g}", *extra], cluster.log_dir)

        self.web: Proc | None = None
        self.web_url = ""

    def start_web(self, timeout: float = 30) -> str:
        """`ykshm web` of this replica (one worker, a free loopback port); its URL once it answers."""
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.web = Proc(f"web-r{self.index}", ["web", "--name", self.name, "--bind",
                                               f"127.0.0.1:{port}", "--workers", "1"],
                        self.cluster.log_dir)
        self.web_url = f"http://127.0.0.1:{port}"

        def up() -> bool:
            if not self.web.alive():
                raise HarnessError(f"web exited: {self.web.tail()}")
            return httpx.get(self.web_url + "/ws/v1/scheduler/healthcheck", timeout=2).status_code == 200

        wait_for(up, timeout, f"the web of replica {self.index}")
        return self.web_url

    def status(self) -> dict[str, Any]:
        return read_status(self.status_file)

    def role(self) -> str | None:
        """"leader" or "standby" from the shim's status file (None before it is written)."""
        try:
            return self.status().get("leaderElection", {}).get("role")
        except (OSError, ValueError):
            return None

    def wait_role(self, role: str, timeout: float = 30) -> dict[str, Any]:
        def ok() -> dict[str, Any] | None:
            if not self.shim.alive():
                raise HarnessError(f"shim {self.name} exited: {self.shim.tail()}")
            doc = self.status()
            return doc if doc.get("leaderElection", {}).get("role") == role else None

        return wait_for(ok, timeout, f"replica {self.index} {role}", interval=0.02)

    def close(self) -> None:
        procs = [p for p in (self.web, self.shim, self.engine) if p is not None]
        for proc in procs:
            proc.send(signal.SIGCONT)   # a paused process cannot act on SIGTERM
            proc.signalled = None
            proc.send()
        for proc in procs:
            proc.stop()
        self.proxy.close()
        for path in [self.status_file, *glob.glob(f"/dev/shm/{glob.escape(self.name)}.*")]:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


class Cluster:
    """sim-cluster + engine + shim for one instance name. Use as a context manager."""

    def __init__(self, name: str, *, nodes: int = 0, watch_history: int | None = None,
                 kubelet_delay: float = 0.05, request_events: bool = True,
                 log_dir: str | None = None, sim_args: Iterable[str] = (),
                 bookmark_interval: float | None = None,
                 engine_config: str | None = None) -> None:
        self.name = name
        self.tmp = tempfile.mkdtemp(prefix=f"ykshm-{name}-")
        self.log_dir = log_dir or self.tmp
        self.socket = os.path.join(self.tmp, "engine.sock")
        self.config = os.path.join(self.tmp, "queues.yaml")
        with open(self.config, "w") as f:  # `engine_config`: a whole queues.yaml of the test's
            f.write(engine_config if engine_config is not None else ENGINE_CONFIG.format(
                request_events="true" if request_events else "false"))
        self.status_file = status_path(name)
        self.nodes = nodes
        self.watch_history = watch_history
        self.kubelet_delay = kubelet_delay
        self.sim_args = list(sim_args)
        self.bookmark_interval = bookmark_interval
        self.sim: Proc | None = None
        self.engine: Proc | None = None
        self.shim: Proc | None = None
        self.streams: Proc | None = None
        self.url = ""
        self.api: httpx.Client | None = None
        self.engines_started = 0
        self.replicas: list[Replica] = []
        self.replicas_started = 0

    def start_replica(self, lease: str = "yunikorn-scheduler",
                      timings: tuple[float, float, float] = (15.0, 10.0, 2.0),
                      extra: Iterable[str] = ()) -> Replica:
        """One more scheduler replica on this sim-cluster (see `Replica`); not waited for.
        Indexes (names, identities) are never reused, even after a replica is removed."""
        replica = Replica(self, self.replicas_started, lease, timings, extra)
        self.replicas_started += 1
        self.replicas.append(replica)
        return replica

    # ------------------------------------------------------------------ processes
    def start_sim(self, timeout: float = 20) -> str:
        self.spawn_sim()
        return self.wait_sim(timeout)

    def spawn_sim(self) -> None:
        """Start sim-cluster without waiting for it (`wait_sim` reads its URL)."""
        args = ["sim-cluster", "--port", "0", "--nodes", str(self.nodes),
                "--kubelet-delay", str(self.kubelet_delay), *self.sim_args]
        if self.watch_history is not None:
            args += ["--watch-history", str(self.watch_history)]
        if self.bookmark_interval is not None:
            args += ["--bookmark-interval", str(self.bookmark_interval)]
        self.sim = Proc("sim-cluster", args, self.log_dir, stdout_pipe=True)

    def wait_sim(self, timeout: float = 20) -> str:
        """Wait for the spawned sim-cluster's "listening on URL" line; an API client on it."""
        assert self.sim is not None
        line = b""
        deadline = time.monotonic() + timeout
        assert self.sim.popen.stdout is not None
        os.set_blocking(self.sim.popen.stdout.fileno(), False)
        while b"listening on" not in line:
            chunk = self.sim.popen.stdout.read()
            if chunk:
                line += chunk
            elif not self.sim.alive():
                raise HarnessError(f"sim-cluster exited: {self.sim.tail()}")
            if time.monotonic() > deadline:
                raise HarnessError("sim-cluster did not start")
            time.sleep(0.02)
        self.url = line.decode().split("listening on", 1)[1].split()[0].strip()
        self.api = httpx.Client(base_url=self.url, timeout=30)
        return self.url

    def start_engine(self, timeout: float = 30) -> None:
        self.spawn_engine()
        self.wait_engine(timeout)

    def spawn_engine(self) -> None:
        """Start the engine without waiting for it (`wait_engine` waits for its socket)."""
        self.engine = Proc("engine", ["engine", "--config", self.config, "--name", self.name,
                                      "--socket", self.socket], self.log_dir)
        self.engines_started += 1

    def wait_engine(self, timeout: float = 30) -> None:
        assert self.engine is not None

        def ready() -> bool:
            if not self.engine.alive():
                raise HarnessError(f"engine exited: {self.engine.tail()}")
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(self.socket)
            return True

        try:
            wait_for(ready, timeout, "the engine socket")
        except HarnessError as exc:
            raise HarnessError(f"{exc}; engine log: {self.engine.tail()}") from None

    def start_streams(self, bundle_dir: str, extra: Iterable[str] = (), timeout: float = 30) -> Proc:
        """`ykshm streams` against this sim-cluster (installing the CRDs), ready once the
        Streams kinds are served. Its bundle repository takes any free port (tests run side by
        side) unless `extra` says otherwise."""
        extra = list(extra)
        if not {"--repository", "--repository-port"} & set(extra):
            extra += ["--repository-port", "0"]
        self.streams = Proc("streams", ["streams", "--api-server", self.url, "--install-crds",
                                        "--bundle-dir", bundle_dir,
                                        "--cache-dir", os.path.join(self.tmp, "bundle-cache"),
                                        *extra], self.log_dir)
        assert self.api is not None

        def ready() -> bool:
            if not self.streams.alive():
                raise HarnessError(f"streams exited: {self.streams.tail()}")
            return self.api.get("/apis/streams.ibm.com/v1/streamsjobs").status_code == 200

        wait_for(ready, timeout, "the Streams CRDs served")
        return self.streams

    def start_shim(self, wait_state: str | None = "Running", timeout: float = 30,
                   extra: Iterable[str] = (), kubeconfig: bool = False) -> None:
        try:
            os.unlink(self.status_file)
        except FileNotFoundError:
            pass
        if kubeconfig:
            path = os.path.join(self.tmp, "kubeconfig")
            with open(path, "w") as f:
                f.write(KUBECONFIG.format(server=self.url))
            source = ["--kubeconfig", path]
        else:
            source = ["--api-server", self.url]
        self.shim = Proc("shim", ["shim", *source, "--name", self.name,
                                  "--socket", self.socket, *extra], self.log_dir)
        if wait_state:
            self.wait_shim(wait_state, timeout)

    def kill_engine(self) -> None:
        assert self.engine is not None
        self.engine.stop(signal.SIGKILL)

    def close(self) -> None:
        for replica in self.replicas:
            replica.close()
        procs = [p for p in (self.streams, self.shim, self.engine, self.sim) if p is not None]
        for proc in procs:  # all signalled first: they shut down side by side, not in turn
            proc.send()
        for proc in procs:
            proc.stop()
        if self.api is not None:
            self.api.close()
        paths = [self.status_file, *glob.glob(f"/dev/shm/{glob.escape(self.name)}.*")]
        for path in paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        if not os.environ.get("YKSHM_KEEP_LOGS"):
            shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start_all(self, kubeconfig: bool = False, shim_extra: Iterable[str] = ()) -> "Cluster":
        """sim-cluster and engine start side by side (neither needs the other), then the shim."""
        self.spawn_sim()
        self.spawn_engine()
        self.wait_sim()
        self.wait_engine()
        self.start_shim(kubeconfig=kubeconfig, extra=shim_extra)
        return self

    # ------------------------------------------------------------------ shim / engine state
    def shim_status(self) -> dict[str, Any]:
        return read_status(self.status_file)

    def wait_shim(self, state: str, timeout: float = 30, *, registrations: int | None = None
                  ) -> dict[str, Any]:
        def ok() -> dict[str, Any] | None:
            if self.shim is not None and not self.shim.alive():
                raise HarnessError(f"shim exited: {self.shim.tail()}")
            doc = self.shim_status()
            if doc["state"] != state:
                return None
            if registrations is not None and doc["registrations"] < registrations:
                return None
            return doc

        try:
            return wait_for(ok, timeout, f"shim state {state}", interval=0.02)
        except HarnessError as exc:
            tail = self.shim.tail() if self.shim else ""
            raise HarnessError(f"{exc}; shim log: {tail}") from None

    def engine_doc(self) -> dict[str, Any] | None:
        from shm.snapshot import SnapshotReader

        reader = SnapshotReader.attach(self.name)
        try:
            return reader.read()
        finally:
            reader.close()

    def _partition(self, section: str) -> Any:
        """One section ("usage", "queues") of the engine snapshot, for the default partition."""
        by_partition = (self.engine_doc() or {}).get(section) or {}
        return by_partition.get("default") or next(iter(by_partition.values()), {})

    def applications(self) -> list[dict[str, Any]]:
        """The engine's applications (YuniKorn DAOs) of the default partition."""
        return list(self._partition("applications") or [])

    def usage(self) -> dict[str, Any]:
        """UGM usage of the default partition, normalised for comparison (no app lists order)."""
        return _normalise(self._partition("usage"))

    def queue_usage(self) -> dict[str, Any]:
        part = self._partition("queues")
        result: dict[str, Any] = {}

        def walk(q: Mapping[str, Any]) -> None:
            used = q.get("allocatedResource") or {}
            result[q.get("queuename") or q.get("queuePath") or "?"] = used
            for child in q.get("children") or []:
                walk(child)

        if part:
            walk(part)
        return result

    # ------------------------------------------------------------------ API objects
    def create_node(self, name: str, cpu: str = "16", memory: str = "64Gi", pods: str = "110",
                    unschedulable: bool = False) -> dict[str, Any]:
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                "spec": {"unschedulable": unschedulable},
                "status": {"capacity": {"cpu": cpu, "memory": memory, "pods": pods},
                           "allocatable": {"cpu": cpu, "memory": memory, "pods": pods},
                           "conditions": [{"type": "Ready", "status": "True"}]}}
        return self._ok(self.api.post("/api/v1/nodes", json=body))

    def delete_node(self, name: str) -> None:
        self._ok(self.api.delete(f"/api/v1/nodes/{name}"))

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> None:
        self._ok(self.api.patch(f"/api/v1/nodes/{name}", content=orjson.dumps(patch),
                                headers={"Content-Type": "application/merge-patch+json"}))

    def create_pod(self, name: str, *, namespace: str = "default", app: str | None = "app-1",
                   cpu: str = "100m", memory: str = "64Mi", scheduler: str = "yunikorn",
                   node: str | None = None, queue: str | None = None,
                   annotations: Mapping[str, str] | None = None,
                   spec_extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return self._ok(self.api.post(f"/api/v1/namespaces/{namespace}/pods",
                                      json=pod_body(name, namespace=namespace, app=app, cpu=cpu,
                                                    memory=memory, scheduler=scheduler,
                                                    node=node, queue=queue,
                                                    annotations=annotations,
                                                    spec_extra=spec_extra)))

    def delete_pod(self, name: str, namespace: str = "default") -> None:
        self._ok(self.api.delete(f"/api/v1/namespaces/{namespace}/pods/{name}"))

    def pods(self, namespace: str | None = None) -> list[dict[str, Any]]:
        path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
        return self._ok(self.api.get(path))["items"]

    def pod(self, name: str, namespace: str = "default") -> dict[str, Any]:
        return self._ok(self.api.get(f"/api/v1/namespaces/{namespace}/pods/{name}"))

    def events(self, namespace: str = "default") -> list[dict[str, Any]]:
        return self._ok(self.api.get(f"/api/v1/namespaces/{namespace}/events"))["items"]

    def wait_bound(self, names: Iterable[str], timeout: float = 30, namespace: str = "default",
                   phase: str | None = None) -> dict[str, dict[str, Any]]:
        want = set(names)

        def ok() -> dict[str, dict[str, Any]] | None:
            got = {p["metadata"]["name"]: p for p in self.pods(namespace)
                   if p["metadata"]["name"] in want and p["spec"].get("nodeName")
                   and (phase is None or p.get("status", {}).get("phase") == phase)}
            return got if len(got) == len(want) else None

        return wait_for(ok, timeout, f"{len(want)} pods bound", interval=0.1)

    @staticmethod
    def _ok(resp: httpx.Response) -> Any:
        if resp.status_code >= 400:
            raise HarnessError(f"{resp.request.method} {resp.request.url.path}: "
                               f"{resp.status_code} {resp.text[:300]}")
        return resp.json() if resp.content else None


def pod_body(name: str, *, namespace: str = "default", app: str | None = "app-1",
             cpu: str = "100m", memory: str = "64Mi", scheduler: str = "yunikorn",
             node: str | None = None, queue: str | None = None,
             annotations: Mapping[str, str] | None = None,
             spec_extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A pod of one container; `spec_extra` adds spec fields (nodeSelector, tolerations...)."""
    labels = {}
    if app:
        labels["applicationId"] = app
    if queue:
        labels["queue"] = queue
    spec: dict[str, Any] = {"schedulerName": scheduler, "containers": [
        {"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
    if node:
        spec["nodeName"] = node
    spec.update(spec_extra or {})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels,
                         "annotations": dict(annotations or {})},
            "spec": spec}


def _normalise(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {k: _normalise(v) for k, v in sorted(obj.items())}
    if isinstance(obj, list):
        items = [_normalise(v) for v in obj]
        try:
            return sorted(items, key=lambda v: orjson.dumps(v, option=orjson.OPT_SORT_KEYS))
        except TypeError:
            return items
    return obj
