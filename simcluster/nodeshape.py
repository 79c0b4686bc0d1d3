"""The capacity of the nodes sim-cluster and the node agent make: one set of flags, one check.

`--node-cpu`, `--node-memory` and `--node-pods` mean the same to `ykshm sim-cluster` (its
generated nodes) and `ykshm node-agent` (the nodes it registers); a bad value is the same one
line (exit 2) from either.
"""

from __future__ import annotations

import argparse

from common.cliutil import UsageError
from common.quantity import QuantityError, parse_milli, parse_quantity


def add_flags(parser: argparse.ArgumentParser, whose: str) -> None:
    """The three flags; `whose` ends their help ("generated nodes", "each node")."""
    parser.add_argument("--node-cpu", default="16", help=f"cpu capacity of {whose} (default 16)")
    parser.add_argument("--node-memory", default="64Gi", help=f"memory capacity of {whose} (default 64Gi)")
    parser.add_argument("--node-pods", type=int, default=110, help=f"pods capacity of {whose} (default 110)")


def check(args: argparse.Namespace) -> None:
    """UsageError naming the flag when a capacity does not parse or no pod fits."""
    if args.node_pods < 1:
        raise UsageError(f"--node-pods must be at least 1, got {args.node_pods}")
    try:
        parse_milli(args.node_cpu)
        parse_quantity(args.node_memory)
    except QuantityError as exc:
        raise UsageError(f"--node-cpu/--node-memory: {exc}") from None
