"""What ykshm refuses to do inside a sim-cluster process pod (defence in depth behind the pod's uid).

sim-cluster's kubelet runs each process pod under an unprivileged uid of its own (see
`simcluster.sandbox`): that uid is the boundary. Within it, ykshm itself still refuses the two ways
a pod author could make it run or read something of their choice:

- a kubeconfig `exec` credential plugin (any program, with any environment: the way N2 of the
  2026-11-28 review ran `/bin/sh`);
- a file named by a path option (`--*-file`, `--*-dir`, `--kubeconfig`, ...), a kubeconfig's
  files (`certificate-authority`, `client-certificate`, `client-key`, `tokenFile`) or $KUBECONFIG
  outside the pod's own directory.

The kubelet sets `YKSHM_PROCESS_POD` (to the pod's directory) after the pod's own `env`, so a pod
spec cannot unset or redirect it; a ykshm child of a pod inherits it. A refusal is one line and
exit 2 (the CLI's usage error).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

ENV = "YKSHM_PROCESS_POD"
PATH_OPTIONS = frozenset({"--kubeconfig", "--socket", "--redis-ca", "--workload", "--manifests",
                          "--process-images", "--certfile", "--keyfile", "--ca-certs"})
_PATH_SUFFIX = re.compile(r"^--[a-z0-9-]+-(file|dir|path)$")


class Refused(ValueError):
    """A process pod asked for something ykshm does not do there (the message says what)."""


def pod_dir() -> str | None:
    """The pod's directory when this process is a process pod's (its real path), else None."""
    value = os.environ.get(ENV)
    return os.path.realpath(value) if value else None


def refuse_exec_plugin(where: str) -> None:
    if pod_dir() is not None:
        raise Refused(f"{where}: exec credential plugins are refused inside a process pod "
                      "(use the pod's ServiceAccount token or a token in the kubeconfig)")


def check_path(path: str, what: str) -> None:
    """Refuse `path` (after symlinks) unless it is under the pod's own directory."""
    own = pod_dir()
    if own is None:
        return
    real = os.path.realpath(path)
    if real != own and not real.startswith(own + os.sep):
        raise Refused(f"{what} {path}: a process pod may read only files of its own directory")


def _is_path_option(name: str) -> bool:
    return name in PATH_OPTIONS or bool(_PATH_SUFFIX.match(name))


def check_argv(argv: Sequence[str]) -> None:
    """Every path option's value (`--opt VALUE` or `--opt=VALUE`) must be in the pod's directory."""
    if pod_dir() is None:
        return
    words = list(argv)
    for i, word in enumerate(words):
        name, sep, value = word.partition("=")
        if not _is_path_option(name):
            continue
        if not sep:
            if i + 1 >= len(words):
                continue
            value = words[i + 1]
        check_path(value, name)


__all__ = ["ENV", "Refused", "check_argv", "check_path", "pod_dir", "refuse_exec_plugin"]
