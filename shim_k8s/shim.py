"""The shim process under trio: informers, the SI connection, binders, event posters, status.

Resource handling
-----------------
`Shim.run` owns one nursery holding every task: two informers (nodes, pods; a third on the
scheduler namespace's ConfigMaps with `configmaps`, see shim_k8s.configmaps), the SI connector
(which owns the socket stream while connected), `bind_workers` binders, two event posters, the
pod deleter/creator, the status writer and the core loop. Every input reaches the core loop
through one unbounded memory channel, so `ShimCore` is only ever touched by that task. The HTTP
client and the SI stream are closed when the nursery exits.

Error handling
--------------
Kubernetes errors are retried inside the informers (backoff 0.8 s doubling to 30 s). The SI
connection dropping is not an error: the shim goes back to New and the connector keeps trying the
socket (poll 50 ms, then backoff to 250 ms while connects are refused, but at once when the
socket file is replaced: a new engine's) until a new engine answers, then registers and recovers.
A shim that reaches Failed (the engine refused registration) exits with `ShimFailed`;
cancellation (SIGTERM) exits cleanly after writing a final status.

Active/standby (`leader`, kube.leaderelection)
----------------------------------------------
With a `LeaseConfig` the shim is one candidate of a Lease. Until elected it is a warm standby:
its informers list and watch (its caches are current), but it does not connect to its engine
(which stays idle and unregistered), binds nothing, deletes nothing. Elected, it connects,
registers and recovers (seed 004) from the caches it already has, then binds. Every leader write
(a binding, a pod deletion, creation or status patch) passes the elector's fence right before it
is sent: none once the Lease was not renewed within the renew deadline. A leader that loses the
Lease exits (`LeadershipLost`, exit 1; kube-scheduler does the same) and its supervisor restarts
it as a standby; a leader stopped cleanly (SIGTERM) releases the Lease first. A bind answered
409 (the pod already has a `nodeName`: bound by the other replica) is reconciled from the watch:
the pod's nodeName is the arbiter.

With `leader_pod` (in a cluster: $POD_NAME, in the Lease's namespace) the shim labels its own pod
`ykshm.io/scheduler-role`: `standby` at start (a restarted container clears its predecessor's
label), `leader` once elected, and the elected leader relabels `standby` any other pod of the
namespace still labelled `leader` (a leader that died cannot). The Service selects
`ykshm.io/scheduler-role: leader`, so the REST API and the event streams follow the leader. The
leader's relabelling passes the fence too; a label that cannot be written is retried every retry
period (it routes readers; it decides nothing).

Status
------
`ykshm shim status` reads the JSON status file `RUNTIME/NAME.shim.json` (mode 0640,
rewritten atomically when something changed, at most every 200 ms and at least every
second, and at once on every state transition). It carries
the state, the transition history, per-node recovery states and counters; see `ShimCore.status`.
"""

from __future__ import annotations


import contextlib
import dataclasses
import datetime as dt
import logging
import math
import os
import signal
import time
from typing import Any

import httpx
import orjson
import trio

from si import protocol as si

from common import runtimedir
from common.backoff import Backoff
from common.configsection import ConfigError
from common.shimstatus import status_path, write_status
from kube import client as kubeclient
from kube.leaderelection import Fenced, LeaderElector, LeaseConfig
from kube.lifeline import Listener
from . import configmaps
from .core import Actions, Bind, ShimCore
from .core.actions import PodStatus
from .core.registration import check_recovery_deadline
from kube.client import ApiStatusError, Informer, WatchBatch
from kube.config import KubeConfig
from kube.store import stub
from .state import ShimState

log = logging.getLogger("ykshm.shim")


class ShimFailed(Exception):
    """The shim state machine reached Failed; the message is its reason."""


# --- what reaches the core loop (besides the informers' `WatchBatch`es) ---------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class SiConnected:
    """The connector opened SI connection number `generation`."""

    generation: int
    stream: trio.SocketStream


@dataclasses.dataclass(frozen=True, slots=True)
class SiReceived:
    """A message from the engine on connection `generation` (older ones are ignored)."""

    generation: int
    message: dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class SiClosed:
    """Connection `generation` ended, and why."""

    generation: int
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class BindResult:
    """A binder's outcome: ok, 409 (`conflict`: already bound), 404 (`gone`) or failed."""

    bind: Bind
    ok: bool
    conflict: bool
    gone: bool
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class RecoveryDeadline:
    """Recovery number `recovery` has run for `recovery_timeout` seconds."""

    recovery: int


CoreInput = WatchBatch | SiConnected | SiReceived | SiClosed | BindResult | RecoveryDeadline


@dataclasses.dataclass(frozen=True, slots=True)
class DeletePod:
    namespace: str
    name: str
    preempted: bool = False     # mark it DisruptionTarget first (kube-scheduler's victims)


async def mark_disruption(client: httpx.AsyncClient, namespace: str, name: str) -> None:
    """Set the pod's `DisruptionTarget=True` condition, reason `PreemptionByScheduler`, as
    kube-scheduler does before deleting a victim: its owner (a Streams job, a Job's podFailurePolicy)
    can tell a preemption from a user's deletion. Best effort: the deletion goes on regardless.
    One strategic-merge PATCH of pods/status (conditions merge on `type`, so the pod's other
    conditions stay): no read of the pod first, and no right beyond `pods/status patch`."""
    path = f"/api/v1/namespaces/{namespace}/pods/{name}/status"
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                 "message": "yunikorn: preempting to free up resources",
                 "lastTransitionTime": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    resp = await client.patch(path, content=orjson.dumps({"status": {"conditions": [condition]}}),
                              headers={"Content-Type": "application/strategic-merge-patch+json"})
    if resp.status_code >= 300:
        log.warning("pod %s/%s: DisruptionTarget not set: %s %s", namespace, name, resp.status_code,
                    resp.reason_phrase)


@dataclasses.dataclass(frozen=True, slots=True)
class CreatePod:
    pod: dict[str, Any]


@dataclasses.dataclass
class ShimOptions:
    kube: KubeConfig
    name: str = "ykshm"
    socket_path: str = ""
    rm_id: str = "mycluster"
    status_file: str = ""
    bind_workers: int = 8
    watch_timeout: int = 300
    max_batch: int = 5000
    recovery_timeout: float = 300.0
    """A recovery not complete after this many seconds fails the shim (exit 1; restarted)."""
    configmaps: bool = False
    """Configure the engine from yunikorn-defaults/yunikorn-configs in `namespace`, watched."""
    namespace: str = "default"
    rm_id_from_config: bool = False
    """The RM ID is the ConfigMaps' service.clusterId (no --rm-id given)."""
    leader: LeaseConfig | None = None
    """Active/standby through this Lease (None: always active, no election)."""
    leader_pod: str = ""
    """This replica's pod (in the Lease's namespace), labelled with its role ("": no label)."""
    lifeline: Listener | None = None
    """The bound lifeline listener of this candidate (kube.lifeline; None: client-go's timing only)."""

    def __post_init__(self) -> None:
        if not self.socket_path:
            self.socket_path = si.default_socket_path(self.name)
        if not self.status_file:
            self.status_file = status_path(self.name, create=True)


class Shim:
    def __init__(self, opts: ShimOptions, core: ShimCore | None = None) -> None:
        self.opts = opts
        self.core = core or ShimCore(rm_id=opts.rm_id)
        self._in_send, self._in_recv = trio.open_memory_channel[CoreInput](math.inf)
        self._bind_send, self._bind_recv = trio.open_memory_channel[Bind](math.inf)
        self._event_send, self._event_recv = trio.open_memory_channel[Any](math.inf)
        self._misc_send, self._misc_recv = trio.open_memory_channel[DeletePod | CreatePod | PodStatus](math.inf)
        self._stream: trio.SocketStream | None = None
        self._stream_gen = 0
        self._informers: list[Informer] = []
        self._status_dirty = trio.Event()
        self.events_posted = 0
        self.events_dropped = 0
        self.fenced = 0
        self.first_write_sent = 0.0
        self.last_write_sent = 0.0
        self.started = time.time()
        self.elector: LeaderElector | None = None

    def _fence(self) -> None:
        """Raise `Fenced` unless this shim may write as the leader (always, without election);
        else note the wall time of this write (the status shows the first and the last: a
        deposed leader's last write is before its successor's acquireTime)."""
        if self.elector is not None:
            self.elector.fence()
            self.last_write_sent = time.time()
            if not self.first_write_sent:
                self.first_write_sent = self.last_write_sent

    # ------------------------------------------------------------------ running
    async def _load_configmaps(self, client: httpx.AsyncClient) -> Informer:
        """Read both ConfigMaps before registering (YuniKorn: an invalid one is fatal at start)
        and return the informer that watches them."""
        ns = self.opts.namespace
        source = configmaps.ConfigMapSource(ns)
        maps = []
        for name in configmaps.NAMES:
            try:
                resp = await client.get(f"/api/v1/namespaces/{ns}/configmaps/{name}")
                maps.append(None if resp.status_code == 404 else kubeclient.check(resp))
            except (ApiStatusError, httpx.HTTPError) as exc:  # fatal at start, as YuniKorn's
                raise ShimFailed(f"cannot read ConfigMap {ns}/{name}: {exc}") from None
        try:
            parsed = source.load(*maps)
        except ConfigError as exc:
            raise ShimFailed(f"invalid configuration in the ConfigMaps of namespace {ns}: "
                             f"{exc}") from None
        self.core.config_source = source
        if self.opts.rm_id_from_config:
            self.core.rm_id = parsed.shim.cluster_id
        log.info("configuration from ConfigMaps %s in namespace %s (hot refresh %s)",
                 "/".join(n for n, cm in zip(configmaps.NAMES, maps) if cm) or "(none)", ns,
                 "on" if source.hot_refresh else "off")
        return Informer(client, f"/api/v1/namespaces/{ns}/configmaps", "configmaps",
                        timeout_seconds=self.opts.watch_timeout)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        leader = self.opts.leader      # the Lease gets connections of its own: never queued behind others
        async with self.opts.kube.client() as client, \
                (self.opts.kube.client() if leader else contextlib.nullcontext()) as lease_client:
            self.client = client
            if leader is not None:
                self.elector = LeaderElector(lease_client, leader, lifeline=self.opts.lifeline)
            cm_informer = await self._load_configmaps(client) if self.opts.configmaps else None
            try:
                async with trio.open_nursery() as nursery:
                    if self.elector is not None:
                        nursery.start_soon(self._lead, self.elector)
                    # the core maps each object as it arrives and keeps its own record: the
                    # stores keep stubs (kube.store.stub), not 10,000 whole pods
                    nodes = Informer(client, "/api/v1/nodes", "nodes",
                                     timeout_seconds=self.opts.watch_timeout, remember=stub)
                    pods = Informer(client, "/api/v1/pods", "pods",
                                    timeout_seconds=self.opts.watch_timeout, remember=stub)
                    self._informers = [nodes, pods]
                    if cm_informer is not None:
                        self._informers.append(cm_informer)
                        nursery.start_soon(cm_informer.run, self._in_send)
                    nursery.start_soon(self._core_loop)
                    nursery.start_soon(nodes.run, self._in_send)
                    nursery.start_soon(pods.run, self._in_send)
                    nursery.start_soon(self._si_connector)
                    for _ in range(self.opts.bind_workers):
                        nursery.start_soon(self._binder)
                    for _ in range(2):
                        nursery.start_soon(self._event_poster)
                    nursery.start_soon(self._misc_worker)
                    nursery.start_soon(self._status_writer)
                    nursery.start_soon(self._recovery_watchdog)
                    self._write_status()
                    task_status.started()
            finally:
                if self.elector is not None:   # every writer has stopped: give the Lease up
                    with trio.CancelScope(shield=True):
                        await self.elector.release()
                self._write_status(stopped=True)

    async def _lead(self, elector: LeaderElector) -> None:
        """Run the election; the status shows the role as soon as it changes. `LeadershipLost`
        ends the shim (the nursery is cancelled by it)."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(elector.run)
            if self.opts.leader_pod:
                await self._label_pods(elector, LABEL_STANDBY)
            await elector.elected.wait()
            log.info("elected leader of lease %s (identity %s): connecting to the engine",
                     f"{elector.config.namespace}/{elector.config.name}", elector.config.identity)
            self._status_dirty.set()
            if self.opts.leader_pod:
                await self._label_pods(elector, LABEL_LEADER)

    async def _label_pods(self, elector: LeaderElector, role: str) -> None:
        """Label our pod `role`; as the leader, also relabel `standby` every other pod of the
        namespace labelled `leader`. Retried every retry period until it is done (or fenced)."""
        ns, own = elector.config.namespace, self.opts.leader_pod
        while True:
            try:
                if role == LABEL_LEADER:
                    self._fence()
                await _set_role_label(self.client, ns, own, role)
                if role == LABEL_LEADER:
                    resp = await self.client.get(f"/api/v1/namespaces/{ns}/pods", params={
                        "labelSelector": f"{ROLE_LABEL}={LABEL_LEADER}"})
                    for pod in kubeclient.check(resp).get("items") or []:
                        name = pod["metadata"]["name"]
                        if name != own:
                            self._fence()
                            await _set_role_label(self.client, ns, name, LABEL_STANDBY)
                            log.info("pod %s/%s relabelled %s=%s", ns, name, ROLE_LABEL, LABEL_STANDBY)
                log.info("pod %s/%s labelled %s=%s", ns, own, ROLE_LABEL, role)
                return
            except Fenced:
                return
            except (ApiStatusError, httpx.HTTPError) as exc:
                log.warning("cannot label pod %s/%s %s=%s: %s", ns, own, ROLE_LABEL, role, exc)
            await trio.sleep(elector.config.retry_period)

    async def _core_loop(self) -> None:
        core = self.core
        async for item in self._in_recv:
            items = [item]
            while len(items) < self.opts.max_batch:
                try:
                    items.append(self._in_recv.receive_nowait())
                except trio.WouldBlock:
                    break
            for it in items:
                self._apply(it)
            actions = core.take()
            if actions:
                await self._execute(actions)
            if core.state is ShimState.FAILED:   # run()'s finally writes the status
                raise ShimFailed(f"shim Failed: {core.machine.failure}")

    async def _recovery_watchdog(self) -> None:
        """Each recovery gets `recovery_timeout` seconds; past that, the core loop is told (the
        core itself decides, so a recovery that finished meanwhile is left alone)."""
        timeout = self.opts.recovery_timeout
        current, started, told = 0, 0.0, 0
        while True:
            await trio.sleep(min(1.0, timeout / 4))
            core = self.core
            if core.state is not ShimState.RECOVERING:
                continue
            if core.recoveries != current:
                current, started = core.recoveries, trio.current_time()
            elif told != current and trio.current_time() - started >= timeout:
                told = current
                self._in_send.send_nowait(RecoveryDeadline(current))

    def _apply(self, item: CoreInput) -> None:
        core = self.core
        if isinstance(item, WatchBatch):
            if item.events is None:
                core.on_synced(item.kind)
                return
            handler = {"pods": core.on_pod, "nodes": core.on_node,
                       "configmaps": core.on_configmap}[item.kind]
            for etype, obj in item.events:
                handler(etype, obj)
        elif isinstance(item, SiReceived):
            if item.generation == self._stream_gen:
                core.on_si(item.message)
        elif isinstance(item, BindResult):
            core.on_bind_result(item.bind, item.ok, item.conflict, item.gone, item.reason)
        elif isinstance(item, RecoveryDeadline):
            check_recovery_deadline(core, item.recovery, self.opts.recovery_timeout)
        elif isinstance(item, SiConnected):
            self._stream, self._stream_gen = item.stream, item.generation
            log.info("connected to the engine at %s", self.opts.socket_path)
            core.on_connect()
        elif isinstance(item, SiClosed):
            if item.generation == self._stream_gen:
                self._stream = None
                log.warning("engine connection lost: %s", item.reason)
                core.on_disconnect(item.reason)
        self._status_dirty.set()

    async def _execute(self, actions: Actions) -> None:
        for t in actions.transitions:
            log.info("shim state %s -> %s (%s)%s", t.old, t.new, t.event,
                     f": {t.reason}" if t.reason else "")
        if actions.transitions:
            self._write_status()
        if actions.si and self._stream is not None:
            try:
                await self._stream.send_all(si.encode_many(actions.si))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                stream, self._stream = self._stream, None
                self._stream_gen = -self._stream_gen   # ignore the reader's late news
                log.warning("engine connection lost while sending: %s", exc)
                with trio.CancelScope(shield=True):
                    await stream.aclose()               # the connector notices and reconnects
                self.core.on_disconnect(f"send failed: {exc}")
                await self._execute(self.core.take())
        for bind in actions.binds:
            self._bind_send.send_nowait(bind)
        for ev in actions.events:
            if self._event_send.statistics().current_buffer_used > 10000:
                self.events_dropped += 1
                continue
            self._event_send.send_nowait(ev)
        for ns, name in actions.deletes:
            self._misc_send.send_nowait(DeletePod(ns, name, (ns, name) in actions.preempted))
        for pod in actions.creates:
            self._misc_send.send_nowait(CreatePod(pod))
        for status in actions.statuses:
            self._misc_send.send_nowait(status)

    # ------------------------------------------------------------------ workers
    async def _si_connector(self) -> None:
        if self.elector is not None:    # a standby leaves its engine idle and unregistered
            await self.elector.elected.wait()
        path = self.opts.socket_path
        backoff = Backoff(0.05, 0.25)
        gen = 0
        waiting_logged = False
        refused = ""
        while True:
            try:
                stream = await _open_engine(path)
            except runtimedir.RuntimeDirError as exc:
                if str(exc) != refused:             # an impostor: say so once, wait it out
                    log.error("not connecting to %s: %s", path, exc)
                    refused = str(exc)
                await trio.sleep(1.0)
                continue
            except OSError as exc:
                if not waiting_logged:
                    log.info("waiting for the engine socket %s (%s)", path, exc.strerror)
                    waiting_logged = True
                ident = socket_identity(path)
                if ident is None:
                    backoff.reset()            # not there yet: poll at the first delay
                    await trio.sleep(backoff.next())
                else:                          # refused: a stale socket, back off, but a new
                    await wait_replaced(path, ident, backoff.next())   # engine's is tried at once
                continue
            waiting_logged = False
            backoff.reset()
            gen += 1
            reason = "engine closed the connection"
            await self._in_send.send(SiConnected(gen, stream))
            decoder = si.FrameDecoder()
            try:
                while True:
                    msg = await si.receive_message(stream, decoder)
                    if msg is None:
                        break
                    await self._in_send.send(SiReceived(gen, msg))
            except si.ProtocolError as exc:
                reason = f"protocol error: {exc}"
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                reason = f"connection error: {exc}"
            await self._in_send.send(SiClosed(gen, reason))
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def _binder(self) -> None:
        conn = kubeclient.RawConnection(self.opts.kube)
        try:
            await self._bind_loop(conn)
        finally:
            await conn.aclose()

    async def _bind_loop(self, conn: kubeclient.RawConnection) -> None:
        async for b in self._bind_recv:
            ok = conflict = gone = False
            reason = ""
            try:
                await kubeclient.bind_raw(conn, b.namespace, b.name, b.uid, b.node, self._fence)
                ok = True
            except Fenced as exc:       # not sent; the shim is about to exit (LeadershipLost)
                self._note_fenced("bind", b.namespace, b.name, exc)
                continue
            except ApiStatusError as exc:
                conflict, gone = exc.code == 409, exc.code == 404
                reason = str(exc)
            except httpx.HTTPError as exc:
                reason = f"{type(exc).__name__}: {exc}"
            if reason and not (conflict or gone):
                log.warning("bind %s/%s -> %s failed: %s", b.namespace, b.name, b.node, reason)
            await self._in_send.send(BindResult(b, ok, conflict, gone, reason))

    async def _event_poster(self) -> None:
        conn = kubeclient.RawConnection(self.opts.kube)
        try:
            async for ev in self._event_recv:
                obj = kubeclient.event_object(ev.kind, ev.namespace, ev.name, ev.uid, ev.reason,
                                              ev.message, ev.type)
                ns = obj["metadata"]["namespace"]
                try:
                    await kubeclient.post_raw(conn, f"/api/v1/namespaces/{ns}/events", obj)
                    self.events_posted += 1
                except (ApiStatusError, httpx.HTTPError) as exc:
                    self.events_dropped += 1
                    log.info("posting event on %s %s failed: %s", ev.kind, ev.name, exc)
        finally:
            await conn.aclose()

    async def _misc_worker(self) -> None:
        async for item in self._misc_recv:
            what = {DeletePod: "delete", CreatePod: "create"}.get(type(item), "update status of")
            try:
                self._fence()
                if isinstance(item, DeletePod):
                    if item.preempted:
                        await mark_disruption(self.client, item.namespace, item.name)
                    await kubeclient.delete_pod(self.client, item.namespace, item.name)
                elif isinstance(item, CreatePod):
                    await kubeclient.create_pod(self.client, item.pod)
                else:
                    await kubeclient.patch_pod_status(self.client, item.namespace, item.name,
                                                      item.status)
            except Fenced as exc:
                self._note_fenced(what, item.namespace if not isinstance(item, CreatePod) else
                                  item.pod["metadata"].get("namespace", ""),
                                  item.name if not isinstance(item, CreatePod) else
                                  item.pod["metadata"].get("name", ""), exc)
            except (ApiStatusError, httpx.HTTPError) as exc:
                log.warning("%s pod failed: %s", what, exc)

    def _note_fenced(self, what: str, namespace: str, name: str, exc: Fenced) -> None:
        self.fenced += 1
        if self.fenced == 1 or self.fenced % 100 == 0:
            log.warning("%s %s/%s not sent (%d fenced writes): %s", what, namespace, name,
                        self.fenced, exc)
        self._status_dirty.set()

    async def _status_writer(self) -> None:
        while True:
            with trio.move_on_after(1.0):  # at least once a second (informer counters)
                await self._status_dirty.wait()
            self._status_dirty = trio.Event()
            self._write_status()
            await trio.sleep(0.2)

    # ------------------------------------------------------------------ status
    def status(self, stopped: bool = False) -> dict[str, Any]:
        doc = self.core.status()
        doc.update({
            "pid": os.getpid(), "name": self.opts.name, "socket": self.opts.socket_path,
            "apiServer": self.opts.kube.server, "started": self.started, "updated": time.time(),
            "stopped": stopped,
            "informers": {i.kind: {"objects": len(i.store), "relists": i.relists,
                                   "expired": i.expired, "errors": i.errors,
                                   "resourceVersion": i.store.resource_version}
                          for i in self._informers},
            "events": {"posted": self.events_posted, "dropped": self.events_dropped},
        })
        if self.elector is not None:
            doc["leaderElection"] = {**self.elector.status(), "fencedWrites": self.fenced,
                                     "firstWriteSent": self.first_write_sent,
                                     "lastWriteSent": self.last_write_sent}
        if self.core.config_source is not None:
            doc["configMaps"] = self.core.config_source.status()
        return doc

    def _write_status(self, stopped: bool = False) -> None:
        path = self.opts.status_file
        data = orjson.dumps(self.status(stopped), option=orjson.OPT_INDENT_2)
        try:
            write_status(path, data)
        except OSError as exc:
            log.warning("cannot write status file %s: %s", path, exc)


ROLE_LABEL = "ykshm.io/scheduler-role"
"""The label on each replica's pod that the Service selects (`leader`)."""
LABEL_LEADER, LABEL_STANDBY = "leader", "standby"


async def _set_role_label(client: httpx.AsyncClient, namespace: str, pod: str, role: str) -> None:
    """One merge PATCH of the pod's `ykshm.io/scheduler-role` label; ApiStatusError if refused."""
    resp = await client.patch(f"/api/v1/namespaces/{namespace}/pods/{pod}",
                              content=orjson.dumps({"metadata": {"labels": {ROLE_LABEL: role}}}),
                              headers={"Content-Type": "application/merge-patch+json"})
    kubeclient.check(resp)


SOCKET_POLL = 0.01
"""How often a refused socket file is looked at for a new engine's (a stat: a few microseconds)."""


def socket_identity(path: str) -> tuple[int, int, int] | None:
    """The socket file's (device, inode, change time), or None when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


async def wait_replaced(path: str, ident: tuple[int, int, int], delay: float,
                        poll: float = SOCKET_POLL) -> bool:
    """Wait up to `delay` seconds, returning early (True) once the file at `path` is no longer
    `ident`: a restarted engine replaces the dead one's socket, and the shim connects within
    `poll` instead of at the end of its backoff (up to 250 ms of a recovery; issue 25)."""
    deadline = trio.current_time() + delay
    while trio.current_time() < deadline:
        await trio.sleep(min(poll, max(0.0, deadline - trio.current_time())))
        if socket_identity(path) != ident:
            return True
    return False


async def _open_engine(path: str) -> trio.SocketStream:
    """Connect to the engine only if the socket file and the process listening on it belong to
    an allowed user (ours, root, $YKSHM_ALLOWED_UIDS): else RuntimeDirError, nothing sent."""
    runtimedir.check_socket_file(path)
    stream = await trio.open_unix_socket(path)
    try:
        runtimedir.check_peer(stream.socket)
    except BaseException:
        await stream.aclose()
        raise
    return stream


async def serve(opts: ShimOptions) -> None:
    """Run the shim until SIGTERM/SIGINT (clean exit) or Failed (ShimFailed)."""
    shim = Shim(opts)
    async with trio.open_nursery() as nursery:
        async def _signals() -> None:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    log.info("received %s, stopping", signal.Signals(signum).name)
                    nursery.cancel_scope.cancel()
                    return

        async def _shim() -> None:
            await shim.run()
            nursery.cancel_scope.cancel()

        nursery.start_soon(_signals)
        nursery.start_soon(_shim)
