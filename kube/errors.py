"""The Kubernetes client's errors, apart so that the config loaders and the API calls share them.

    KubeError                 base, never raised itself
     +-- KubeConfigError      the kubeconfig / in-cluster config is unusable (a usage error: exit 2)
     +-- CredentialsError     credentials cannot be had, or the server keeps refusing them (401
     |                        after a re-read): the role exits non-zero so kubelet/systemd restarts it
     +-- ApiStatusError       the server answered with an error status (.code, .reason)
          +-- GoneError       410: resourceVersion or continue token too old
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class KubeError(Exception):
    """Base of the Kubernetes client errors; never raised itself."""


class KubeConfigError(KubeError):
    """The kubeconfig file cannot be read or has no usable cluster, server or credentials."""


class CredentialsError(KubeError):
    """No credentials could be obtained (an exec plugin failed) or a 401 persisted after re-reading
    them. Not an ApiStatusError on purpose: informers retry those forever; this one ends the role."""


class ApiStatusError(KubeError):
    """The API server answered with an error (HTTP status or a watch ERROR event)."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code, self.reason, self.message = code, reason, message


class GoneError(ApiStatusError):
    """410 Gone / Expired: the resourceVersion (or continue token) is older than the history."""


def status_error(code: int, body: Any) -> ApiStatusError:
    """The error of an answer with status `code` and decoded Status `body` (anything)."""
    reason, message = "", ""
    if isinstance(body, Mapping):
        reason, message = str(body.get("reason", "")), str(body.get("message", ""))
        try:
            code = int(body.get("code") or code)
        except (TypeError, ValueError):
            pass
    cls = GoneError if code == 410 else ApiStatusError
    return cls(code, reason or "Error", message)
