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

Proxies: `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY` (either case, read from the controller's environment
when a fetch starts, NO_PROXY as urllib reads it) are honoured (`ProxyRouting`). The policy still
applies to the proxy's *target*: its host is resolved and checked before anything is sent to the
proxy, so a refused target (metadata, loopback, the cluster's networks) is refused without a
byte to the proxy. The proxy itself is the operator's address and is not checked (it may be
loopback or private). https goes through a CONNECT tunnel with TLS to the target inside it (a
github token is never visible to the proxy); http is sent to the proxy as an absolute URI (no
token ever goes over http: `token_allowed`). The proxy resolves the target itself: the
rebinding guarantee of `PinnedBackend` is the proxy's to keep there. A proxy URL other than
`http://host[:port]` is a FetchError naming the variable.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import urlsplit
from urllib.request import getproxies_environment, proxy_bypass_environment

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


def proxy_for(url: httpx.URL, proxies: dict[str, str]) -> str | None:
    """The proxy URL the environment gives for `url` (None: direct, NO_PROXY matched or none set);
    FetchError naming the variable when it is not an http:// proxy."""
    proxy = proxies.get(url.scheme)
    if not proxy or proxy_bypass_environment(url.host, proxies):
        return None
    parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    try:
        parts.port
    except ValueError:
        parts = parts._replace(netloc="")
    if parts.scheme != "http" or not parts.hostname:
        raise FetchError(f"{url.scheme.upper()}_PROXY={proxy!r}: only an http://host[:port] proxy is used")
    return f"http://{parts.netloc}"


class ProxyRouting(httpx.AsyncBaseTransport):
    """Each request direct (through `PinnedBackend`) or through the environment's proxy, after
    the policy checked the target's addresses (see the module's docstring)."""

    def __init__(self, policy: FetchPolicy, verify: Any, proxies: dict[str, str]) -> None:
        self.policy, self.verify, self.proxies = policy, verify, proxies
        self.direct = httpx.AsyncHTTPTransport(verify=verify, trust_env=False)
        self.direct._pool = httpcore.AsyncConnectionPool(  # noqa: SLF001 - see pinned_client
            ssl_context=httpx.create_ssl_context(verify=verify), network_backend=PinnedBackend(policy))
        self.via: dict[str, httpx.AsyncHTTPTransport] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        proxy = proxy_for(request.url, self.proxies)
        if proxy is None:
            return await self.direct.handle_async_request(request)
        await self.policy.connectable(request.url.host, request.url.port or
                                      (443 if request.url.scheme == "https" else 80))
        if proxy not in self.via:
            transport = httpx.AsyncHTTPTransport(verify=self.verify, trust_env=False)
            transport._pool = httpcore.AsyncHTTPProxy(  # noqa: SLF001 - see pinned_client
                proxy_url=proxy, ssl_context=httpx.create_ssl_context(verify=self.verify),
                network_backend=httpcore.TrioBackend())
            self.via[proxy] = transport
        return await self.via[proxy].handle_async_request(request)

    async def aclose(self) -> None:
        for transport in (self.direct, *self.via.values()):
            await transport.aclose()


def pinned_client(policy: FetchPolicy, verify: Any, timeout: float,
                  proxies: dict[str, str] | None = None) -> httpx.AsyncClient:
    """An httpx client (no redirects followed) whose direct connections go through
    `PinnedBackend`, and proxied ones through the environment's proxy (`proxies`: default
    urllib's reading of the environment) once the target passed the policy. httpx has no public
    hook for the network backend: its transports' connection pools are replaced by ones built
    with the same TLS context."""
    routing = ProxyRouting(policy, verify, getproxies_environment() if proxies is None else proxies)
    return httpx.AsyncClient(transport=routing, timeout=timeout, follow_redirects=False, trust_env=False)
