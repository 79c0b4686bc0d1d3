"""The flags of every role that talks to a kube-apiserver (`shim`, `streams`, `cr-operator`,
`pe-sim`): where the API is, and how to log. One definition, so the roles cannot drift apart.

    --api-server URL | --kubeconfig FILE [--context CTX]    [--log-level LEVEL]
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from common.cliutil import UsageError

LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]


def add_source(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--api-server", metavar="URL", help="kube-apiserver URL (no auth)")
    src.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig: server, token, certs")
    parser.add_argument("--context", help="kubeconfig context (default: current-context)")
    parser.add_argument("--log-level", default="INFO", choices=LEVELS)


def kube_config(args: argparse.Namespace) -> Any:
    """The KubeConfig the flags name; UsageError (exit 2) for a bad URL or kubeconfig."""
    from .client import KubeConfig, KubeConfigError, load_kubeconfig

    if args.api_server:
        if not args.api_server.startswith(("http://", "https://")):
            raise UsageError(f"--api-server {args.api_server!r}: must be an http(s):// URL")
        return KubeConfig(server=args.api_server)
    try:
        return load_kubeconfig(args.kubeconfig, args.context)
    except KubeConfigError as exc:
        raise UsageError(str(exc)) from None


def source_argv(args: argparse.Namespace) -> list[str]:
    """The same flags again, for a child process (`ykshm streams` starting `cr-operator`)."""
    if args.api_server:
        out = ["--api-server", args.api_server]
    else:
        out = ["--kubeconfig", args.kubeconfig] + (["--context", args.context] if args.context else [])
    return out + ["--log-level", args.log_level]


def log_to_stderr(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level), stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
