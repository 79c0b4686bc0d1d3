"""Each process pod runs under an unprivileged uid of its own: what `pods/create` may reach.

A process pod runs `ykshm ARGS` of the pod author's choice; ykshm reads files by path, so whoever
may create a pod could read whatever the pod's OS user can (the 2026-11-28 review, N2: a kubeconfig
`exec` plugin ran /bin/sh as sim-cluster's user and read the CA and ServiceAccount signing keys:
cluster-admin). So, when sim-cluster runs as root (as in CI and these machines), every run of a
process pod — forked by the fork server or started fresh (`--no-fork-server`), and its exec probes —
drops to the pod's own identity before it runs a line of the pod's: `setgroups([])`, then
`setgid`/`setuid` to `base + index` (`--pod-uid-base`, default 200000; uid and gid alike). The index
comes from the pod's loopback address (`loopback`: 127.N.0.k -> (N-100)*32768 + k), which is unique
among the live pods of every sim-cluster of the machine, so two pods never share an identity.

What that identity reaches of the cluster's own files (see `volumes.PodDir`):
- the pods directory is 0711 (enter, not list) and each pod's directory is `root:<pod gid>` 0750:
  its own directory only, never another pod's; its `logs/` stays 0700 root (sim-cluster writes it);
  its volume files are owned by the pod's uid (a 0600 token is readable by the pod, by nobody else);
  nothing the pod may write is a place sim-cluster later writes as root (no symlink games);
- sim-cluster's run directory, `RUN/pki` (CA and signing keys) and the SI socket are 0700 root;
- on the pod's deletion every process left with its uid is killed (a daemonised child escapes
  killpg), before the index may be given to another pod.

ykshm itself (the interpreter, the venv, the checkout) must be readable by the pod's uid. With a
normal umask (022) it is, except when a directory on the way is private (on these machines the
interpreter is under /root, 0700): then the run, still root, first enters a mount namespace of its
own where a tmpfs (0711) covers each such directory and only the entries on the way to ykshm are
bound back (`expose`), so the pod sees the interpreter and nothing else of the private directory.
The pods directory's ancestors must be searchable by other users: sim-cluster refuses to start
otherwise (`check_pods_dir`).

When sim-cluster is not root it cannot change uid, and a user namespace would not help: files are
checked against the uid the namespace maps to, which is sim-cluster's own. Then process pods run as
sim-cluster's user, as before, and `pods/create` is as strong as that user: sim-cluster logs it at
start and SECURITY.md says so.
"""

from __future__ import annotations

import ctypes
import functools
import ipaddress
import logging
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("ykshm.sim-cluster.sandbox")

DEFAULT_BASE = 200000
CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18
PROJECT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # the checkout ykshm runs from
BLOCK_FIRST = 100  # loopback.FIRST: the lowest block number
BLOCK_SIZE = 32768  # pod addresses of one block (127.N.0.1 .. 127.N.127.255)


@dataclass(frozen=True)
class PodIdentity:
    """The uid and gid a pod's processes run as."""

    uid: int
    gid: int

    def plan(self) -> Callable[[], None]:
        """What a forked child, still root, calls to become the pod: see ykshm where it lives
        (`expose`), then drop to this identity for good (no supplementary group, gid, uid). Looked
        up here, in the parent: after a fork of a threaded process the child only makes system calls."""
        private, libc = private_dirs(), _libc()

        def become() -> None:
            expose(private, libc)
            os.setgroups([])
            os.setgid(self.gid)
            os.setuid(self.uid)

        return become

    def popen_options(self) -> dict[str, Any]:
        """`subprocess.Popen`/`trio.run_process` keywords: the child becomes the pod before exec."""
        return {"preexec_fn": self.plan()}

    def become(self) -> None:
        """In a forked child of a single-threaded process (the fork server's): become the pod."""
        self.plan()()


@functools.cache
def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _searchable(path: str) -> bool:
    try:
        return bool(os.stat(path).st_mode & 0o001)
    except OSError:
        return True  # not there: nothing to expose


@functools.cache
def private_dirs() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(directory, entries) for each directory others cannot enter on the way to what a pod runs
    (the interpreter, the venv, the checkout, sys.path), outermost first, with the entries under it
    that lead there."""
    needed = {os.path.realpath(p) for p in (sys.executable, sys.base_prefix, sys.prefix, PROJECT, *sys.path)
              if p and os.path.isabs(p)}
    found: dict[str, set[str]] = {}
    for path in needed:
        parts = path.strip("/").split("/")
        for depth in range(len(parts)):
            here = "/" + "/".join(parts[:depth])
            if not _searchable(here):
                found.setdefault(here, set()).add(parts[depth])
    return tuple(sorted(((d, tuple(sorted(e))) for d, e in found.items()), key=lambda item: item[0].count("/")))


def _mount(libc: Any, source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    if libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                  data.encode() if data else None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def expose(private: tuple[tuple[str, tuple[str, ...]], ...], libc: Any) -> None:
    """In a child, as root: a mount namespace of its own where each private directory is a 0711
    tmpfs holding only its entries on the way to ykshm (bound from the real ones)."""
    if not private:
        return
    if libc.unshare(CLONE_NEWNS) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWNS): {os.strerror(err)}")
    _mount(libc, "none", "/", None, MS_REC | MS_PRIVATE, None)  # nothing here reaches the host's
    for directory, entries in private:
        held = {name: os.open(os.path.join(directory, name), os.O_PATH | os.O_CLOEXEC) for name in entries}
        _mount(libc, "tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0711,size=64k")
        for name, fd in held.items():
            target = os.path.join(directory, name)
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.mkdir(target)
            else:
                open(target, "x").close()  # noqa: SIM115 - a mount point for a file
            _mount(libc, f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC, None)
            os.close(fd)


def default_base() -> int | None:
    """Pods get their own uid when sim-cluster can give one (root), else run as sim-cluster."""
    return DEFAULT_BASE if os.geteuid() == 0 else None


def identity(base: int | None, pod_ip: str) -> PodIdentity | None:
    """The identity of the pod at loopback address `pod_ip` (None: no sandbox)."""
    if base is None:
        return None
    addr = int(ipaddress.IPv4Address(pod_ip))
    block = (addr >> 16) & 0xFF
    index = (block - BLOCK_FIRST) * BLOCK_SIZE + (addr & 0xFFFF)
    value = base + index
    return PodIdentity(value, value)


def check_pods_dir(path: Path, base: int | None) -> None:
    """The pods directory: 0711 with a sandbox (each pod reaches its own directory only), and its
    ancestors searchable by other users; ValueError naming the one that is not."""
    if base is None:
        return
    os.chmod(path, 0o711)
    for parent in path.resolve().parents:
        if not os.stat(parent).st_mode & 0o001:
            raise ValueError(f"--pods-dir {path}: {parent} is not searchable by other users (mode "
                             f"{os.stat(parent).st_mode & 0o777:o}); the pods' own uids must reach "
                             "their directories")


def chown_tree(path: Path, who: PodIdentity | None) -> None:
    """Give a volume's files (not its directories, not symlinks) to the pod's uid."""
    if who is None:
        return
    for top, _dirs, files in os.walk(path):
        for name in files:
            os.lchown(os.path.join(top, name), who.uid, who.gid)


def _uid_of(pid: str) -> int | None:
    """The real uid of a live process (None for a zombie: it is only waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        if fields.get("State", "").split()[:1] == ["Z"]:
            return None
        return int(fields["Uid"].split()[0])
    except (OSError, ValueError, IndexError, KeyError):
        return None


def kill_all(who: PodIdentity | None) -> None:
    """SIGKILL every process left with the pod's uid (a child it daemonised out of its group)."""
    if who is None:
        return
    for _ in range(5):
        found = [int(p) for p in os.listdir("/proc") if p.isdigit() and _uid_of(p) == who.uid]
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    log.warning("processes of uid %d survived five rounds of SIGKILL", who.uid)


__all__ = ["DEFAULT_BASE", "PodIdentity", "check_pods_dir", "chown_tree", "default_base", "identity", "kill_all"]
