"""In-cluster configuration, as client-go's `rest.InClusterConfig`: inside a pod, the API server
is `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`, checked against the ServiceAccount's
`ca.crt`, and the pod's ServiceAccount `token` is the bearer token (re-read when it changes: the
kubelet rotates projected tokens).

The ServiceAccount directory is /var/run/secrets/kubernetes.io/serviceaccount. sim-cluster's process
pods cannot have that path, so their kubelet sets `YKSHM_ROOT` (the container's file system root:
container path P is `$YKSHM_ROOT/P`, see simcluster.volumes) and we read it there.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from .config import KubeConfig, tls_context
from .credentials import TokenFile
from .errors import CredentialsError, KubeConfigError

log = logging.getLogger("ykshm.kube")
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
ROOT_ENV = "YKSHM_ROOT"


def sa_dir(env: Mapping[str, str]) -> str:
    """The ServiceAccount directory, under $YKSHM_ROOT when sim-cluster's kubelet set one."""
    return os.path.join(env.get(ROOT_ENV) or "/", SA_DIR.lstrip("/"))


def available(env: Mapping[str, str]) -> bool:
    """True inside a pod: both service variables set and a token to read."""
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        return False
    token = os.path.join(sa_dir(env), "token")
    if not os.path.exists(token):
        log.warning("KUBERNETES_SERVICE_HOST is set but %s does not exist: not using the "
                    "in-cluster configuration", token)
        return False
    return True


def load(env: Mapping[str, str]) -> KubeConfig:
    host, port = env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]
    host = f"[{host}]" if ":" in host else host
    directory = sa_dir(env)
    ca = None
    try:
        with open(os.path.join(directory, "ca.crt"), "rb") as f:
            ca = f.read()
    except OSError as exc:  # client-go logs and falls back to the system roots too
        log.error("in-cluster: %s/ca.crt: %s; checking the API server against the system roots",
                  directory, exc.strerror)
    try:
        creds = TokenFile(os.path.join(directory, "token"))
    except CredentialsError as exc:
        raise KubeConfigError(f"in-cluster: {exc}") from None
    try:
        tls = tls_context(ca, False)
    except Exception as exc:  # ssl.SSLError, or ValueError for a non-PEM file
        raise KubeConfigError(f"in-cluster: {directory}/ca.crt: not a PEM certificate ({exc})") from None
    return KubeConfig(f"https://{host}:{port}", tls=tls, credentials=creds,
                      origin=f"in-cluster ({directory})")


__all__ = ["ROOT_ENV", "SA_DIR", "available", "load", "sa_dir"]
