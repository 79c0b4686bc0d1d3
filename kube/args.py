"""The flags of every role that talks to a kube-apiserver (`shim`, `streams`, `cr-operator`,
`pe-sim`): where the API is, and how to log. One definition, so the roles cannot drift apart.

    --api-server URL | --kubeconfig FILE [--context CTX] | --in-cluster    [--log-level LEVEL]

`--in-cluster`: a role running as a pod (the cr-operator's Deployment) reaches the API as a
kubelet-started process does: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT with the
pod's ServiceAccount token and CA from /var/run/secrets/kubernetes.io/serviceaccount (under
$YKSHM_ROOT in a sim-cluster process pod).
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
    src.add_argument("--in-cluster", action="store_true",
                     help="running as a pod: the KUBERNETES_SERVICE_* address, the pod's token and CA")
    parser.add_argument("--context", help="kubeconfig context (default: current-context)")
    parser.add_argument("--log-level", default="INFO", choices=LEVELS)


def kube_config(args: argparse.Namespace) -> Any:
    """The KubeConfig the flags name; UsageError (exit 2) for a bad URL or kubeconfig."""
    from .client import KubeConfig, KubeConfigError, load_kubeconfig

    if getattr(args, "in_cluster", False):
        return in_cluster()
    if args.api_server:
        if not args.api_server.startswith(("http://", "https://")):
            raise UsageError(f"--api-server {args.api_server!r}: must be an http(s):// URL")
        return KubeConfig(server=args.api_server)
    try:
        return load_kubeconfig(args.kubeconfig, args.context)
    except KubeConfigError as exc:
        raise UsageError(str(exc)) from None


SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def in_cluster() -> Any:
    """The KubeConfig of a process running in a pod; UsageError if it is not in one."""
    import os
    import ssl

    from .client import KubeConfig

    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise UsageError("--in-cluster: KUBERNETES_SERVICE_HOST/PORT are not set (not in a pod)")
    sa_dir = os.environ.get("YKSHM_ROOT", "") + SA_DIR
    token = ""
    if os.path.exists(os.path.join(sa_dir, "token")):
        with open(os.path.join(sa_dir, "token")) as f:
            token = f.read().strip()
    ca = os.path.join(sa_dir, "ca.crt")
    verify: Any = True
    if os.path.exists(ca) and os.path.getsize(ca):
        try:
            verify = ssl.create_default_context(cafile=ca)
        except (ssl.SSLError, OSError) as exc:
            raise UsageError(f"--in-cluster: {ca}: {exc}") from None
    host = f"[{host}]" if ":" in host else host
    return KubeConfig(server=f"https://{host}:{port}", token=token, verify=verify)


def source_argv(args: argparse.Namespace) -> list[str]:
    """The same flags again, for a child process (`ykshm streams` starting `cr-operator`)."""
    if getattr(args, "in_cluster", False):
        return ["--in-cluster", "--log-level", args.log_level]
    if args.api_server:
        out = ["--api-server", args.api_server]
    else:
        out = ["--kubeconfig", args.kubeconfig] + (["--context", args.context] if args.context else [])
    return out + ["--log-level", args.log_level]


def log_to_stderr(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level), stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
