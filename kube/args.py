"""The flags of every role that talks to a kube-apiserver (`shim`, `streams`, `cr-operator`,
`pe-sim`, `admission`): where the API is, and how to log. One definition, so the roles cannot
drift apart.

    [--api-server URL | --kubeconfig FILE] [--context CTX]    [--log-level LEVEL]

Without either flag the role finds its configuration as client-go does (kube.source): in a pod the
ServiceAccount, else `$KUBECONFIG`, else ~/.kube/config. `run_role` runs a role's trio main and
turns a `CredentialsError` (a 401 that re-reading did not cure, an exec plugin that failed), or an
API error the role does not handle, into exit 1 with the reason, so kubelet or systemd restart the
role instead of it retrying for ever, and the user reads one line, not a traceback.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from typing import Any

from common import logsetup
from common.cliutil import Failure, UsageError


def add_source(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--api-server", metavar="URL",
                     help="kube-apiserver URL, no credentials (tests, sim-cluster without authentication)")
    src.add_argument("--kubeconfig", metavar="FILE",
                     help="kubeconfig file (default: in a pod its ServiceAccount, else $KUBECONFIG, "
                          "else ~/.kube/config)")
    parser.add_argument("--context", help="kubeconfig context (default: current-context)")
    logsetup.add_flags(parser)


def kube_config(args: argparse.Namespace) -> Any:
    """The KubeConfig the flags (or the environment) name; UsageError (exit 2) for a bad URL or a
    kubeconfig ykshm cannot use. Sets up logging first: the loaders' warnings go to stderr."""
    from .errors import KubeConfigError
    from .source import resolve

    log_to_stderr(args)
    if args.api_server and not args.api_server.startswith(("http://", "https://")):
        raise UsageError(f"--api-server {args.api_server!r}: must be an http(s):// URL")
    try:
        cfg = resolve(args.api_server, args.kubeconfig, args.context)
    except KubeConfigError as exc:
        raise UsageError(str(exc)) from None
    cfg.warn_once()
    return cfg


def source_argv(args: argparse.Namespace) -> list[str]:
    """The same flags again, for a child process (`ykshm streams` starting `cr-operator`); with
    neither flag the child finds the same configuration in the same environment."""
    out = []
    if args.api_server:
        out = ["--api-server", args.api_server]
    elif args.kubeconfig:
        out = ["--kubeconfig", args.kubeconfig]
    if args.context:
        out += ["--context", args.context]
    return out + logsetup.argv_of(args)


def run_role(main: Callable[..., Any], *args: Any) -> Any:
    """trio.run(main, *args); a CredentialsError anywhere in it, or an API error the role let
    escape (a 403 at start-up: RBAC missing), becomes Failure (exit 1) with its one line.
    Full garbage collections skip what survived the last one (`common.gcfreeze`)."""
    import trio

    from common import gcfreeze

    from .errors import ApiStatusError, CredentialsError

    gcfreeze.install()   # a role's informer caches are long-lived JSON: walk them once
    try:
        return trio.run(main, *args)
    except* (CredentialsError, ApiStatusError) as group:
        leaf: BaseException = group
        while isinstance(leaf, BaseExceptionGroup):
            leaf = leaf.exceptions[0]
        raise Failure(str(leaf)) from None


async def stop_on_sigterm(scope: Any, why: str) -> None:
    """Cancel `scope` on the first SIGTERM (systemd, a pod's deletion, a supervisor), logging
    `why`: the role's nursery then ends its children as on any cancellation (a process it runs
    gets SIGTERM from trio.run_process and is waited for). Start it in the nursery it cancels."""
    import signal

    import trio

    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async for _ in signals:
            logging.getLogger("ykshm").info("SIGTERM: %s", why)
            scope.cancel()
            return


def log_to_stderr(args: argparse.Namespace) -> None:
    """The role's logging (common.logsetup); the role is the parser's prog (`ykshm shim`)."""
    logsetup.configure_from(args)
