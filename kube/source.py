"""Which API server and credentials a role uses, in client-go's order (`BuildConfigFromFlags`
with the default loading rules):

1. `--api-server URL`: that server, no credentials (tests and sim-cluster without authentication);
2. `--kubeconfig FILE` (with `--context`): that file;
3. in a pod (`KUBERNETES_SERVICE_HOST`/`PORT` set and a ServiceAccount token present, see
   kube.incluster) and no `--context`: the in-cluster configuration;
4. `$KUBECONFIG` (a colon-separated list, merged: kube.kubeconfig), else `~/.kube/config`.

Nothing found is a `KubeConfigError` saying what was tried.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from . import incluster, kubeconfig
from .config import KubeConfig
from .errors import KubeConfigError


def default_paths(env: Mapping[str, str], home: str) -> list[str]:
    """`$KUBECONFIG`'s files (empty elements dropped), else ~/.kube/config."""
    listed = env.get("KUBECONFIG")
    if listed:
        return [p for p in listed.split(os.pathsep) if p]
    return [os.path.join(home, ".kube", "config")]


def resolve(api_server: str | None, kubeconfig_path: str | None, context: str | None = None,
            env: Mapping[str, str] | None = None, home: str | None = None) -> KubeConfig:
    env = os.environ if env is None else env
    if api_server:
        return KubeConfig(server=api_server)
    if kubeconfig_path:
        return kubeconfig.load([kubeconfig_path], context)
    if not context and incluster.available(env):
        return incluster.load(env)
    paths = default_paths(env, home or os.path.expanduser("~"))
    if not any(os.path.exists(p) for p in paths):
        raise KubeConfigError(
            "no API server configured: not in a pod (KUBERNETES_SERVICE_HOST unset), and no "
            f"kubeconfig at {':'.join(paths)}; pass --kubeconfig FILE or --api-server URL")
    return kubeconfig.load(paths, context, skip_missing=True)


__all__ = ["default_paths", "resolve"]
