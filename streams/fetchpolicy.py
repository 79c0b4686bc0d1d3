"""Where a Job's bundle may be fetched from, and who gets its credentials.

A Job author names the URL; the controller fetches it from inside the cluster with its own
network position and, for `github`, with a namespace Secret's `token`. So:

- the token goes only to `https://` hosts in `github_hosts` (default `api.github.com`, more with
  `--github-host`): a `github` source naming another host, or plain http, with a `secret` is a
  FetchError, and a redirect to another host or to http drops the token;
- every URL, and every redirect (followed by hand, at most MAX_REDIRECTS), must resolve only to
  addresses outside loopback, link-local (the cloud metadata service 169.254.169.254 among
  them), unspecified, multicast and reserved ranges, unless its host (or `host:port`) is in
  `allow_hosts` (`--allow-fetch-host`, e.g. a test server on 127.0.0.1);
- nor into the cluster's own Service and pod networks (`cluster_networks`, `--cluster-cidr`,
  default kube-apiserver's Service range 10.96.0.0/12 and the usual pod range 10.244.0.0/16):
  a Job author would otherwise learn what an internal Service answers (security review 2, N17).
  An in-cluster artifact server is named with `--allow-fetch-host`. Other private (RFC 1918)
  addresses stay allowed: artifact servers outside the cluster live there.

Each connection resolves its host once and connects to an address that resolution checked
(`PinnedBackend`, httpcore's network backend under the fetch's client): a DNS answer that changes
between a check and the connection (rebinding) cannot send the request to a refused address.
`check` refuses a URL that is not http(s) before any request; the addresses are checked once, by
the connection, and the fetch names the URL in the error.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx
import trio

from .errors import FetchError

MAX_REDIRECTS = 5
CLUSTER_NETWORKS = (ipaddress.ip_network("10.96.0.0/12"), ipaddress.ip_network("10.244.0.0/16"))
METADATA = frozenset({ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")})

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class AddressRefused(FetchError):
    """A host that cannot be resolved, or resolves to an address the policy refuses (raised
    while connecting; the fetch adds the URL)."""


async def system_resolve(host: str, port: int) -> list[Address]:
    """The host's addresses from the system resolver (an IP literal is its own answer)."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    infos = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
    return [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]


def refused(address: Address) -> str | None:
    """Why an address is off limits by default, or None."""
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        address = mapped
    if address in METADATA:
        return "cloud metadata"
    for why, test in (("loopback", address.is_loopback), ("link-local", address.is_link_local),
                      ("unspecified", address.is_unspecified), ("multicast", address.is_multicast),
                      ("reserved", address.is_reserved)):
        if test:
            return why
    return None


@dataclasses.dataclass(frozen=True)
class FetchPolicy:
    github_hosts: frozenset[str] = frozenset({"api.github.com"})
    allow_hosts: frozenset[str] = frozenset()
    resolve: Callable[[str, int], Awaitable[list[Address]]] = dataclasses.field(
        default=system_resolve, compare=False)
    """How a host's addresses are found (the system resolver; a test plays a rebinding DNS)."""
    forbidden: Callable[[Address], str | None] = dataclasses.field(default=refused, compare=False)
    """Why an address is off limits, or None (default `refused`; a test narrows it to loopback
    aliases so that no connection leaves 127.0.0.0/8)."""
    cluster_networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = CLUSTER_NETWORKS
    """The cluster's Service and pod networks: refused unless the host is allowed."""

    def why_refused(self, address: Address) -> str | None:
        why = self.forbidden(address)
        if why is None and any(address in net for net in self.cluster_networks
                               if net.version == address.version):
            why = "cluster-internal"
        return why

    def token_allowed(self, url: str) -> bool:
        parts = urlsplit(url)
        return parts.scheme == "https" and (parts.hostname or "").lower() in self.github_hosts

    def _allowed(self, host: str, port: int) -> bool:
        host = host.lower()
        return host in self.allow_hosts or f"{host}:{port}" in self.allow_hosts

    def check(self, url: str) -> None:
        """FetchError unless `url` is one we may fetch at all (http(s), a host); its addresses
        are checked when the connection resolves them (`connectable`), once."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise FetchError(f"GET {url}: only http(s) URLs are fetched")

    async def connectable(self, host: str, port: int) -> Address:
        """The address to connect to for host:port, from one resolution whose every answer
        passed the policy (unless the host is allowed); FetchError otherwise (the caller names
        the URL)."""
        try:
            addresses = await self.resolve(host, port)
        except OSError as exc:
            raise AddressRefused(f"{host} cannot be resolved: {exc}") from None
        if not addresses:
            raise AddressRefused(f"{host} has no address")
        if not self._allowed(host, port):
            for address in addresses:
                why = self.why_refused(address)
                if why:
                    raise AddressRefused(f"{host} is {address}, a {why} address; bundles are not "
                                     "fetched from there (the controller's --allow-fetch-host allows a host)")
        return addresses[0]


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's trio backend, connecting only to the address the policy checked in the same
    resolution (no second lookup for an attacker's DNS to answer differently). TLS still
    verifies the URL's host name: httpcore passes it as the server name, not the address."""

    def __init__(self, policy: FetchPolicy) -> None:
        self.policy = policy
        self._inner = httpcore.TrioBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        address = await self.policy.connectable(host, port)
        return await self._inner.connect_tcp(str(address), port, timeout, local_address, socket_options)

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        raise FetchError("bundles are not fetched over unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def pinned_client(policy: FetchPolicy, verify: Any, timeout: float) -> httpx.AsyncClient:
    """An httpx client (no redirects followed, no proxy from the environment) whose connections
    go through `PinnedBackend`. httpx has no public hook for the network backend: its transport's
    connection pool is replaced by one built with the same TLS context."""
    transport = httpx.AsyncHTTPTransport(verify=verify, trust_env=False)
    transport._pool = httpcore.AsyncConnectionPool(  # noqa: SLF001 - see the docstring
        ssl_context=httpx.create_ssl_context(verify=verify), network_backend=PinnedBackend(policy))
    return httpx.AsyncClient(transport=transport, timeout=timeout, follow_redirects=False, trust_env=False)
