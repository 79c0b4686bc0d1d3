"""Exec credential plugins (a kubeconfig user's `exec:`), run as client-go runs them.

`client.authentication.k8s.io/v1` and `v1beta1`: the `command` (a relative path with a `/` is
resolved against the kubeconfig's directory, a bare name through PATH), `args`, `env` on top of our
environment, and `KUBERNETES_EXEC_INFO` = an ExecCredential whose `spec.interactive` is false and,
with `provideClusterInfo`, whose `spec.cluster` describes the cluster. ykshm's roles are daemons
without a terminal, so the plugin's stdin is /dev/null and `interactiveMode: Always` is refused
when the kubeconfig is loaded (v1 requires the field; v1beta1 defaults to IfAvailable).

The answer (`status.token` and/or `clientCertificateData` + `clientKeyData`) is kept until
`status.expirationTimestamp` (for ever without one) and the plugin runs again after a 401. A plugin
that fails, times out or answers nonsense is a `CredentialsError`: the role exits with the reason.
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import shutil
import time
from collections.abc import Mapping
from typing import Any

import orjson
import trio

from common import podsandbox

from .credentials import Credential, Credentials
from .errors import CredentialsError, KubeConfigError

API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
MODES = ("Never", "IfAvailable", "Always")
RUN_TIMEOUT = 60.0


def cluster_info(cluster: Mapping[str, Any], ca_pem: bytes | None) -> dict[str, Any]:
    """`spec.cluster` of KUBERNETES_EXEC_INFO (provideClusterInfo), from a kubeconfig cluster."""
    out: dict[str, Any] = {"server": str(cluster.get("server") or "")}
    if ca_pem:
        out["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    for key in ("tls-server-name", "insecure-skip-tls-verify", "proxy-url", "disable-compression"):
        if cluster.get(key):
            out[key] = cluster[key]
    for ext in cluster.get("extensions") or []:
        if isinstance(ext, Mapping) and ext.get("name") == "client.authentication.k8s.io/exec":
            out["config"] = ext.get("extension")
    return out


def _command(spec: Mapping[str, Any], base: str, where: str) -> str:
    command = spec.get("command")
    if not isinstance(command, str) or not command:
        raise KubeConfigError(f"{where}: exec: command is required")
    if "/" in command:
        path = command if os.path.isabs(command) else os.path.join(base, command)
        found = path if os.access(path, os.X_OK) else None
    else:
        found = shutil.which(command)
    if not found:
        hint = spec.get("installHint")
        raise KubeConfigError(f"{where}: exec: executable {command} not found"
                              + (f" ({str(hint).strip()})" if hint else ""))
    return found


def _env(spec: Mapping[str, Any], where: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in spec.get("env") or []:
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise KubeConfigError(f"{where}: exec: env entries need a name and a value")
        env[item["name"]] = str(item.get("value") or "")
    return env


class ExecPlugin(Credentials):
    """Credentials from an exec plugin, cached until they expire, fetched again after a 401."""

    def __init__(self, spec: Mapping[str, Any], *, base: str, where: str,
                 cluster: dict[str, Any] | None) -> None:
        try:  # inside a process pod: no program of the pod author's choice (common.podsandbox)
            podsandbox.refuse_exec_plugin(where)
        except podsandbox.Refused as exc:
            raise KubeConfigError(str(exc)) from None
        self.api_version = str(spec.get("apiVersion") or "")
        if self.api_version not in API_VERSIONS:
            raise KubeConfigError(f"{where}: exec: apiVersion {self.api_version!r} is not supported "
                                  f"(use {' or '.join(API_VERSIONS)})")
        mode = spec.get("interactiveMode")
        if mode is None and self.api_version.endswith("/v1"):
            raise KubeConfigError(f"{where}: exec: interactiveMode is required by {self.api_version}")
        if (mode or "IfAvailable") not in MODES:
            raise KubeConfigError(f"{where}: exec: interactiveMode {mode!r}: must be one of "
                                  f"{', '.join(MODES)}")
        if mode == "Always":
            raise KubeConfigError(f"{where}: exec: interactiveMode Always needs a terminal; ykshm "
                                  "runs its plugins without one (use IfAvailable or Never)")
        args = spec.get("args") or []
        if not isinstance(args, list):
            raise KubeConfigError(f"{where}: exec: args must be a list")
        self.argv = [_command(spec, base, where)] + [str(a) for a in args]
        self.env = _env(spec, where)
        exec_spec: dict[str, Any] = {"interactive": False}
        if spec.get("provideClusterInfo") and cluster is not None:
            exec_spec["cluster"] = cluster
        self.exec_info = orjson.dumps({"apiVersion": self.api_version, "kind": "ExecCredential",
                                       "spec": exec_spec}).decode()
        self.describe = f"exec plugin {self.argv[0]}"
        self.runs = 0
        self._cred: Credential | None = None
        self._expiry: float | None = None
        self._lock = trio.Lock()

    def _fresh(self) -> bool:
        return self._cred is not None and (self._expiry is None or time.time() < self._expiry)

    async def get(self) -> Credential:
        if not self._fresh():
            async with self._lock:
                if not self._fresh():
                    await self._run()
        assert self._cred is not None
        return self._cred

    async def refresh(self) -> bool:
        old = self._cred
        async with self._lock:
            await self._run()
        return self._cred != old

    async def _run(self) -> None:
        env = {**os.environ, **self.env, "KUBERNETES_EXEC_INFO": self.exec_info}
        self.runs += 1
        try:
            with trio.fail_after(RUN_TIMEOUT):
                done = await trio.run_process(self.argv, env=env, stdin=b"", capture_stdout=True,
                                              capture_stderr=True, check=False)
        except trio.TooSlowError:
            raise CredentialsError(f"{self.describe}: no answer in {RUN_TIMEOUT:g}s") from None
        except OSError as exc:
            raise CredentialsError(f"{self.describe}: {exc.strerror}") from None
        if done.returncode != 0:
            err = done.stderr.decode("utf-8", "replace").strip().splitlines()
            raise CredentialsError(f"{self.describe}: exit status {done.returncode}"
                                   + (f": {err[-1]}" if err else ""))
        self._cred, self._expiry = self._parse(done.stdout)

    def _parse(self, out: bytes) -> tuple[Credential, float | None]:
        try:
            doc = orjson.loads(out)
        except orjson.JSONDecodeError:
            raise CredentialsError(f"{self.describe}: its output is not an ExecCredential (JSON)") from None
        if not isinstance(doc, dict) or doc.get("kind") != "ExecCredential":
            raise CredentialsError(f"{self.describe}: its output is not an ExecCredential")
        if doc.get("apiVersion") != self.api_version:
            raise CredentialsError(f"{self.describe}: configured for {self.api_version}, answered "
                                   f"{doc.get('apiVersion')!r}")
        status = doc.get("status")
        if not isinstance(status, dict):
            raise CredentialsError(f"{self.describe}: the ExecCredential has no status")
        token = str(status.get("token") or "")
        cert, key = str(status.get("clientCertificateData") or ""), str(status.get("clientKeyData") or "")
        if bool(cert) != bool(key):
            raise CredentialsError(f"{self.describe}: clientCertificateData and clientKeyData "
                                   "come together")
        if not token and not cert:
            raise CredentialsError(f"{self.describe}: answered neither a token nor a client certificate")
        expiry = None
        stamp = status.get("expirationTimestamp")
        if stamp:
            try:
                expiry = dt.datetime.fromisoformat(str(stamp)).timestamp()
            except ValueError:
                raise CredentialsError(f"{self.describe}: expirationTimestamp {stamp!r} is not "
                                       "RFC 3339") from None
        return Credential(token=token, cert_pem=cert.encode(), key_pem=key.encode()), expiry


__all__ = ["API_VERSIONS", "ExecPlugin", "cluster_info"]
