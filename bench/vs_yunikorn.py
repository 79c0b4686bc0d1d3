"""`ykshm bench vs-yunikorn`: Apache YuniKorn and ykshm side by side on one real control plane and
the same KWOK nodes (issue 32).

The bench re-runs itself as the CMD of `ykshm realk8s run` (so the whole run is in a network
namespace of its own, and the control plane is stopped with it), creates N KWOK nodes (Node
objects annotated `kwok.x-k8s.io/node=fake`, which the `kwok` controller manages: Ready, and every
pod bound to them Running, without processes), starts `kwok`, and then alternates rounds, YuniKorn
first, on a fresh namespace each: the same `queues.yaml` (QUEUES, also `yunikorn-configs` in the
scheduler's namespace), the same pods. One scheduler runs at a time (both answer to
`schedulerName: yunikorn`); a round starts its scheduler, runs the workload, asks the REST
questions, stops the scheduler by pid and force-deletes the namespace's pods.

Figures, per workload and scheduler: pods/s (first create to last bind, from a watch), p50/p99
create -> bound (the POST's answer to the watch event carrying spec.nodeName), CPU-seconds per
1,000 pods (the scheduler's processes: YuniKorn's one; ykshm's engine + shim) and peak RSS
(sampled every 0.2 s), `/ws/v1/events/batch?count=10000` p50, and for `recovery` the time from a
SIGKILL-and-restart to the next new pod bound. Parity: the REST answers of both, normalised
(ids, timestamps and unordered lists dropped or sorted), diffed; each difference printed.

YuniKorn runs under its own client-certificate identity `yunikorn:scheduler` bound to the Helm
chart's RBAC (its ClusterRole `yunikorn-scheduler` + `system:kube-scheduler` +
`system:volume-scheduler` + the Role on configmaps; yunikorn-deploy.md 3.1), a User subject
instead of the chart's ServiceAccount: the run's PKI signs client certificates, and what is
measured is the scheduler, not the token path. ykshm runs under `ykshm run`'s shim identity.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import psutil

from simcluster import pki
from tools import harness, peers_build, realk8s_build, run_identities
from tools.realk8s_plane import _die_with_parent

NS = "yunikorn"
YK_WEB = "127.0.0.1:19080"
YUNIKORN_WEB = "127.0.0.1:9080"
QUEUES = """\
partitions:
  - name: default
    placementrules:
      - name: provided
        create: false
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: bench
          - name: limited
            limits:
              - limit: user cap
                users: [alice]
                maxresources: {vcore: 1000m}
              - limit: group cap
                groups: [devs]
                maxresources: {vcore: 1500m}
"""
RBAC = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: yunikorn-scheduler}
rules:
- {apiGroups: [""], resources: [namespaces], verbs: [get, watch, list]}
- {apiGroups: [scheduling.k8s.io], resources: [priorityclasses], verbs: [get, watch, list]}
- {apiGroups: [storage.k8s.io], resources: [volumeattachments], verbs: [get, watch, list]}
- {apiGroups: [""], resources: [pods], verbs: [get, watch, list, create, patch, update, delete]}
- {apiGroups: [""], resources: [configmaps], verbs: [get, watch, list]}
""" + "".join(f"""---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {name}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {role}}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: "yunikorn:scheduler"}}]
""" for name, role in (("yunikorn-rbac", "yunikorn-scheduler"), ("yunikorn-rbac-kube-scheduler", "system:kube-scheduler"),
                       ("yunikorn-rbac-volume-scheduler", "system:volume-scheduler")))
SHOWN = 200  # differences printed per workload; --json has every one
VOLATILE = ("id", "allocationkey", "time", "uuid", "uid", "version", "timestamp", "lastupdate", "resourceversion", "heartbeat")


# ------------------------------------------------------------------------------ the API client
RETRIES = 5


class Api:
    """kube-apiserver as the admin (client certificate), one keep-alive connection per thread."""

    def __init__(self, server: str, made: pki.Pki) -> None:
        self.url = urlparse(server)
        self.ctx = ssl.create_default_context(cafile=str(made.ca_crt))
        self.ctx.load_cert_chain(str(made.admin_crt), str(made.admin_key))
        self.local = threading.local()

    def conn(self) -> http.client.HTTPSConnection:
        if getattr(self.local, "conn", None) is None:
            self.local.conn = http.client.HTTPSConnection(self.url.hostname, self.url.port, context=self.ctx, timeout=60)
        return self.local.conn

    def call(self, method: str, path: str, body: object = None, ok=(200, 201, 202, 404, 409),
             content_type: str = "application/json", timeout: float = 60) -> dict:
        """One request; a dropped connection, 429 or 5xx (kube-apiserver shedding load under
        10,000 pods) is retried a few times with a pause, as client-go does."""
        data = json.dumps(body).encode() if body is not None else None
        for attempt in range(RETRIES):
            try:
                c = self.conn()
                c.timeout = timeout
                if c.sock is not None:
                    c.sock.settimeout(timeout)
                c.request(method, path, body=data, headers={"Content-Type": content_type})
                resp = c.getresponse()
                text = resp.read()
            except (OSError, http.client.HTTPException):
                self.local.conn = None
                if attempt == RETRIES - 1:
                    raise
                time.sleep(0.5 * (attempt + 1))
                continue
            if (resp.status == 429 or resp.status >= 500) and resp.status not in ok:
                if attempt == RETRIES - 1:
                    break
                time.sleep(0.5 * (attempt + 1))
                continue
            break
        if resp.status not in ok:
            raise RuntimeError(f"{method} {path}: {resp.status} {text[:200]!r}")
        return json.loads(text or b"{}")

    def watch(self, path: str, opened: list):
        """Yield (monotonic time, raw line) from a watch stream until it ends; `opened` gets the
        connection, so the round can close it."""
        c = http.client.HTTPSConnection(self.url.hostname, self.url.port, context=self.ctx, timeout=3600)
        opened.append(c)
        c.request("GET", path)
        resp = c.getresponse()
        try:
            for line in resp:
                yield time.monotonic(), line
        finally:
            c.close()


# ------------------------------------------------------------------------------ workloads
@dataclass(frozen=True)
class Workload:
    name: str
    apps: int
    pods: int           # per app
    queue: str = "root.bench"
    users: tuple[tuple[str, str], ...] = ()  # (user, group) per app, round robin


def workloads(scale: float, shapes: list[str]) -> list[Workload]:
    """YuniKorn's performance shapes (YUNIKORN-1715), scaled; `shapes` (AxP) replaces them."""
    def n(x: int) -> int:
        return max(1, round(x * scale))
    sized = [(int(a), int(p)) for a, p in (s.split("x") for s in shapes)] or \
        [(n(10), 1000 if scale >= 1 else n(1000)), (n(100), n(100)), (n(1000), 10)]
    throughput = [Workload(f"{a}x{p}", a, p) for a, p in sized]
    apps, pods = sized[0]
    return [*throughput,
            Workload("limits", 4, 10, "root.limited", (("alice", "devs"), ("bob", "devs"), ("carol", "ops"), ("dave", "ops"))),
            Workload("recovery", apps, pods)]


def pod(ns: str, app: str, i: int, w: Workload, user: tuple[str, str] | None) -> dict:
    annotations = {"yunikorn.apache.org/user.info": json.dumps({"user": user[0], "groups": [user[1]]})} if user else {}
    return harness.pod_body(f"{app}-{i}", namespace=ns, app=app, queue=w.queue, annotations=annotations,
                            spec_extra={"tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists"}]})


# ------------------------------------------------------------------------------ one scheduler
@dataclass
class Scheduler:
    """A scheduler's processes, its REST address, its log(s) and how it starts."""

    name: str
    web: str
    start: object
    procs: list = field(default_factory=list)   # harness.Proc or Popen
    measured: int = 1                            # the first N of procs are "the scheduler" (CPU, RSS)
    logs: list = field(default_factory=list)
    cluster: harness.Cluster | None = None      # ykshm's: closing it unlinks its /dev/shm segments

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs
                if (p.poll() is None if isinstance(p, subprocess.Popen) else p.alive())]

    def role_of(self, pid: int) -> str:
        for p in self.procs:
            if p.pid == pid:
                return getattr(p, "role", self.name)
        return str(pid)

    def measured_pids(self) -> list[int]:
        """What the issue counts as the scheduler: YuniKorn's one process; ykshm's engine + shim
        (its web, the REST reader beside them, is not counted: it holds no scheduling state)."""
        return [pid for pid in self.pids() if pid in {p.pid for p in self.procs[:self.measured]}]

    def tail(self, n: int = 8) -> str:
        out = []
        for log in self.logs:
            try:
                out += Path(log).read_text(errors="replace").splitlines()[-n:]
            except OSError:
                pass
        return "\n".join(out[-n:])


def rest(web: str, path: str, timeout: float = 30) -> object:
    with urllib.request.urlopen(f"http://{web}{path}", timeout=timeout) as resp:
        return json.loads(resp.read())


def ready(web: str, timeout: float) -> None:
    harness.wait_for(lambda: _try(lambda: rest(web, "/ws/v1/partitions", 2)), timeout, f"REST on {web}", 0.2)


def _try(fn):
    try:
        return fn() or True
    except Exception:  # noqa: BLE001 - a probe: not up yet
        return False


class Procs:
    """psutil view of a scheduler's processes and their children: CPU seconds, RSS."""

    def __init__(self, pids: list[int]) -> None:
        self.procs = [psutil.Process(p) for p in pids]

    def _all(self):
        for p in self.procs:
            yield p
            yield from self._children(p)

    def cpu(self) -> float:
        total = 0.0
        for p in self._all():
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total

    def rss(self) -> int:
        return sum(self.rss_by_process().values())

    def rss_by_process(self) -> dict[int, int]:
        """Each top process's RSS with its children's, by the top process's pid."""
        out: dict[int, int] = {}
        for top in self.procs:
            for p in (top, *self._children(top)):
                try:
                    out[top.pid] = out.get(top.pid, 0) + p.memory_info().rss
                except psutil.Error:
                    pass
        return out

    @staticmethod
    def _children(p: psutil.Process) -> list:
        try:
            return p.children(recursive=True)
        except psutil.Error:
            return []


# ------------------------------------------------------------------------------ a round
@dataclass
class Result:
    workload: str
    scheduler: str
    ok: bool = True
    pods: int = 0
    pods_per_s: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    cpu_per_1000: float = 0.0
    peak_rss_mb: float = 0.0
    peak_rss_by_role_mb: dict = field(default_factory=dict)   # the profile of the RSS figure
    events_p50_ms: float = 0.0
    events_bytes: int = 0        # the events batch answer's size, head included
    recovery_s: float | None = None
    error: str = ""
    rest: dict = field(default_factory=dict, repr=False)


class Round:
    """One workload under one scheduler on a fresh namespace."""

    def __init__(self, api: Api, sched: Scheduler, w: Workload, ns: str, timeout: float) -> None:
        self.api, self.sched, self.w, self.ns, self.timeout = api, sched, w, ns, timeout
        self.created: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.closed = False
        self.conns: list[http.client.HTTPSConnection] = []

    def _watch(self) -> None:
        """Bind times from a watch, resumed from its last resourceVersion when kube-apiserver
        closes it (it drops a watcher that falls behind, as under 10,000 pods); after a 410 or
        an error, a list catches up (those pods count as bound when seen: an upper bound)."""
        rv = ""
        while not self.closed:
            path = f"/api/v1/namespaces/{self.ns}/pods?watch=1&allowWatchBookmarks=true"
            try:
                for t, line in self.api.watch(path + (f"&resourceVersion={rv}" if rv else ""), self.conns):
                    ev = json.loads(line)
                    if ev.get("type") == "ERROR":
                        rv = ""
                        break
                    meta = ev["object"]["metadata"]
                    rv = meta.get("resourceVersion", rv)
                    if b'"nodeName"' in line and ev["object"].get("spec", {}).get("nodeName"):
                        self._bound(meta["name"], t)
            except (OSError, http.client.HTTPException, ValueError, KeyError):
                rv = ""
            if not rv and not self.closed:
                rv = self._catch_up()

    def _bound(self, name: str, t: float) -> None:
        self.bound.setdefault(name, t)  # one writer: this thread

    def _catch_up(self) -> str:
        try:
            listed = self.api.call("GET", f"/api/v1/namespaces/{self.ns}/pods")
        except (OSError, http.client.HTTPException, RuntimeError):
            return ""
        now = time.monotonic()
        for item in listed.get("items", []):
            if item["spec"].get("nodeName"):
                self._bound(item["metadata"]["name"], now)
        return listed["metadata"].get("resourceVersion", "")

    def close(self) -> None:
        self.closed = True
        for c in self.conns:
            try:
                if c.sock is not None:
                    c.sock.shutdown(2)
            except OSError:
                pass

    def _create(self, body: dict) -> None:
        # 409: a retried POST whose first try was stored (its answer lost): the pod exists
        self.api.call("POST", f"/api/v1/namespaces/{self.ns}/pods", body, ok=(201, 409))
        self.created[body["metadata"]["name"]] = time.monotonic()

    def create(self, bodies: list[dict]) -> None:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(self._create, bodies))

    def wait_bound(self, names: list[str], timeout: float) -> None:
        """Poll (0.1 s) what the watch recorded: the bind times are the watch's, so the poll's
        period delays only the return, not a figure."""
        deadline = time.monotonic() + timeout
        missing = list(names)
        while missing:
            missing = [n for n in missing if n not in self.bound]
            if missing and time.monotonic() > deadline:
                raise TimeoutError(f"{len(names) - len(missing)}/{len(names)} pods bound after {timeout:.0f}s")
            time.sleep(0.1)

    def bodies(self, start: int = 0, apps: int | None = None) -> list[dict]:
        out = []
        for a in range(apps or self.w.apps):
            user = self.w.users[a % len(self.w.users)] if self.w.users else None
            out += [pod(self.ns, f"{self.w.name}-app{a}", start + i, self.w, user) for i in range(self.w.pods)]
        return out

    def delete_pods(self, names: list[str]) -> None:
        def rm(n):
            self.api.call("DELETE", f"/api/v1/namespaces/{self.ns}/pods/{n}", {"gracePeriodSeconds": 0})
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(rm, names))


def run_round(api: Api, sched: Scheduler, w: Workload, ns: str, timeout: float) -> Result:
    res = Result(w.name, sched.name)
    r = Round(api, sched, w, ns, timeout)
    sampling = threading.Event()
    try:  # a scheduler that never becomes ready fails this round only
        api.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        threading.Thread(target=r._watch, daemon=True).start()
        time.sleep(0.3)  # the watch is open before the first create (a missed bind would hang the round)
        sched.start(sched)
        procs = Procs(sched.measured_pids())
        roles = {pid: sched.role_of(pid) for pid in sched.measured_pids()}   # before a restart renews them
        peak, by_pid = [0], {}

        def measure() -> None:
            now = procs.rss_by_process()
            peak[0] = max(peak[0], sum(now.values()))
            for pid, rss in now.items():
                by_pid[pid] = max(by_pid.get(pid, 0), rss)
        measure()

        def sample():
            while not sampling.wait(0.2):
                measure()
        threading.Thread(target=sample, daemon=True).start()
        cpu0 = procs.cpu()
        bodies = r.bodies()
        names = [b["metadata"]["name"] for b in bodies]
        if w.name == "limits":
            limits_round(r, bodies, names, timeout)
        else:
            r.create(bodies)
            r.wait_bound(names, timeout)
        lat = sorted(r.bound[n] - r.created[n] for n in names)
        span = max(r.bound[n] for n in names) - min(r.created.values())
        res.pods = len(names)
        res.pods_per_s = len(names) / span if span > 0 else 0.0
        res.p50_ms = 1000 * lat[len(lat) // 2]
        res.p99_ms = 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        res.cpu_per_1000 = (procs.cpu() - cpu0) * 1000 / len(names)
        res.events_p50_ms, res.events_bytes = events_p50(sched.web)
        res.rest = questions(sched.web)
        if w.name == "recovery":
            res.recovery_s = recovery(r, sched)
        measure()
        res.peak_rss_mb = peak[0] / 2**20
        res.peak_rss_by_role_mb = {roles.get(pid, str(pid)): round(rss / 2**20, 1) for pid, rss in by_pid.items()}
    except Exception as exc:  # noqa: BLE001 - a failed round is reported; the run goes on
        res.ok = False
        res.error = f"{type(exc).__name__}: {exc}\n{sched.tail()}"
    finally:
        sampling.set()
        r.close()
        stop(sched)
        cleanup = clean_namespace(api, ns, timeout)
        if cleanup and res.ok:
            res.ok, res.error = False, cleanup
    return res


def clean_namespace(api: Api, ns: str, timeout: float) -> str:
    """Force-delete the round's pods and its namespace, and wait until it is gone, so the next
    round starts on empty nodes; a failure is the round's error, never the run's end.
    kube-apiserver answers a delete of 10,000 pods with 504 after its request timeout while
    it goes on deleting: that is waited for too."""
    try:
        api.call("DELETE", f"/api/v1/namespaces/{ns}/pods", {"gracePeriodSeconds": 0}, ok=(200, 404, 504),
                 timeout=900)
        api.call("DELETE", f"/api/v1/namespaces/{ns}", {})
        harness.wait_for(lambda: api.call("GET", f"/api/v1/namespaces/{ns}", ok=(200, 404)).get("kind") != "Namespace",
                         timeout, f"namespace {ns} deleted", 1.0)
        return ""
    except Exception as exc:  # noqa: BLE001 - reported with the round; the run goes on
        return f"clean-up of {ns}: {type(exc).__name__}: {exc}"


def limits_round(r: Round, bodies: list[dict], names: list[str], timeout: float) -> None:
    """Limits hit: pods wait; the bound ones are deleted (they "finish") until all have run."""
    r.create(bodies)
    done: set[str] = set()
    deadline = time.monotonic() + timeout
    while len(done) < len(names):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(done)}/{len(names)} pods ran under the limits after {timeout:.0f}s")
        time.sleep(0.5)
        running = [n for n in names if n in r.bound and n not in done]
        time.sleep(0.5)  # let the scheduler fill up to its limit before the finished ones go
        if running:
            r.delete_pods(running)
            done.update(running)


def recovery(r: Round, sched: Scheduler) -> float:
    """SIGKILL the scheduler, restart it, create one pod: the time until it is bound."""
    for pid in sched.pids():
        os.kill(pid, signal.SIGKILL)
    began = time.monotonic()
    stop(sched)
    sched.start(sched)
    body = pod(r.ns, "recovery-probe", 0, r.w, None)
    r.create([body])
    r.wait_bound([body["metadata"]["name"]], r.timeout)
    return r.bound[body["metadata"]["name"]] - began


def events_p50(web: str, n: int = 10) -> tuple[float, int]:
    """Connect, send the request, read the answer to its last byte (`Connection: close`): the
    server's time as a client in C would see it. Python's own HTTP client and JSON decoding are
    left out: decoding 10,000 events (3.3 MB) takes ~34 ms here and urllib's chunked reading more
    than either server's work, the same for both schedulers, so they pulled every ratio toward 1."""
    host, port = web.rsplit(":", 1)
    request = (f"GET /ws/v1/events/batch?count=10000 HTTP/1.1\r\nHost: {web}\r\n"
               "Connection: close\r\n\r\n").encode()
    took = []
    for _ in range(n):
        began = time.monotonic()
        with socket.create_connection((host, int(port)), timeout=60) as conn:
            conn.sendall(request)
            head = conn.recv(65536)
            got = len(head)
            while chunk := conn.recv(1 << 20):
                got += len(chunk)
        took.append(time.monotonic() - began)
        if not head.startswith((b"HTTP/1.1 200", b"HTTP/1.0 200")) or got < 1024:
            raise RuntimeError(f"events batch answered {head[:60]!r} ({got} bytes)")
    return 1000 * statistics.median(took), got      # and the answer's size: the two may hold
                                                     # different numbers of events


QUESTIONS = {
    "partitions": "/ws/v1/partitions",
    "queues": "/ws/v1/partition/default/queues",
    "applications": "/ws/v1/partition/default/applications/active",
    "completed": "/ws/v1/partition/default/applications/completed",
    "nodes": "/ws/v1/partition/default/nodes",
    "users": "/ws/v1/partition/default/usage/users",
    "groups": "/ws/v1/partition/default/usage/groups",
    "events": "/ws/v1/events/batch?count=10000",
}


def ask_all(web: str) -> dict:
    out = {}
    for key, path in QUESTIONS.items():
        try:
            out[key] = rest(web, path)
        except Exception as exc:  # noqa: BLE001 - an unanswered question is a difference
            out[key] = f"error: {exc}"
    return out


def questions(web: str, settle: float = 10.0) -> dict:
    """The answers once they stop changing (two rounds 0.5 s apart agree, normalised; at most
    `settle` s): the last pods' deletions may still be on their way to the scheduler when the
    round ends (ykshm's state views are a snapshot published every 0.2 s or so; YuniKorn's are
    live), and the state after the workload is what is compared, not a moment inside it."""
    answers = ask_all(web)
    deadline = time.monotonic() + settle
    while time.monotonic() < deadline:
        time.sleep(0.5)
        again = ask_all(web)
        if all(normalise(again.get(k), k) == normalise(answers.get(k), k) for k in QUESTIONS):
            return again
        answers = again
    return answers


# ------------------------------------------------------------------------------ parity
ORDERED = ("stateLog",)  # lists whose order YuniKorn defines (an application's states, oldest first)
IDENTITY = ("nodeID", "applicationID", "queuename", "userName", "groupName", "name")
POD_NAME = "kubernetes.io/meta/podName"


def identity(v) -> str | None:
    """The stable name of a list item (a node's, an application's, an allocation's pod, ...),
    before ids are dropped."""
    if isinstance(v, dict):
        name = next((str(v[k]) for k in IDENTITY if isinstance(v.get(k), (str, int))), None)
        tags = v.get("allocationTags")
        return name or (tags.get(POD_NAME) if isinstance(tags, dict) else None)
    return None


def anonymous_nodes(nodes: list) -> dict:
    """Nodes by what they answer, not by name: which of N equal nodes a pod lands on is the
    scheduler's choice among ties (YuniKorn's differs from run to run), so each field is
    compared as the count of nodes answering each value (`{'kwok': 50}`), node and pod names
    left out; a different spread of the pods shows as different counts of `allocated`."""
    seen: dict[str, dict[str, int]] = {}
    for node in nodes:
        if not isinstance(node, dict):
            continue
        attrs = {k: v for k, v in (node.get("attributes") or {}).items() if "hostname" not in k}
        # an application's originator is counted with the application (`originators`), not per node
        allocs = [{k: v for k, v in a.items() if k != "originator"} for a in node.get("allocations") or []
                  if isinstance(a, dict)]
        body = normalise({k: v for k, v in node.items() if k not in ("nodeID", "hostName")}
                         | {"attributes": attrs} | ({"allocations": allocs} if allocs else {}))
        for path, value in flatten(body).items():
            counts = seen.setdefault(generic(path), {})
            shown = generic(json.dumps(value))
            counts[shown] = counts.get(shown, 0) + 1
    return {f"[*]{'' if path.startswith('[') else '.'}{path}": ", ".join(f"{v} x{n}" for v, n in sorted(c.items()))
            for path, c in seen.items()}


def originators(allocs: list) -> dict | list:
    """An application's allocations by pod, with how many are the originator rather than which:
    the originator is the pod the shim saw first, and the bench creates an application's pods 8
    at a time, so which one that is differs from run to run (in YuniKorn too)."""
    count = sum(1 for a in allocs if isinstance(a, dict) and a.get("originator"))
    out = normalise([{k: v for k, v in a.items() if k != "originator"} if isinstance(a, dict) else a
                     for a in allocs])
    if count and isinstance(out, dict):
        out["[originators]"] = count
    return out


def time_integrals(obj):
    """An application's resourceHistory is resource x seconds held: how long the bench kept
    each pod, not an answer; only which entries are non-zero is compared."""
    if isinstance(obj, dict):
        return {k: time_integrals(v) for k, v in obj.items()}
    return ">0" if isinstance(obj, (int, float)) and obj > 0 else obj


def normalise(obj, key: str = ""):
    """Drop volatile fields; list items keyed by their name, other lists sorted (their order is
    not defined); nodes grouped by load; events counted by type."""
    if key == "events" and isinstance(obj, dict):
        counts: dict[str, int] = {}
        for e in obj.get("EventRecords") or []:
            k = f"{e.get('type')}/{e.get('eventChangeType')}/{e.get('eventChangeDetail')}"
            counts[k] = counts.get(k, 0) + 1
        return counts
    if key == "nodes" and isinstance(obj, list):
        return anonymous_nodes(obj)
    if key == "resourceHistory":
        return time_integrals(obj)
    if isinstance(obj, dict):
        return {k: normalise(v, k) for k, v in obj.items() if not any(x in k.lower() for x in VOLATILE)}
    if isinstance(obj, list) and key in ORDERED:
        return [normalise(v) for v in obj]
    if key == "allocations" and isinstance(obj, list):
        return originators(obj)
    if isinstance(obj, list):
        names = [identity(v) for v in obj]
        if names and all(names) and len(set(names)) == len(names):
            return {f"[{n}]": normalise(v) for n, v in zip(names, obj)}
        return sorted((normalise(v) for v in obj), key=lambda v: json.dumps(v, sort_keys=True))
    return obj


def flatten(obj, prefix: str = "") -> dict[str, object]:
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}" if k.startswith("[") else f"{prefix}.{k}" if prefix else k))
        return out
    if isinstance(obj, list):
        out = {}
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}[{i}]"))
        return out
    return {prefix: obj}


GENERIC = (re.compile(r"kwok-node-\d+"), re.compile(r"(app\d+|-\d+)\b"))


def generic(text: str) -> str:
    """Node and pod numbers as `*`: differences alike but for them are one line."""
    return GENERIC[1].sub("*", GENERIC[0].sub("kwok-node-*", text))


def same_namespace(answers: dict, namespace: str) -> dict:
    """The round's namespace named `<namespace>`: each round has its own, the pods are the same."""
    return json.loads(json.dumps(answers).replace(f'"{namespace}"', '"<namespace>"')
                      .replace(f"{namespace}/", "<namespace>/"))


def differences(yk: dict, ours: dict) -> list[str]:
    """Each difference once: a path that differs the same way on many nodes or applications is
    one line with its count (nodes[kwok-node-*]... x1000)."""
    counted: dict[str, int] = {}
    for key in QUESTIONS:
        a = flatten(normalise(yk.get(key), key), key)
        b = flatten(normalise(ours.get(key), key), key)
        for path in sorted(set(a) | set(b)):
            if a.get(path, "<absent>") != b.get(path, "<absent>"):
                ya, yb = (generic(repr(x.get(path, "<absent>"))) for x in (a, b))
                if ya == yb:  # only which node or which pod number: a choice among ties
                    continue
                line = generic(f"{path}: yunikorn={a.get(path, '<absent>')!r} ykshm={b.get(path, '<absent>')!r}")
                counted[line] = counted.get(line, 0) + 1
    return [f"{line} (x{n})" if n > 1 else line for line, n in counted.items()]


# ------------------------------------------------------------------------------ the schedulers
def stop(sched: Scheduler) -> None:
    """Every process of the scheduler, by pid; ykshm's shared memory unlinked."""
    for p in sched.procs:
        if hasattr(p, "stop"):
            p.stop()
        elif p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    sched.procs = []
    if sched.cluster is not None:
        sched.cluster.close()
        sched.cluster = None


def yunikorn(bins: Path, config: Path, tmp: Path, timeout: float) -> Scheduler:
    def start(s: Scheduler) -> None:
        log = tmp / f"yunikorn-{len(s.logs)}.log"
        s.logs.append(str(log))
        env = dict(os.environ, KUBECONFIG=str(config), NAMESPACE=NS)
        with open(log, "ab") as out:
            s.procs = [subprocess.Popen([str(bins / "yunikorn-scheduler")], env=env, stdout=out, stderr=out,
                                        stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)]
        ready(s.web, timeout)
    return Scheduler("yunikorn", YUNIKORN_WEB, start)


def ykshm(api: Api, server: str, made: pki.Pki, tmp: Path, timeout: float) -> Scheduler:
    policy = run_identities.write_policy(tmp / "ykshm-policy.yaml")
    kubectl_apply(policy)
    config = pki.client_kubeconfig(made, "ykshm-shim", f"{run_identities.USER_PREFIX}shim",
                                   (run_identities.GROUP,), server)

    def start(s: Scheduler) -> None:
        """Engine and shim side by side, as systemd or a pod starts them (the shim polls for the
        engine's socket every 50 ms); the web once the engine's segments exist."""
        c = harness.Cluster(f"vsyk{os.getpid()}x{len(s.logs)}", engine_config=QUEUES, log_dir=str(tmp))
        s.cluster = c
        c.spawn_engine()
        c.shim = harness.Proc("shim", ["shim", "--kubeconfig", str(config), "--name", c.name, "--socket", c.socket],
                              str(tmp))
        s.procs = [c.engine, c.shim]
        s.logs += [c.engine.log_path, c.shim.log_path]
        c.wait_engine(timeout)
        web = harness.Proc("web", ["web", "--name", c.name, "--bind", s.web, "--workers", "1", "--nice", "0",
                                   "--config", c.config], str(tmp))
        s.procs.append(web)
        s.logs.append(web.log_path)
        c.wait_shim("Running", timeout)
        ready(s.web, timeout)
    return Scheduler("ykshm", YK_WEB, start, measured=2)


def kubectl_apply(path: Path) -> None:
    done = subprocess.run(["kubectl", "apply", "-f", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"kubectl apply {path}: {done.stderr.strip()}")


# ------------------------------------------------------------------------------ KWOK
KWOK_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}


def create_nodes(api: Api, n: int) -> None:
    """N KWOK nodes; the `not-ready` taint the TaintNodesByCondition admission plugin adds at
    create is replaced by KWOK's own (no node lifecycle controller runs to lift it)."""
    def one(i: int) -> None:
        res = {"cpu": "32", "memory": "256Gi", "pods": "110"}
        name = f"kwok-node-{i}"
        api.call("POST", "/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"type": "kwok", "kubernetes.io/hostname": name}},
            "spec": {"taints": [KWOK_TAINT]},
            "status": {"capacity": res, "allocatable": res}})
        api.call("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": [KWOK_TAINT]}}, ok=(200,),
                 content_type="application/merge-patch+json")
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(n)))


def start_kwok(bins: Path, tmp: Path) -> subprocess.Popen:
    log = open(tmp / "kwok.log", "wb")
    return subprocess.Popen([str(bins / "kwok"), f"--kubeconfig={os.environ['KUBECONFIG']}",
                             "--manage-all-nodes=false", f"--config={bins / peers_build.KWOK_STAGES}",
                             "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                             "--cidr=10.244.128.0/17", "--node-ip=10.244.0.1", "--server-address=127.0.0.1:0"],
                            stdout=log, stderr=log, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)


def nodes_ready(api: Api, n: int) -> bool:
    items = api.call("GET", "/api/v1/nodes")["items"]
    return sum(any(c["type"] == "Ready" and c["status"] == "True" for c in (i.get("status", {}).get("conditions") or []))
               for i in items) >= n


# ------------------------------------------------------------------------------ the run
def fmt(r: Result) -> str:
    if not r.ok:
        return f"{r.workload:<9} {r.scheduler:<9} FAILED"
    rec = f"{r.recovery_s:.2f}" if r.recovery_s is not None else "-"
    return (f"{r.workload:<9} {r.scheduler:<9} {r.pods:>6} {r.pods_per_s:>8.1f} {r.p50_ms:>9.0f} {r.p99_ms:>9.0f} "
            f"{r.cpu_per_1000:>9.2f} {r.peak_rss_mb:>8.0f} {r.events_p50_ms:>9.1f} {rec:>9}")


HEADER = (f"{'workload':<9} {'scheduler':<9} {'pods':>6} {'pods/s':>8} {'p50 ms':>9} {'p99 ms':>9} "
          f"{'cpu/1000':>9} {'rss MB':>8} {'ev p50ms':>9} {'recov s':>9}")


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def _stop_on_sigterm(signum, frame):  # noqa: ARG001 - signal handler signature
    raise KeyboardInterrupt  # `ykshm realk8s run` passes SIGTERM on: unwind, so `finally` stops every process


def inside(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    made = pki.Pki(Path(os.environ["YKSHM_REALK8S_DIR"]) / "pki")
    import yaml
    server = yaml.safe_load(Path(os.environ["KUBECONFIG"]).read_text())["clusters"][0]["cluster"]["server"]
    api = Api(server, made)
    bins = peers_build.require_built()
    tmp = Path(tempfile.mkdtemp(prefix="ykshm-vsyk-"))
    out = sys.stdout if not args.json else sys.stderr
    kwok = None
    try:
        print(f"host: {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB; "
              f"{args.nodes} KWOK nodes; scale {args.scale}", file=out, flush=True)
        api.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        api.call("POST", f"/api/v1/namespaces/{NS}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "yunikorn-configs", "namespace": NS}, "data": {"queues.yaml": QUEUES}})
        (tmp / "rbac.yaml").write_text(RBAC + f"""---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: yunikorn-scheduler, namespace: {NS}}}
rules:
- {{apiGroups: [""], resources: [configmaps], verbs: [get, watch, list]}}
- {{apiGroups: [""], resources: [secrets], verbs: [get, watch, list, update]}}
""")
        kubectl_apply(tmp / "rbac.yaml")
        yk_config = pki.client_kubeconfig(made, "yunikorn", "yunikorn:scheduler", (), server)
        create_nodes(api, args.nodes)
        kwok = start_kwok(bins, tmp)
        harness.wait_for(lambda: nodes_ready(api, args.nodes), args.timeout, f"{args.nodes} KWOK nodes Ready", 0.5)
        schedulers = [yunikorn(bins, yk_config, tmp, args.timeout), ykshm(api, server, made, tmp, args.timeout)]
        results: list[Result] = []
        parity: dict[str, list[str]] = {}
        chosen = [w for w in workloads(args.scale, args.shape) if not args.workload or w.name in args.workload]
        for w in chosen:
            pair = []
            for i, sched in enumerate(schedulers):
                ns = namespace(w, sched.name)
                began = time.monotonic()
                res = run_round(api, sched, w, ns, args.timeout)
                pair.append(res)
                results.append(res)
                state = "ok" if res.ok else "FAILED"
                print(f"round {len(results)}: {w.name} {sched.name} {state} in {time.monotonic() - began:.0f}s"
                      f" | {fmt(res)}", file=out, flush=True)
                if not res.ok:
                    print("  " + res.error.replace("\n", "\n  "), file=out, flush=True)
            if all(p.ok for p in pair):
                parity[w.name] = differences(*(same_namespace(p.rest, namespace(w, p.scheduler)) for p in pair))
        report(results, parity, args.json)
        ok = all(r.ok for r in results)
        if ok:  # a failed round's logs stay (its last lines were printed; the rest is here)
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"logs: {tmp}", file=out)
        return 0 if ok else 1
    finally:
        if kwok is not None:
            kwok.terminate()
            kwok.wait(10)


RATIOS = {"pods_per_s": "pods_per_s", "p99": "p99_ms", "cpu": "cpu_per_1000", "rss": "peak_rss_mb",
          "events": "events_p50_ms", "recovery": "recovery_s"}


def ratios(results: list[Result]) -> dict[str, dict[str, float]]:
    """ykshm/YuniKorn per workload and figure, where both rounds succeeded."""
    by = {(r.workload, r.scheduler): r for r in results if r.ok}
    out: dict[str, dict[str, float]] = {}
    for w in dict.fromkeys(r.workload for r in results):
        a, b = by.get((w, "ykshm")), by.get((w, "yunikorn"))
        if a and b:
            out[w] = {name: getattr(a, f) / getattr(b, f) for name, f in RATIOS.items()
                      if getattr(a, f) is not None and getattr(b, f)}
    return out


def worst(per: dict[str, dict[str, float]]) -> dict[str, float]:
    """The ratio furthest from its target over the workloads (pods/s: the lowest; others: the highest)."""
    out: dict[str, float] = {}
    for name in RATIOS:
        values = [r[name] for r in per.values() if name in r]
        if values:
            out[name] = min(values) if name == "pods_per_s" else max(values)
    return out


def namespace(w: Workload, scheduler: str) -> str:
    return f"bench-{w.name}-{scheduler}".lower()


def report(results: list[Result], parity: dict[str, list[str]], as_json: bool) -> None:
    if as_json:
        per = ratios(results)
        print(json.dumps({"results": [{k: v for k, v in asdict(r).items() if k != "rest"} for r in results],
                          "ratios": per, "worst": worst(per), "parity": parity}, indent=1))
        return
    print(HEADER)
    for r in results:
        print(fmt(r))
    for r in results:
        if r.ok and len(r.peak_rss_by_role_mb) > 1:
            parts = ", ".join(f"{role} {mb:.0f}" for role, mb in r.peak_rss_by_role_mb.items())
            print(f"  {r.workload} {r.scheduler} peak RSS by process (MB): {parts}")
    print("  events batch answer (bytes): " + ", ".join(f"{r.workload} {r.scheduler} {r.events_bytes}"
                                                       for r in results if r.ok))
    by = {(r.workload, r.scheduler): r for r in results if r.ok}
    print("ratio ykshm/yunikorn:")
    for w in dict.fromkeys(r.workload for r in results):
        a, b = by.get((w, "ykshm")), by.get((w, "yunikorn"))
        if a and b:
            print(f"  {w:<9} pods/s {ratio(a.pods_per_s, b.pods_per_s)}  p99 {ratio(a.p99_ms, b.p99_ms)}  "
                  f"cpu {ratio(a.cpu_per_1000, b.cpu_per_1000)}  rss {ratio(a.peak_rss_mb, b.peak_rss_mb)}  "
                  f"events {ratio(a.events_p50_ms, b.events_p50_ms)}  recovery {ratio(a.recovery_s, b.recovery_s)}")
    for w, diffs in parity.items():
        print(f"parity {w}: {len(diffs)} differences")
        for d in diffs[:SHOWN]:
            print(f"  {d}")
        if len(diffs) > SHOWN:
            print(f"  ... {len(diffs) - SHOWN} more (all of them: --json)")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ykshm bench vs-yunikorn", description=__doc__.split("\n")[0])
    p.add_argument("--scale", type=float, default=1.0, help="shrink the workloads (0.1: a tenth of the pods)")
    p.add_argument("--nodes", type=int, default=1000, help="KWOK nodes (default 1000)")
    p.add_argument("--shape", action="append", default=[], metavar="AxP",
                   help="APPS x PODS per app instead of 10x1000, 100x100, 1000x10 (repeatable)")
    p.add_argument("--workload", action="append", default=[], help="only this workload (repeatable)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds a round may take")
    p.add_argument("--json", action="store_true", help="the figures as JSON on stdout")
    p.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv) -> int:
    args = parser().parse_args(list(argv))
    if args.scale <= 0 or args.nodes <= 0:
        print("ykshm bench vs-yunikorn: error: --scale and --nodes must be > 0", file=sys.stderr)
        return 2
    bad = [s for s in args.shape if not re.fullmatch(r"[1-9][0-9]*x[1-9][0-9]*", s)]
    if bad:
        print(f"ykshm bench vs-yunikorn: error: --shape {bad[0]!r} is not APPSxPODS (e.g. 2x5)", file=sys.stderr)
        return 2
    if args.inside:
        return inside(args)
    for check in (realk8s_build.require_built, peers_build.require_built):
        try:
            check()
        except Exception as exc:  # noqa: BLE001 - UsageError: one line, exit 2
            print(f"ykshm bench vs-yunikorn: error: {exc}", file=sys.stderr)
            return 2
    cmd = [sys.executable, "-m", "tools.cli", "realk8s", "run", "--", sys.executable, "-m", "tools.cli",
           "bench", "vs-yunikorn", "--inside", *argv]
    return subprocess.run(cmd, cwd=harness.ROOT).returncode
