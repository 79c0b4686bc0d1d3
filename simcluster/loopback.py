"""The loopback addresses one sim-cluster gives its process pods and Services.

Every sim-cluster with process pods claims a block 127.N.0.0/16 (N in 100..254, the first free
one from a random start, or `--loopback-block N`), so several sim-clusters on one machine never
hand out the same address: the claim is a socket bound to 127.N.255.254:65535, which a second
sim-cluster cannot bind. In the block, pods get 127.N.0.1, 127.N.0.2, ... (the lowest free one; never
127.0.0.1) and the Service whose ClusterIP is 10.96.0.0 + k is served at 127.N.128.0 + k (k below
32768; the API's ClusterIP is unchanged, see `services`).
"""

from __future__ import annotations

import ipaddress
import random
import socket
from dataclasses import dataclass, field

from .kinds import SERVICE_CIDR

FIRST, LAST = 100, 254
CLAIM_PORT = 65535


class BlockTaken(OSError):
    """No free block (or the one asked for is taken)."""


def _claim(n: int) -> socket.socket | None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((f"127.{n}.255.254", CLAIM_PORT))
    except OSError:
        sock.close()
        return None
    return sock


@dataclass
class Block:
    """127.N.0.0/16, held by this process while `claim` is open."""

    n: int
    claim: socket.socket
    used: set[str] = field(default_factory=set)

    @classmethod
    def take(cls, wanted: int | None = None) -> Block:
        if wanted is not None:
            sock = _claim(wanted)
            if sock is None:
                raise BlockTaken(f"--loopback-block {wanted}: 127.{wanted}.0.0/16 is used by another sim-cluster")
            return cls(wanted, sock)
        start = random.randrange(FIRST, LAST + 1)
        for i in range(LAST - FIRST + 1):
            n = FIRST + (start - FIRST + i) % (LAST - FIRST + 1)
            sock = _claim(n)
            if sock is not None:
                return cls(n, sock)
        raise BlockTaken("every loopback block 127.100-254.0.0/16 is used by another sim-cluster")

    def close(self) -> None:
        self.claim.close()

    def service_address(self, cluster_ip: str) -> str:
        """Where a ClusterIP is served (10.96.0.0 + k -> 127.N.128.0 + k); other addresses unchanged."""
        try:
            addr = ipaddress.IPv4Address(cluster_ip)
        except ValueError:
            return cluster_ip
        if addr not in SERVICE_CIDR:
            return cluster_ip
        k = (int(addr) - int(SERVICE_CIDR.network_address)) % 32768
        return str(ipaddress.IPv4Address(f"127.{self.n}.128.0") + k)

    def take_pod_address(self) -> str:
        base = int(ipaddress.IPv4Address(f"127.{self.n}.0.0"))
        for k in range(1, 32767):
            ip = str(ipaddress.IPv4Address(base + k))
            if ip not in self.used:
                self.used.add(ip)
                return ip
        raise BlockTaken(f"no free pod address in 127.{self.n}.0.0/17")

    def give_pod_address(self, ip: str) -> None:
        self.used.discard(ip)
