"""A node agent's own range of pod uids, claimed machine-wide.

As root, each process pod runs under a uid of its own (`simcluster.sandbox`): base + an index
from its address, and on its deletion every process left with that uid is killed
(`sandbox.kill_all`). sim-cluster's addresses are unique on the machine (claimed loopback
blocks), but a node agent's are not: every `ykshm realk8s run` has its own network namespace with
the same 10.244.1.0/24, so two agents on one machine (two runs, CI beside a developer) gave their
first pods the same uid, and one agent deleting its pod SIGKILLed the other's (seen as exit 137
in a scheduler pod of one run while another run's test stopped its pods), and a pod could read the
other's token.

So each agent claims a slot N (the first free one of SLOTS) by holding an exclusive `flock` on
`DIR/slot-N.lock` (released by the kernel when the agent dies, however it dies), and its pods'
uids are base + (N + 1) * SLOT_WIDTH + index: above every sim-cluster's, apart from every other
agent's. An index is below SLOT_WIDTH (an address's index, `sandbox.identity`, is under 2^23).
"""

from __future__ import annotations

import fcntl
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

SLOT_WIDTH = 1 << 23
SLOTS = 64
DIR = Path(tempfile.gettempdir()) / "ykshm-pod-uid-slots"


class SlotsTaken(OSError):
    """No free slot, or the slot directory is not one only this user may write (one line)."""


def _directory(path: Path) -> None:
    """`path` made 0700, or refused unless it is a real directory of ours that nobody else may write
    (anyone able to plant a lock file there could make two agents share a slot)."""
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError as exc:
        raise SlotsTaken(f"cannot make {path} for the pod uid slots: {exc.strerror}") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise SlotsTaken(f"{path} is not a directory of this user that only it may write; "
                         "the node agent claims its pod uid slot there")


@dataclass
class UidSlot:
    """Slot `n`, held while `fd` is open."""

    n: int
    fd: int

    @classmethod
    def take(cls, directory: Path = DIR) -> UidSlot:
        _directory(directory)
        for n in range(SLOTS):
            fd = os.open(directory / f"slot-{n}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return cls(n, fd)
        raise SlotsTaken(f"every pod uid slot ({SLOTS}, {directory}) is held by another node agent")

    def uid_base(self, base: int) -> int:
        """Where this agent's pods' uids start."""
        return base + (self.n + 1) * SLOT_WIDTH

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
