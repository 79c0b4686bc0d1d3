"""kubeconfig files as client-go reads them: several files merged, one context, its credentials.

`$KUBECONFIG` is a colon-separated list; files that do not exist are skipped, and the first file
to define a cluster, user or context name (or `current-context`) wins. A relative path in an entry
(`certificate-authority`, `client-certificate`, `client-key`, `tokenFile`, an exec `command` with a
`/`) is resolved against the directory of the file that defined the entry.

Credentials of a user entry, in client-go's precedence: `token`, else `tokenFile` (re-read when it
changes and after a 401); `client-certificate(-data)` + `client-key(-data)`; `exec` (kube.execplugin);
`as`/`as-groups` become Impersonate-* headers. An empty user is an anonymous client (fine); an
`auth-provider` (removed from client-go in 1.26), `username`/`password` basic auth (removed from
kube-apiserver in 1.19) or any key we do not know is a `KubeConfigError` naming it: a role never
runs silently unauthenticated because ykshm skipped what the user configured.
"""

from __future__ import annotations

import base64
import os
import ssl
from collections.abc import Mapping
from typing import Any

import yaml

from common import podsandbox

from .config import KubeConfig, tls_context
from .credentials import Credentials, StaticToken, TokenFile, load_pem_chain
from .errors import CredentialsError, KubeConfigError
from .execplugin import ExecPlugin, cluster_info

USER_KEYS = {"client-certificate", "client-certificate-data", "client-key", "client-key-data",
             "token", "tokenFile", "exec", "as", "as-uid", "as-groups", "as-user-extra",
             "extensions"}
UNSUPPORTED = {"auth-provider": "auth-provider plugins (client-go removed them in 1.26; use an exec "
                                "plugin such as kubelogin or gke-gcloud-auth-plugin)",
               "username": "basic authentication (kube-apiserver removed it in 1.19)",
               "password": "basic authentication (kube-apiserver removed it in 1.19)"}


class Entry:
    """A named cluster/user/context with the directory of the file that defined it."""

    def __init__(self, body: Mapping[str, Any], base: str, path: str) -> None:
        self.body, self.base, self.path = body, base, path


class Merged:
    """The kubeconfig files merged: first definition of each name wins."""

    def __init__(self) -> None:
        self.kinds: dict[str, dict[str, Entry]] = {"cluster": {}, "user": {}, "context": {}}
        self.current = ""
        self.paths: list[str] = []

    def add(self, path: str, doc: Mapping[str, Any]) -> None:
        base = os.path.dirname(os.path.abspath(path))
        self.paths.append(path)
        for kind, named in self.kinds.items():
            for item in doc.get(kind + "s") or []:
                if isinstance(item, Mapping) and item.get("name") is not None:
                    named.setdefault(str(item["name"]), Entry(item.get(kind) or {}, base, path))
        if not self.current and doc.get("current-context"):
            self.current = str(doc["current-context"])

    def named(self, kind: str, name: str) -> Entry:
        try:
            return self.kinds[kind][name]
        except KeyError:
            raise KubeConfigError(f"kubeconfig {':'.join(self.paths)}: no {kind} named {name!r}") from None


def in_pod_dir(path: str, what: str) -> None:
    """Inside a process pod, a file outside the pod's directory is refused (`common.podsandbox`)."""
    try:
        podsandbox.check_path(path, what)
    except podsandbox.Refused as exc:
        raise KubeConfigError(str(exc)) from None


def read_file(path: str) -> Mapping[str, Any]:
    in_pod_dir(path, "kubeconfig")
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as exc:
        raise KubeConfigError(f"kubeconfig {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise KubeConfigError(f"kubeconfig {path}: not YAML: {exc}") from None
    if doc is None:
        return {}
    if not isinstance(doc, Mapping):
        raise KubeConfigError(f"kubeconfig {path}: not a mapping")
    return doc


def merge(paths: list[str], *, skip_missing: bool) -> Merged:
    merged = Merged()
    for path in paths:
        if skip_missing and not os.path.exists(path):
            continue
        merged.add(path, read_file(path))
    return merged


def data_or_file(entry: Entry, key: str) -> bytes | None:
    """`KEY-data` (base64) or the file `KEY` names, relative to its kubeconfig's directory."""
    data = entry.body.get(f"{key}-data")
    if data:
        try:
            return base64.b64decode("".join(str(data).split()), validate=True)
        except ValueError as exc:
            raise KubeConfigError(f"kubeconfig: {key}-data is not base64: {exc}") from None
    path = entry.body.get(key)
    if path:
        full = os.path.join(entry.base, str(path))
        in_pod_dir(full, f"kubeconfig: {key}")
        try:
            with open(full, "rb") as f:
                return f.read()
        except OSError as exc:
            raise KubeConfigError(f"kubeconfig: {key} {full}: {exc.strerror}") from None
    return None


def _pick(merged: Merged, context: str | None) -> tuple[str, Entry, Entry | None]:
    """(where, cluster, user) of the named or current context (or of the only cluster)."""
    name = context or merged.current
    if name:
        ctx = merged.named("context", name)
        cluster = merged.named("cluster", str(ctx.body.get("cluster")))
        user = merged.named("user", str(ctx.body["user"])) if ctx.body.get("user") else None
        return f"kubeconfig {ctx.path} context {name!r}", cluster, user
    clusters, users = merged.kinds["cluster"], merged.kinds["user"]
    if len(clusters) != 1:
        raise KubeConfigError(f"kubeconfig {':'.join(merged.paths)}: no current-context")
    cluster = next(iter(clusters.values()))
    user = next(iter(users.values())) if len(users) == 1 else None
    return f"kubeconfig {cluster.path}", cluster, user


def _credentials(user: Entry | None, cluster: Entry, ca: bytes | None, tls: ssl.SSLContext | None,
                 where: str) -> Credentials:
    if user is None:
        return Credentials()
    body = user.body
    for key in body:
        if key in UNSUPPORTED:
            raise KubeConfigError(f"{where}: user uses {key}: {UNSUPPORTED[key]} is not supported")
        if key not in USER_KEYS:
            raise KubeConfigError(f"{where}: user has {key!r}, an authentication ykshm does not know")
    cert, key = data_or_file(user, "client-certificate"), data_or_file(user, "client-key")
    if bool(cert) != bool(key):
        raise KubeConfigError(f"{where}: client-certificate and client-key come together")
    if cert and key:
        if tls is None:
            raise KubeConfigError(f"{where}: a client certificate needs an https:// server")
        try:
            load_pem_chain(tls, cert, key)
        except ssl.SSLError as exc:
            raise KubeConfigError(f"{where}: client certificate/key: {exc}") from None
    if body.get("exec"):
        if body.get("token") or body.get("tokenFile"):
            raise KubeConfigError(f"{where}: user has both exec and a token; keep one")
        if not isinstance(body["exec"], Mapping):
            raise KubeConfigError(f"{where}: exec must be a mapping")
        info = cluster_info(cluster.body, ca)
        return ExecPlugin(body["exec"], base=user.base, where=where, cluster=info)
    if body.get("token"):
        return StaticToken(str(body["token"]))
    if body.get("tokenFile"):
        in_pod_dir(os.path.join(user.base, str(body["tokenFile"])), f"{where}: tokenFile")
        try:
            return TokenFile(os.path.join(user.base, str(body["tokenFile"])))
        except CredentialsError as exc:
            raise KubeConfigError(f"{where}: tokenFile: {exc}") from None
    return Credentials()


def _impersonation(user: Entry | None) -> list[tuple[str, str]]:
    """`as`, `as-uid`, `as-groups`, `as-user-extra` as Impersonate-* headers (one per group)."""
    body = user.body if user is not None else {}
    headers = [("Impersonate-User", str(body["as"]))] if body.get("as") else []
    if body.get("as-uid"):
        headers.append(("Impersonate-Uid", str(body["as-uid"])))
    headers += [("Impersonate-Group", str(g)) for g in body.get("as-groups") or []]
    for key, values in (body.get("as-user-extra") or {}).items():
        headers += [(f"Impersonate-Extra-{key}", str(v)) for v in values or []]
    return headers


def load(paths: list[str], context: str | None = None, *, skip_missing: bool = False) -> KubeConfig:
    """The KubeConfig of the named (or current) context of the merged kubeconfig files."""
    merged = merge(paths, skip_missing=skip_missing)
    where, cluster, user = _pick(merged, context)
    server = cluster.body.get("server")
    if not server:
        raise KubeConfigError(f"{where}: cluster has no server")
    server = str(server)
    insecure = bool(cluster.body.get("insecure-skip-tls-verify"))
    ca = data_or_file(cluster, "certificate-authority")
    tls = tls_context(None if insecure else ca, insecure) if server.startswith("https") else None
    creds = _credentials(user, cluster, ca, tls, where)
    return KubeConfig(server, tls=tls, credentials=creds, insecure=insecure,
                      headers=_impersonation(user), origin=where)


def load_kubeconfig(path: str, context: str | None = None) -> KubeConfig:
    """One kubeconfig file (`--kubeconfig FILE`): its current or named context."""
    return load([path], context)


__all__ = ["load", "load_kubeconfig", "merge"]
