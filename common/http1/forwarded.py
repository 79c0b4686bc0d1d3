"""The real client behind a trusted proxy: `X-Forwarded-For`, honoured only from configured proxies.

The limits per client address (connections per peer, the web's `maxStreamsPerHost`) count the
TCP peer. Behind a reverse proxy every client has the proxy's address, so they would all share
one quota. `TrustedProxies` names the proxies (addresses or CIDRs, `service.web.trustedProxies`;
none by default): only when the peer is one of them is `X-Forwarded-For` read, right to left,
skipping further trusted proxies; the first address that is not one is the client (the rightmost
untrusted one: everything left of it was written by the client and proves nothing). From any
other peer the header is ignored, so a client cannot dodge its limit by forging it. An entry that
is not an IP address stops the walk: the last trusted hop is counted instead.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

HEADER = b"x-forwarded-for"


class ProxyConfigError(ValueError):
    """An entry of the trusted proxies that is not an address or CIDR: `entry`."""

    def __init__(self, entry: object) -> None:
        super().__init__(f"{entry!r} is not an IP address or CIDR (e.g. 10.0.0.0/8, 192.0.2.7)")
        self.entry = entry


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(text.strip().removeprefix("[").removesuffix("]"))
    except ValueError:
        return None
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped or address


@dataclasses.dataclass(frozen=True, slots=True)
class TrustedProxies:
    """The proxies whose `X-Forwarded-For` is believed (picklable: sent to spawned workers)."""

    networks: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[object]) -> "TrustedProxies":
        """From addresses and CIDRs; ProxyConfigError names the first bad entry."""
        networks = []
        for entry in entries:
            if not isinstance(entry, str) or not entry.strip():
                raise ProxyConfigError(entry)
            try:
                networks.append(ipaddress.ip_network(entry.strip(), strict=False))
            except ValueError:
                raise ProxyConfigError(entry) from None
        return cls(tuple(networks))

    def __bool__(self) -> bool:
        return bool(self.networks)

    def trusts(self, peer: str) -> bool:
        address = _address(peer)
        return address is not None and any(address in net for net in self.networks)

    def client(self, peer: str, headers: Iterable[tuple[bytes, bytes]]) -> str:
        """The address the limits count for a request from `peer` with these headers."""
        if not self.networks or not self.trusts(peer):
            return peer
        hops = [hop for name, value in headers if name.lower() == HEADER
                for hop in value.decode("latin-1").split(",")]
        client = peer
        for hop in reversed(hops):
            address = _address(hop)
            if address is None:
                return client
            client = str(address)
            if not any(address in net for net in self.networks):
                return client
        return client
