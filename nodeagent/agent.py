"""One node agent: sim-cluster's kubelet pieces wired to an API server over HTTP.

What runs (each a task of one nursery):

- `Mirror` (mirror.py): informers for this agent's nodes and their pods and for what pods read
  (Services, Endpoints, ConfigMaps, Secrets, ServiceAccounts, Namespaces); status and Event writes.
- `NodeKeeper` (nodes.py): the nodes registered Ready before anything else, Leases renewed.
- `simcluster.kubelet.Kubelet` on the mirror: a bound Pending pod starts after `kubelet_delay`;
  a pod of a process image is handed to `simcluster.procpods.ProcPods` (address from
  `PodNetwork`, directory, volumes, env, probes, restarts, logs); any other pod is simulated
  Running as in sim-cluster (and `ykshm.io/run-seconds` / `exit-code` work on it), its podIP from
  10.244.128.0/17 (`SIMULATED_IPS`).
- `simcluster.services.ServiceNetwork` on the mirror: each ClusterIP:port a proxy to ready
  endpoints, and the hosts file through which process pods resolve Service names.
- `Tokens`: a process pod's projected ServiceAccount tokens are the API server's own, asked with
  TokenRequest (`serviceaccounts/NAME/token`, bound to the pod) before its containers start (a
  sim-cluster without authentication serves no TokenRequest: then unsigned, as its own pods get).
- graceful deletion, which sim-cluster does not have: a pod given a `deletionTimestamp` has its
  processes stopped (SIGTERM to each process group, `terminationGracePeriodSeconds`, SIGKILL) and
  is then deleted with grace 0 and its uid as precondition, as the kubelet confirms a deletion.
- `KubeletApi` (kubeletapi.py): the HTTPS endpoint kube-apiserver calls for `kubectl logs`.
"""

from __future__ import annotations

import logging
import ssl
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import trio

from simcluster import pki, podtoken, procimages, procpods, services, tlsserve, volumes
from simcluster.httpserver import HttpServer, open_listeners
from simcluster.kubelet import Kubelet

from .kubeletapi import KubeletApi
from .mirror import Change, Mirror
from .network import PodNetwork
from .nodes import NodeKeeper

log = logging.getLogger("ykshm.node-agent")
Obj = dict[str, Any]
# podIPs of simulated (not process) pods: 10.244.128.0/17, apart from the API server's 10.244.0.1 and
# the process pods' 10.244.1.0/24, and not on lo: nothing answers there, as nothing runs
SIMULATED_IPS = ("10.244.128.0", 1 << 15)


@dataclass(frozen=True)
class Settings:
    nodes: list[str]
    resources: dict[str, str]
    pods_dir: Path
    images: procimages.ProcessImages
    network: PodNetwork
    host_ip: str
    kubelet_port: int = 0
    kubelet_delay: float = 0.2
    lease_interval: float = 10.0
    status_interval: float = 60.0
    backoff_initial: float = 10.0
    backoff_max: float = 300.0
    fork_server: bool = True
    uid_base: int | None = None
    events: bool = True
    client_ca: str = ""
    """The CA of the client certificates the kubelet endpoint takes; "": no endpoint."""


def api_address(server: str) -> tuple[str, int]:
    """(host, port) of the API server's URL: what process pods get as KUBERNETES_SERVICE_HOST/PORT."""
    url = urllib.parse.urlsplit(server)
    return url.hostname or "127.0.0.1", url.port or (443 if url.scheme == "https" else 80)


class Tokens:
    """Projected ServiceAccount tokens from the API server (TokenRequest), per pod and audiences;
    `sign` is the `podtoken.Signer` ProcPods calls while it writes a pod's volumes."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.cache: dict[tuple[str, tuple[str, ...]], str] = {}
        self.unsigned = False  # the server serves no TokenRequest (a sim-cluster without authentication)

    @staticmethod
    def wanted(pod: Obj) -> list[tuple[tuple[str, ...], int]]:
        """(audiences, expirationSeconds) of every token the pod's volumes (or the default
        kube-api-access volume) hold; () is the API server's own audience."""
        out = [((), podtoken.DEFAULT_EXPIRATION)]
        for vol in (pod.get("spec") or {}).get("volumes") or []:
            for source in (vol.get("projected") or {}).get("sources") or []:
                tok = source.get("serviceAccountToken")
                if tok is not None:
                    aud = (tok["audience"],) if tok.get("audience") else ()
                    out.append((aud, int(tok.get("expirationSeconds") or podtoken.DEFAULT_EXPIRATION)))
        return list(dict(out).items())

    async def fetch(self, pod: Obj) -> str:
        """Every token the pod needs; '' or the first error's line."""
        meta = pod["metadata"]
        sa = (pod.get("spec") or {}).get("serviceAccountName") or "default"
        for aud, expiration in self.wanted(pod):
            if (meta["uid"], aud) in self.cache:
                continue
            body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                    "spec": {"audiences": list(aud), "expirationSeconds": max(600, expiration),
                             "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                                "uid": meta["uid"]}}}
            try:
                resp = await self.client.post(f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{sa}/token",
                                              content=orjson.dumps(body), headers={"Content-Type": "application/json"})
            except httpx.HTTPError as exc:
                return f"TokenRequest for {sa}: {exc}"
            if resp.status_code == 404 and not _details(resp):
                self.unsigned = True  # no such path: tokens as sim-cluster's own pods get them then
                return ""
            if resp.status_code >= 400:
                return f"TokenRequest for {sa}: HTTP {resp.status_code} {resp.text[:200]}"
            self.cache[(meta["uid"], aud)] = resp.json()["status"]["token"]
        return ""

    def sign(self, claims: Obj) -> str:
        if self.unsigned:
            return podtoken.unsigned(claims)
        uid = claims["kubernetes.io"]["pod"]["uid"]
        aud = tuple(claims.get("aud") or ())
        token = self.cache.get((uid, () if aud == (podtoken.ISSUER,) else aud))
        if token is None:
            raise volumes.VolumeError("the ServiceAccount token is not issued yet (TokenRequest pending)")
        return token

    def forget(self, uid: str) -> None:
        for key in [k for k in self.cache if k[0] == uid]:
            del self.cache[key]


def _details(resp: httpx.Response) -> Obj:
    try:
        return (resp.json() or {}).get("details") or {}
    except ValueError:
        return {}


class AgentPods:
    """ProcPods as the Kubelet sees it, with the API server's tokens asked first and no start for
    a pod already being deleted."""

    def __init__(self, pods: procpods.ProcPods, tokens: Tokens) -> None:
        self.pods = pods
        self.tokens = tokens
        self.runners = pods.runners
        self._nursery: trio.Nursery | None = None
        self._starting: set[str] = set()

    def handles(self, pod: Obj) -> bool:
        return self.pods.handles(pod)

    def start(self, pod: Obj, node: Obj) -> None:
        uid = pod["metadata"]["uid"]
        if self._nursery is None or uid in self._starting or uid in self.runners:
            return
        self._starting.add(uid)
        self._nursery.start_soon(self._start, pod, node)

    async def _start(self, pod: Obj, node: Obj) -> None:
        uid = pod["metadata"]["uid"]
        try:
            problem = await self.tokens.fetch(pod)
            if problem:  # the volumes' retry asks again through `sign` (a FailedMount meanwhile)
                log.warning("pod %s/%s: %s", pod["metadata"]["namespace"], pod["metadata"]["name"], problem)
            current = self.pods.store.get("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
            if current is None or current["metadata"]["uid"] != uid or current["metadata"].get("deletionTimestamp"):
                return
            self.pods.start(current, node)
        finally:
            self._starting.discard(uid)

    def busy(self, uid: str) -> bool:
        """Whether the pod is starting or has processes (or its directory) still."""
        return uid in self._starting or uid in self.runners

    def stop(self, uid: str) -> None:
        self.pods.stop(uid)
        self.tokens.forget(uid)

    def fail(self, uid: str, code: int) -> None:
        self.pods.fail(uid, code)

    def knows(self, uid: str, container: str) -> bool:
        return self.pods.knows(uid, container)

    def log_file(self, uid: str, container: str, previous: bool):
        return self.pods.log_file(uid, container, previous)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()


class Agent:
    def __init__(self, client: httpx.AsyncClient, server: str, settings: Settings) -> None:
        self.client = client
        self.settings = settings
        s = settings
        self.mirror = Mirror(client, set(s.nodes))
        self.keeper = NodeKeeper(client, s.nodes, s.resources, s.host_ip, s.lease_interval, s.status_interval)
        host, port = api_address(server)
        self.network = services.ServiceNetwork(self.mirror, s.network, s.pods_dir / "hosts")  # type: ignore[arg-type]
        self.tokens = Tokens(client)
        self.procpods = procpods.ProcPods(
            self.mirror, procpods.Settings(s.pods_dir, s.images, host, port, s.backoff_initial, s.backoff_max,  # type: ignore[arg-type]
                                           fork_server=s.fork_server, uid_base=s.uid_base),
            s.network, signer=self.tokens.sign,  # type: ignore[arg-type]
            extra_env=lambda pod: services.dns_env(pod, self.network.hosts))
        self.pods = AgentPods(self.procpods, self.tokens)
        self.kubelet = Kubelet(self.mirror, start_delay=s.kubelet_delay, events=s.events,  # type: ignore[arg-type]
                               procpods=self.pods, agent=True, sim_ips=SIMULATED_IPS)  # type: ignore[arg-type]
        self._finishing: set[str] = set()
        self._listeners: list[trio.SocketListener] = []
        self._nursery: trio.Nursery | None = None
        self.mirror.listeners.append(self._on_change)

    def _on_change(self, change: Change) -> None:
        if change.bucket != "pods" or change.type == "DELETED" or self._nursery is None:
            return
        meta = change.obj["metadata"]
        if meta.get("deletionTimestamp") and meta["uid"] not in self._finishing:
            self._finishing.add(meta["uid"])
            self._nursery.start_soon(self._finish, change.obj)

    async def _finish(self, pod: Obj) -> None:
        """A graceful deletion: the processes stopped, then the pod deleted for good."""
        meta = pod["metadata"]
        uid, ns, name = meta["uid"], meta["namespace"], meta["name"]
        try:
            self.pods.stop(uid)
            grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
            with trio.move_on_after((30.0 if grace is None else float(grace)) + 10.0):
                while self.pods.busy(uid):
                    await trio.sleep(0.05)
            body = orjson.dumps({"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                                 "preconditions": {"uid": uid}})
            for _ in range(5):
                try:
                    resp = await self.client.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", content=body,
                                                     headers={"Content-Type": "application/json"})
                except httpx.HTTPError as exc:
                    log.warning("delete of pod %s/%s: %s", ns, name, exc)
                    await trio.sleep(1.0)
                    continue
                if resp.status_code < 400 or resp.status_code in (404, 409):
                    return
                log.warning("delete of pod %s/%s: HTTP %d %s", ns, name, resp.status_code, resp.text[:200])
                await trio.sleep(1.0)
        finally:
            self._finishing.discard(uid)

    async def prepare(self) -> int:
        """The kubelet endpoint's listener, then the nodes registered; its port. OSError (the
        address cannot be bound) or nodes.RegisterError: the agent cannot start."""
        s = self.settings
        port = 0
        if s.client_ca:
            self._listeners = await open_listeners(s.host_ip, s.kubelet_port)
            port = self._listeners[0].socket.getsockname()[1]
        self.keeper.kubelet_port = port
        await self.keeper.register()
        return port

    async def _kubelet_endpoint(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """HTTPS with a serving certificate of its own CA; a client without a certificate the
        `client_ca` signed fails the handshake (it reads process pods' logs: a kubelet's rule)."""
        s = self.settings
        made = pki.ensure(s.pods_dir / "kubelet-pki", serving_ips=(s.host_ip,))
        ctx = tlsserve.server_context(str(made.apiserver_crt), str(made.apiserver_key), s.client_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
        server = HttpServer(KubeletApi(self.mirror, self.pods).handle)
        await server.serve(tlsserve.wrap(self._listeners, ctx), task_status=task_status)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if self._listeners:
                await nursery.start(self._kubelet_endpoint)
            await nursery.start(self.network.run)
            await nursery.start(self.procpods.run)
            await nursery.start(self.pods.run)
            await nursery.start(self.kubelet.run)
            await nursery.start(self.mirror.run)
            await nursery.start(self.keeper.run)
            task_status.started()
