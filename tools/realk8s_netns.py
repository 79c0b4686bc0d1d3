"""The network of `ykshm realk8s run`: a network namespace of its own, with addresses only there.

Why a namespace: kube-apiserver refuses loopback (127.0.0.0/8), link-local and unspecified
addresses in Endpoints and EndpointSlices, and writes its advertise address into
`default/kubernetes` itself, so a real control plane needs addresses that are not loopback. On a
shared machine (a developer's, CI's) such an address must never reach anything outside: inside
a namespace made here there is no interface but `lo`, no route out, and every address below is
local to it. So the whole run (etcd, kube-apiserver, kube-controller-manager, kube-scheduler and CMD) lives in it;
nothing it does can connect off the machine, nor to anything else on it.

How: `unshare(CLONE_NEWNET)` as root (what `unshare -n` does); as another user with
`CLONE_NEWUSER` too and a one-uid map (what `unshare -rn` does), which makes the user root of its
own namespaces only. Then `lo` is brought up and the run's ranges are put on it: a prefix on `lo`
makes every address of it local (no route to anywhere else exists):

    10.244.0.1/32   kube-apiserver's advertise and bind address (written into default/kubernetes)
    10.244.1.0/24   pods (a node agent gives process pods addresses from it)
    10.245.0.0/24   Services (--service-cluster-ip-range; 10.245.0.1 is `kubernetes`)

10.244/16 is the pod range flannel and kind made familiar; 10.245.0.0/24 sits next to it, apart
from the 10.96.0.0/12 default, which the tests may never touch even by mistake.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import subprocess
from dataclasses import dataclass

from common.cliutil import Failure

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000


@dataclass(frozen=True)
class Network:
    """The addresses of one run, all on `lo` of its namespace."""

    advertise: str = "10.244.0.1"
    pod_cidr: str = "10.244.1.0/24"
    service_cidr: str = "10.245.0.0/24"

    @property
    def kubernetes_service_ip(self) -> str:
        """The first Service IP: kube-apiserver gives it to `default/kubernetes`."""
        return str(next(ipaddress.ip_network(self.service_cidr).hosts()))

    def lo_addresses(self) -> tuple[str, ...]:
        return (f"{self.advertise}/32", self.pod_cidr, self.service_cidr)


def _unshare(flags: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(flags) != 0:
        err = ctypes.get_errno()
        raise Failure(f"cannot create a network namespace (unshare: {os.strerror(err)}); "
                      "the real control plane runs only inside one")


def _map_to_root(uid: int, gid: int) -> None:
    """Become root of the new user namespace (`unshare -r`): this user only, no other ids."""
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"0 {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"0 {gid} 1")


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise Failure(f"ip {' '.join(args)} in the run's network namespace failed: {done.stderr.strip()}")


def enter(network: Network, user_namespace: bool | None = None) -> None:
    """Move this process (and so everything it starts) into a new network namespace with `network`
    on its `lo`. Call it before any thread is started (a user namespace requires one thread).
    `user_namespace`: with a user namespace too (default: unless root)."""
    uid, gid = os.getuid(), os.getgid()   # read before unshare: inside, they are unmapped until mapped
    if not (uid != 0 if user_namespace is None else user_namespace):
        _unshare(CLONE_NEWNET)
    else:
        _unshare(CLONE_NEWNET | CLONE_NEWUSER)
        try:
            _map_to_root(uid, gid)
        except OSError as exc:
            raise Failure(f"cannot map uid {uid} to root of the run's user namespace: {exc.strerror}") from None
    _ip("link", "set", "lo", "up")
    for address in network.lo_addresses():
        _ip("addr", "add", address, "dev", "lo")
