"""Pod addresses of a node agent: a CIDR whose every address is local (the run's namespace).

`ykshm realk8s run` puts 10.244.1.0/24 on `lo` of its network namespace (tools/realk8s_netns.py),
so a process pod's address is an address it can bind and others reach, and one that kube-apiserver
accepts in Endpoints (it refuses loopback). `PodNetwork` offers what `simcluster.procpods` asks of
sim-cluster's loopback block: the lowest free address for a new pod, given back when it goes; a
Service's ClusterIP served as itself (10.245.0.0/24 is on `lo` too); and which endpoint addresses
the Service proxy may connect to (`endpoint_network`: the run's 10.244.0.0/16, the API server's
10.244.0.1 included, so `default/kubernetes` works through its ClusterIP).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field


class NetworkError(ValueError):
    """A pod CIDR that cannot serve (one line for the user)."""


@dataclass
class PodNetwork:
    cidr: ipaddress.IPv4Network
    endpoint_network: ipaddress.IPv4Network
    used: set[str] = field(default_factory=set)

    @classmethod
    def parse(cls, cidr: str, endpoints: str = "10.244.0.0/16") -> PodNetwork:
        try:
            net = ipaddress.IPv4Network(cidr, strict=True)
            eps = ipaddress.IPv4Network(endpoints, strict=False)
        except ValueError as exc:
            raise NetworkError(f"--pod-cidr {cidr}: {exc}") from None
        if net.is_loopback or net.num_addresses < 4:
            raise NetworkError(f"--pod-cidr {cidr}: not loopback, and at least a /30")
        return cls(net, eps if net.subnet_of(eps) else net)

    def take_pod_address(self) -> str:
        for addr in self.cidr.hosts():
            ip = str(addr)
            if ip not in self.used:
                self.used.add(ip)
                return ip
        raise NetworkError(f"no free pod address in {self.cidr}")

    def give_pod_address(self, ip: str) -> None:
        self.used.discard(ip)

    def service_address(self, cluster_ip: str) -> str:
        return cluster_ip

    def close(self) -> None:
        pass
