"""Where a Job's bundle may be fetched from, and who gets its credentials.

A Job author names the URL; the controller fetches it from inside the cluster with its own
network position and, for `github`, with a namespace Secret's `token`. So:

- the token goes only to `https://` hosts in `github_hosts` (default `api.github.com`, more with
  `--github-host`): a `github` source naming another host, or plain http, with a `secret` is a
  FetchError, and a redirect to another host or to http drops the token;
- every URL, and every redirect (followed by hand, at most MAX_REDIRECTS), must resolve only to
  addresses outside loopback, link-local (the cloud metadata service 169.254.169.254 among
  them), unspecified, multicast and reserved ranges, unless its host (or `host:port`) is in
  `allow_hosts` (`--allow-fetch-host`, e.g. a test server on 127.0.0.1). Private (RFC 1918)
  addresses stay allowed: in-cluster artifact servers live there.

The addresses are checked when resolved, before the request; a DNS answer that changes between
the check and the connection (rebinding) is not caught (a known limit, see README).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from urllib.parse import urlsplit

import trio

from .errors import FetchError

MAX_REDIRECTS = 5
METADATA = frozenset({ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")})


@dataclasses.dataclass(frozen=True)
class FetchPolicy:
    github_hosts: frozenset[str] = frozenset({"api.github.com"})
    allow_hosts: frozenset[str] = frozenset()

    def token_allowed(self, url: str) -> bool:
        parts = urlsplit(url)
        return parts.scheme == "https" and (parts.hostname or "").lower() in self.github_hosts

    def _allowed_host(self, url: str) -> bool:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return host in self.allow_hosts or f"{host}:{port}" in self.allow_hosts

    async def check(self, url: str) -> None:
        """FetchError unless `url` may be fetched (module docstring)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise FetchError(f"GET {url}: only http(s) URLs are fetched")
        if self._allowed_host(url):
            return
        host = parts.hostname
        try:
            addresses = [ipaddress.ip_address(host)]
        except ValueError:
            try:
                infos = await trio.socket.getaddrinfo(host, parts.port or 443, type=trio.socket.SOCK_STREAM)
            except OSError as exc:
                raise FetchError(f"GET {url}: {host} cannot be resolved: {exc}") from None
            addresses = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]
        for address in addresses:
            why = refused(address)
            if why:
                raise FetchError(f"GET {url}: {host} is {address}, a {why} address; bundles are not "
                                 "fetched from there (the controller's --allow-fetch-host allows a host)")


def refused(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
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
