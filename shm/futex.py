"""FUTEX_WAIT on a 32-bit word of a shared mapping, through ctypes (which releases the GIL).

The engine bumps `header.wake_seq` and issues FUTEX_WAKE after a batch of publishes
(`RingWriter.wake`); each web worker has one thread parked here instead of polling the ring
header on a timer. The futex is the shared (not PRIVATE) kind: waker and waiter are different
processes mapping the same /dev/shm file. Waiting only reads the word, so a read-only mapping
is enough. Linux only; elsewhere `wait` degrades to a sleep of `timeout` (callers poll then).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import time

FUTEX_WAIT = 0
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98, "arm64": 98, "riscv64": 98, "ppc64le": 221, "s390x": 238}


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _load():
    number = _SYS_FUTEX.get(platform.machine())
    if number is None or not os.uname().sysname == "Linux":
        return None, None
    libc = ctypes.CDLL(None, use_errno=True)
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    return syscall, number


_syscall, _NUMBER = _load()
AVAILABLE = _syscall is not None


def wait(address: int, expected: int, timeout: float) -> bool:
    """Sleep while the uint32 at `address` equals `expected`, at most `timeout` seconds.

    Returns True when woken or the value already differed, False on timeout."""
    if _syscall is None:
        time.sleep(timeout)
        return False
    ts = _Timespec(int(timeout), int((timeout % 1.0) * 1e9))
    rc = _syscall(_NUMBER, ctypes.c_void_p(address), FUTEX_WAIT, ctypes.c_uint32(expected & 0xFFFFFFFF),
                  ctypes.byref(ts), None, 0)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    return err in (errno.EAGAIN, errno.EINTR)  # changed before we slept, or a signal: look again
