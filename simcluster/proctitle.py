"""A forked run's /proc/PID/cmdline and /proc/PID/environ, rewritten in place (as setproctitle does).

The kernel shows a process's command line and environment from the stack region its exec left
(`arg_start..arg_end`, `env_start..env_end` in /proc/PID/stat), not from `os.environ`: a child
forked by the fork server would show the server's. Only a privileged process may move those
bounds (PR_SET_MM), so the server is exec'd with room to spare: a padding argument and padding
environment variables (`padding`), which it clears at start (`Regions.clear`, after emptying its
own environment). A child then writes its argv and environment from the start of each region
(`Regions.write`); the rest stays NUL, so `ps`, `/proc/PID/cmdline` (NUL-separated words, padded
with NULs) and `/proc/PID/environ` show the pod's own. A run whose words or environment do not fit
(`Regions.fits`) is started as a fresh interpreter instead.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

ARG_ROOM = 16 * 1024
"""Bytes of command line a forked run may have (the padding argument's length)."""
ENV_PAD = 120 * 1024
"""One padding variable's length (below the kernel's 128 KiB per string)."""
ENV_PADS = 2
"""Padding variables: 240 KiB of environment a forked run may have."""
PAD_ARG = "--" + "x" * (ARG_ROOM - 2)


def padding() -> dict[str, str]:
    """The environment the fork server is exec'd with: room, and nothing else of sim-cluster's."""
    return {f"YKSHM_FORK_SERVER_PAD{i}": "x" * ENV_PAD for i in range(ENV_PADS)}


def _encode(words: list[str]) -> bytes:
    return b"".join(w.encode("utf-8", "surrogateescape") + b"\0" for w in words)


def environ_words(env: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in env.items()]


@dataclass(frozen=True)
class Regions:
    """This process's argv and environ regions, and how much of argv is its own words."""

    arg_start: int
    arg_end: int
    env_start: int
    env_end: int
    own_args: int  # bytes of the server's own words, before the padding argument

    @classmethod
    def of_self(cls, own_words: list[str]) -> Regions:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        arg_start, arg_end, env_start, env_end = (int(fields[i - 3]) for i in (48, 49, 50, 51))
        return cls(arg_start, arg_end, env_start, env_end, len(_encode(own_words)))

    def fits(self, argv: list[str], env: dict[str, str]) -> bool:
        return (len(_encode(argv)) <= self.arg_end - self.arg_start
                and len(_encode(environ_words(env))) <= self.env_end - self.env_start)

    def clear(self) -> None:
        """The server, once its environment is empty: padding argument and environment to NUL."""
        ctypes.memset(self.arg_start + self.own_args, 0, self.arg_end - self.arg_start - self.own_args)
        ctypes.memset(self.env_start, 0, self.env_end - self.env_start)

    def write(self, argv: list[str], env: dict[str, str]) -> None:
        """A child: its words and environment in place of the server's (`fits` checked before)."""
        args, envs = _encode(argv), _encode(environ_words(env))
        ctypes.memmove(self.arg_start, args, len(args))
        if len(args) < self.own_args:
            ctypes.memset(self.arg_start + len(args), 0, self.own_args - len(args))
        ctypes.memmove(self.env_start, envs, len(envs))
