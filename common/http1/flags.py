"""The command-line flags of the connection limits, one set for `ykshm web`, `ykshm cr-operator`
and `ykshm admission`.

    --max-connections N  --max-connections-per-peer N  --idle-timeout S  --head-timeout S
    --body-timeout S

A value that makes no sense is one line naming the flag and the value (exit 2).
"""

from __future__ import annotations

import argparse

from common.cliutil import UsageError

from .limits import LimitError, Limits

_FLAG = {"max_connections": "--max-connections", "max_per_peer": "--max-connections-per-peer",
         "head_timeout": "--head-timeout", "body_timeout": "--body-timeout"}


def add_limit_flags(parser: argparse.ArgumentParser, idle_timeout: float,
                    defaults: Limits = Limits()) -> None:
    """The five flags, with the role's defaults (Limits' own unless given) and its idle
    keep-alive timeout."""
    d = defaults
    parser.add_argument("--max-connections", type=int, default=d.max_connections,
                        help=f"open connections per worker (default {d.max_connections})")
    parser.add_argument("--max-connections-per-peer", type=int, default=d.max_per_peer,
                        help=f"open connections per client address and worker (default {d.max_per_peer})")
    parser.add_argument("--idle-timeout", type=float, default=idle_timeout,
                        help=f"close a keep-alive connection idle this long (s, default {idle_timeout:g})")
    parser.add_argument("--head-timeout", type=float, default=d.head_timeout,
                        help=f"a request head must arrive within this (s, default {d.head_timeout:g})")
    parser.add_argument("--body-timeout", type=float, default=d.body_timeout,
                        help=f"a request body must arrive within this (s, default {d.body_timeout:g})")


def limits_of(args: argparse.Namespace) -> Limits:
    """The checked Limits of parsed flags (and a checked --idle-timeout); UsageError names one."""
    limits = Limits(max_connections=args.max_connections, max_per_peer=args.max_connections_per_peer,
                    head_timeout=args.head_timeout, body_timeout=args.body_timeout)
    try:
        limits.check()
    except LimitError as exc:
        raise UsageError(f"{_FLAG[exc.name]} {exc.rule}, not {exc.value}") from None
    if not args.idle_timeout > 0:
        raise UsageError(f"--idle-timeout must be more than 0 seconds, not {args.idle_timeout}")
    return limits
