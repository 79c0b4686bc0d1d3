"""Services for real: a loopback address per ClusterIP with a TCP proxy, and the names processes resolve.

- **Addresses.** A Service keeps the ClusterIP the API gave it (10.96.0.0/12); sim-cluster serves it
  on a loopback address of its block (`loopback.Block.service_address`: 10.96.0.0 + k ->
  127.N.128.0 + k). Each TCP port of a Service with a ClusterIP is a listener there; a connection
  goes to one ready endpoint (round robin over the Service's Endpoints `addresses` on loopback pod
  addresses; the `targetPort` resolved per endpoint) and the bytes are copied both ways. No ready
  endpoint: the connection is closed at once (a real ClusterIP rejects it). `default/kubernetes`
  (127.N.128.1:443) reaches sim-cluster itself. Ports below 1024 need root (or
  `net.ipv4.ip_unprivileged_port_start`); a port that cannot be bound is logged and not served.
- **Names.** sim-cluster writes a hosts file (`<pods-dir>/hosts`, replaced atomically whenever a
  Service or its endpoints change): `NAME.NS.svc.cluster.local` and `NAME.NS.svc` -> the Service's
  loopback address, or for a headless Service (`clusterIP: None`) each ready endpoint's address.
  A process pod gets `YKSHM_HOSTS` (that file) and `YKSHM_DNS_SEARCH` (`NS.svc.cluster.local
  svc.cluster.local cluster.local`, the search list of a pod's resolv.conf), and every `ykshm`
  process resolves through them first (`common.podhosts`, installed by the CLI when YKSHM_HOSTS is
  set), so `NAME`, `NAME.NS`, `NAME.NS.svc` and the full name work as with cluster DNS; other names go to
  the system resolver. `{NAME}_SERVICE_HOST` env variables carry the loopback address too.
- **The node agent** (`nodeagent/`) runs this same network on its store over HTTP, with a block
  that serves a ClusterIP as itself and whose `endpoint_network` (the realk8s run's 10.244.0.0/16)
  replaces 127.0.0.0/8 as the addresses a proxy may connect to (`nodeagent.network`).
"""

from __future__ import annotations

import ipaddress
import itertools
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from .loopback import Block
from .resources import ENDPOINTS, SERVICES
from .store import Change, Store

log = logging.getLogger("ykshm.sim-cluster.services")
Obj = dict[str, Any]
ListenerKey = tuple[str, str, int]  # (service uid, loopback ip, port)
LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")
BUFFER = 65536
CONNECT_TIMEOUT = 5.0


def dns_env(pod: Obj, hosts: Path) -> dict[str, str]:
    ns = pod["metadata"]["namespace"]
    return {"YKSHM_HOSTS": str(hosts), "YKSHM_DNS_SEARCH": f"{ns}.svc.cluster.local svc.cluster.local cluster.local"}


def _ready_addresses(endpoints: Obj | None, network: ipaddress.IPv4Network = LOOPBACK
                     ) -> list[tuple[str, dict[str, int]]]:
    """(ip, {port name: port}) of each ready address in `network` (loopback; a node agent's pod
    network in a run's namespace, `nodeagent.network`)."""
    out = []
    for subset in (endpoints or {}).get("subsets") or []:
        ports = {p.get("name") or "": p.get("port") for p in subset.get("ports") or []}
        for addr in subset.get("addresses") or []:
            ip = addr.get("ip", "")
            try:
                if ipaddress.IPv4Address(ip) in network:
                    out.append((ip, ports))
            except ValueError:
                continue
    return out


def _network(block: Block) -> ipaddress.IPv4Network:
    return getattr(block, "endpoint_network", LOOPBACK)


def hosts_lines(store: Store, block: Block) -> list[str]:
    lines = []
    for svc in store.list(SERVICES.bucket)[0]:
        meta, spec = svc["metadata"], svc.get("spec") or {}
        names = f"{meta['name']}.{meta['namespace']}.svc.cluster.local {meta['name']}.{meta['namespace']}.svc"
        ip = spec.get("clusterIP")
        if ip == "None":
            eps = store.get(ENDPOINTS.bucket, meta["namespace"], meta["name"])
            lines.extend(f"{addr} {names}" for addr in dict.fromkeys(a for a, _ in _ready_addresses(eps, _network(block))))
        elif ip:
            lines.append(f"{block.service_address(ip)} {names}")
    return lines


@dataclass
class ServiceNetwork:
    """The listeners of every Service port and the hosts file (see the module text)."""

    store: Store
    block: Block
    hosts: Path
    _listeners: dict[ListenerKey, trio.CancelScope] = field(default_factory=dict)
    _turn: itertools.count = field(default_factory=itertools.count)
    _wake: trio.Event = field(default_factory=trio.Event)

    def __post_init__(self) -> None:
        self.store.listeners.append(self._on_change)

    def _on_change(self, change: Change) -> None:
        if change.bucket in (SERVICES.bucket, ENDPOINTS.bucket):
            self._wake.set()

    def write_hosts(self) -> None:
        lines = hosts_lines(self.store, self.block)
        text = "# sim-cluster Service names (services.py)\n" + "".join(f"{line}\n" for line in lines)
        tmp = self.hosts.with_name(self.hosts.name + ".tmp")
        tmp.write_text(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, self.hosts)

    def wanted(self) -> dict[ListenerKey, tuple[str, str, str]]:
        """Listener -> (namespace, service name, port name) for every TCP port of a ClusterIP Service."""
        out = {}
        for svc in self.store.list(SERVICES.bucket)[0]:
            meta, spec = svc["metadata"], svc.get("spec") or {}
            ip = spec.get("clusterIP")
            if not ip or ip == "None":
                continue
            for port in spec.get("ports") or []:
                if (port.get("protocol") or "TCP") == "TCP":
                    key = (meta["uid"], self.block.service_address(ip), int(port["port"]))
                    out[key] = (meta["namespace"], meta["name"], port.get("name") or "")
        return out

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            task_status.started()
            while True:
                try:
                    self.write_hosts()
                except OSError as exc:
                    log.warning("cannot write %s: %s", self.hosts, exc.strerror or exc)
                wanted = self.wanted()
                for key in [k for k in self._listeners if k not in wanted]:
                    self._listeners.pop(key).cancel()
                for key, target in wanted.items():
                    if key not in self._listeners:
                        scope = trio.CancelScope()
                        self._listeners[key] = scope
                        nursery.start_soon(self._listen, scope, key, target)
                await self._wake.wait()
                self._wake = trio.Event()

    async def _listen(self, scope: trio.CancelScope, key: ListenerKey, target: tuple[str, str, str]) -> None:
        _, ip, port = key
        with scope:
            try:
                listeners = await trio.open_tcp_listeners(port, host=ip)
            except OSError as exc:
                log.warning("service %s/%s: cannot listen on %s:%d: %s", target[0], target[1], ip, port,
                            exc.strerror or exc)
                return
            await trio.serve_listeners(lambda stream: self._proxy(stream, target), listeners)

    def _pick(self, target: tuple[str, str, str]) -> tuple[str, int] | None:
        ns, name, port_name = target
        ready = [(ip, ports[port_name]) for ip, ports in
                 _ready_addresses(self.store.get(ENDPOINTS.bucket, ns, name), _network(self.block))
                 if port_name in ports]
        return ready[next(self._turn) % len(ready)] if ready else None

    async def _proxy(self, client: trio.SocketStream, target: tuple[str, str, str]) -> None:
        """One connection: to a ready endpoint, or closed at once when there is none (or it refuses)."""
        try:
            async with client:
                chosen = self._pick(target)
                if chosen is None:
                    return
                upstream = None
                with trio.move_on_after(CONNECT_TIMEOUT):
                    upstream = await trio.open_tcp_stream(*chosen)
                if upstream is None:
                    return
                async with upstream, trio.open_nursery() as nursery:
                    nursery.start_soon(_copy, client, upstream, nursery.cancel_scope)
                    nursery.start_soon(_copy, upstream, client, nursery.cancel_scope)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            return


async def _copy(src: trio.SocketStream, dst: trio.SocketStream, scope: trio.CancelScope) -> None:
    """Copy until EOF, then half-close the other side; an error ends both directions."""
    try:
        while data := await src.receive_some(BUFFER):
            await dst.send_all(data)
        await dst.send_eof()
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        scope.cancel()
