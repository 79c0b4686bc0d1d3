"""A process pod's directory: its volumes, its ServiceAccount token, and where container paths live.

Layout of `<pods-dir>/<ns>_<name>_<uid>/` (mode 0700; with a sandbox, `root:<pod gid>` 0750 so the pod's
own uid reaches it and nobody else does: see `sandbox`; removed with the pod):

    root/            the container's file system (the pod's own with a sandbox) as far as sim-cluster provides one: each
                     volumeMount's `mountPath` is a symlink here to its volume (or `subPath`), and
                     /var/run/secrets/kubernetes.io/serviceaccount holds token, ca.crt, namespace
    volumes/NAME/    each volume's files (configMap, secret, emptyDir, projected, downwardAPI),
                     with `items`, `defaultMode`/`mode` and `optional` honoured
    logs/            the containers' output (see `podlogs`; 0700 sim-cluster's, whatever the sandbox)

A process cannot have `/var/run/secrets`, so the kubelet gives it `YKSHM_ROOT` (= root/: the
container path P is `$YKSHM_ROOT/P`) and rewrites every argument and env value that is a path under
a mountPath or the ServiceAccount directory to that file (`MountMap.rewrite`). Paths are checked:
an item `path` or `subPath` that is absolute or has a `..` element is refused, so nothing is
written or linked outside the pod's directory. Volumes are written once, when the container starts
(no live update of ConfigMap/Secret volumes); other volume types are a `VolumeError`.
"""

from __future__ import annotations

import os
import posixpath
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import podenv, podtoken
from .sandbox import PodIdentity, chown_tree

Obj = dict[str, Any]
SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


class VolumeError(ValueError):
    """A volume cannot be set up (the kubelet's FailedMount; the message says why)."""


def _safe_rel(path: Any, what: str) -> str:
    text = str(path or "")
    parts = text.split("/")
    if not text or text.startswith("/") or ".." in parts:
        raise VolumeError(f"{what} {text!r}: must be a relative path without '..'")
    return posixpath.normpath(text)


def _container_path(path: Any) -> str:
    text = str(path or "")
    if not text.startswith("/") or ".." in text.split("/"):
        raise VolumeError(f"mountPath {text!r}: must be an absolute path without '..'")
    return posixpath.normpath(text)


@dataclass
class MountMap:
    """Container paths -> host paths, longest mountPath first."""

    root: Path
    mounts: dict[str, Path] = field(default_factory=dict)

    def host_path(self, path: str) -> str | None:
        for mount in sorted(self.mounts, key=len, reverse=True):
            if path == mount or path.startswith(mount.rstrip("/") + "/"):
                return str(self.root) + path
        return None

    def rewrite(self, word: str) -> str:
        """An argument like `/etc/conf/app.yaml` or `--config=/etc/conf/app.yaml`, mapped."""
        key, sep, value = word.partition("=")
        if sep and value.startswith("/") and key.startswith("-"):
            mapped = self.host_path(value)
            return f"{key}={mapped}" if mapped else word
        return (self.host_path(word) or word) if word.startswith("/") else word


@dataclass
class PodDir:
    """One pod's directory on this machine (created private, removed by `remove`).

    With an `owner` (the pod's sandbox identity), the directory and volumes/ are `root:<pod gid>`
    0750: the pod reads them, only sim-cluster writes them (as root, so nothing in them may be the
    pod's to replace). root/, the container's file system, is the pod's own (0700): sim-cluster
    makes its links and directories there only through `open_dirs`. logs/ is sim-cluster's alone."""

    path: Path
    owner: PodIdentity | None = None

    @classmethod
    def create(cls, base: Path, pod: Obj, owner: PodIdentity | None = None) -> PodDir:
        meta = pod["metadata"]
        path = base / f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}"
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        for sub in ("root", "volumes", "logs"):
            (path / sub).mkdir(mode=0o700, exist_ok=True)
        if owner is not None:
            for shared in (path, path / "volumes"):
                os.chown(shared, 0, owner.gid)
                os.chmod(shared, 0o750)
            os.chown(path / "root", owner.uid, owner.gid)
        else:
            os.chmod(path, 0o700)
        return cls(path, owner)

    @property
    def root(self) -> Path:
        return self.path / "root"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _write(target: Path, data: bytes, mode: int) -> None:
    target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, mode & 0o777)
    os.replace(tmp, target)


@dataclass
class Materialiser:
    """Writes one pod's volumes; `lookup` reads Secrets/ConfigMaps, `token` makes a SA token."""

    pod: Obj
    lookup: podenv.Lookup
    token: Callable[[list[str] | None, int], str]
    owner: PodIdentity | None = None  # the pod's sandbox identity: its volume files are its own

    def _keyed(self, kind: str, ref: Obj, name_key: str, dest: Path, default_mode: int) -> None:
        ns = self.pod["metadata"]["namespace"]
        bucket = "secrets" if kind == "Secret" else "configmaps"
        obj = self.lookup(bucket, ns, str(ref.get(name_key) or ""))
        if obj is None:
            if ref.get("optional"):
                return
            raise VolumeError(f'{kind.lower()} "{ref.get(name_key)}" not found')
        data = podenv.data_of(obj, kind)
        items = ref.get("items")
        pairs = [(it.get("key"), it.get("path"), it.get("mode")) for it in items] if items else \
            [(k, k, None) for k in data]
        for key, rel, mode in pairs:
            if key not in data:
                if ref.get("optional"):
                    continue
                raise VolumeError(f"couldn't find key {key} in {kind} {ns}/{ref.get(name_key)}")
            _write(dest / _safe_rel(rel, "items path"), data[key], mode if mode is not None else default_mode)

    def _downward(self, items: list[Obj], dest: Path, default_mode: int) -> None:
        for item in items or []:
            ref = item.get("fieldRef") or {}
            try:
                value = podenv.field_ref(self.pod, str(ref.get("fieldPath") or ""))
            except podenv.ConfigError as exc:
                raise VolumeError(str(exc)) from None
            _write(dest / _safe_rel(item.get("path"), "downwardAPI path"), value.encode(),
                   item.get("mode") if item.get("mode") is not None else default_mode)

    def volume(self, vol: Obj, dest: Path) -> None:
        dest.mkdir(mode=0o755, parents=True, exist_ok=True)
        mode = 0o644
        if "emptyDir" in vol:
            dest.chmod(0o777)   # as the kubelet makes it: every container of the pod may write
            return
        self._fill(vol, dest, mode)
        chown_tree(dest, self.owner)

    def _fill(self, vol: Obj, dest: Path, mode: int) -> None:
        if "secret" in vol:
            spec = vol["secret"] or {}
            self._keyed("Secret", spec, "secretName", dest, spec.get("defaultMode", mode))
        elif "configMap" in vol:
            spec = vol["configMap"] or {}
            self._keyed("ConfigMap", spec, "name", dest, spec.get("defaultMode", mode))
        elif "downwardAPI" in vol:
            spec = vol["downwardAPI"] or {}
            self._downward(spec.get("items") or [], dest, spec.get("defaultMode", mode))
        elif "projected" in vol:
            self._projected(vol["projected"] or {}, dest)
        else:
            kinds = sorted(k for k in vol if k != "name")
            raise VolumeError(f"volume {vol.get('name')!r}: type {kinds[0] if kinds else '?'} is not supported "
                              "for process pods (configMap, secret, emptyDir, projected, downwardAPI are)")

    def _projected(self, spec: Obj, dest: Path) -> None:
        mode = spec.get("defaultMode", 0o644)
        for source in spec.get("sources") or []:
            if "secret" in source:
                self._keyed("Secret", source["secret"] or {}, "name", dest, mode)
            elif "configMap" in source:
                self._keyed("ConfigMap", source["configMap"] or {}, "name", dest, mode)
            elif "downwardAPI" in source:
                self._downward((source["downwardAPI"] or {}).get("items") or [], dest, mode)
            elif "serviceAccountToken" in source:
                tok = source["serviceAccountToken"] or {}
                aud = [tok["audience"]] if tok.get("audience") else None
                token = self.token(aud, int(tok.get("expirationSeconds") or podtoken.DEFAULT_EXPIRATION))
                _write(dest / _safe_rel(tok.get("path"), "serviceAccountToken path"), token.encode(), 0o600)


def wants_sa_token(pod: Obj, sa: Obj | None) -> bool:
    """automountServiceAccountToken: the pod's setting wins, then the ServiceAccount's, default on."""
    value = (pod.get("spec") or {}).get("automountServiceAccountToken")
    if value is None and sa is not None:
        value = sa.get("automountServiceAccountToken")
    return value is not False


def materialise(pod: Obj, container: Obj, pod_dir: PodDir, mat: Materialiser, sa: Obj | None) -> MountMap:
    """Write the container's volumes and the SA token; link each mountPath under root/."""
    volumes = {v.get("name"): v for v in (pod.get("spec") or {}).get("volumes") or []}
    mounts = MountMap(pod_dir.root)
    for vm in container.get("volumeMounts") or []:
        mount = _container_path(vm.get("mountPath"))
        vol = volumes.get(vm.get("name"))
        if vol is None:
            raise VolumeError(f"volumeMount {vm.get('name')!r}: no such volume")
        src = pod_dir.path / "volumes" / _safe_rel(vol.get("name"), "volume name")
        if not src.exists():
            _whole(lambda dest, vol=vol: mat.volume(vol, dest), src)
        if vm.get("subPath"):
            src = src / _safe_rel(vm["subPath"], "subPath")
        _link(pod_dir.root, mount, src, pod_dir.owner)
        mounts.mounts[mount] = src
    if SA_PATH not in mounts.mounts and wants_sa_token(pod, sa):
        sa_dir = pod_dir.path / "volumes" / "kube-api-access"
        if not sa_dir.exists():
            _whole(lambda dest: mat.volume(kube_api_access(), dest), sa_dir)
        _link(pod_dir.root, SA_PATH, sa_dir, pod_dir.owner)
        mounts.mounts[SA_PATH] = sa_dir
    return mounts


def kube_api_access() -> Obj:
    """The projected volume the ServiceAccount admission adds to a pod (`kube-api-access-*`):
    a token, the namespace's `kube-root-ca.crt` as ca.crt, and the namespace."""
    return {"name": "kube-api-access", "projected": {"defaultMode": 0o644, "sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": podtoken.DEFAULT_EXPIRATION}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}}


def _whole(fill: Callable[[Path], None], dest: Path) -> None:
    """Fill a volume's directory completely or not at all (a failed one is retried from scratch)."""
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(mode=0o755, parents=True)
        fill(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    os.replace(tmp, dest)


def _link(root: Path, mount: str, src: Path, owner: PodIdentity | None = None) -> None:
    parts = mount.strip("/").split("/")
    fd = open_dirs(root, parts[:-1], owner)
    try:
        os.symlink(src, parts[-1], dir_fd=fd)
    except FileExistsError:
        pass
    finally:
        os.close(fd)


def open_dirs(root: Path, parts: list[str], owner: PodIdentity | None) -> int:
    """An fd of root/PARTS..., each directory made (0755, the pod's when it has an identity) if
    missing and entered without following a symlink: with a sandbox root/ is the pod's to write, and
    sim-cluster, as root, must not be led out of it by a link the pod planted (OSError then), nor
    by `..` (VolumeError)."""
    if ".." in parts:
        raise VolumeError(f"{'/'.join(parts)!r}: must be a path without '..'")
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(root, flags)
    try:
        for part in parts:
            if part in ("", "."):
                continue
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
                made = True
            except FileExistsError:
                made = False
            inner = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = inner
            if made and owner is not None:
                os.fchown(fd, owner.uid, owner.gid)
    except BaseException:
        os.close(fd)
        raise
    return fd
