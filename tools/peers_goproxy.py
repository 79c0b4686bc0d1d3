"""A GOPROXY directory (file://) made from git repositories, for the Apache YuniKorn modules the
Go module proxy refuses here.

Why: `go list -m -versions github.com/apache/yunikorn-k8shim` (and -core, -scheduler-interface)
answers `403 Forbidden: This module version is not available` from proxy.golang.org on this
machine, and github.com does not resolve, while every other dependency is served. The modules'
sources are reachable as git repositories, so this writes what a proxy would serve
(`@v/list`, `.info`, `.mod`, `.zip`, the layout of `go help goproxy`) from the commit each release
tag names. Go then checks each zip and go.mod against `realk8s/peers/yunikorn/go.sum`, whose
lines for these modules are copied from the k8shim's own go.sum at the pinned tag: a zip that is
not the released module is a checksum mismatch, not a silent substitute.

A module zip holds `MODULE@VERSION/PATH` for every file of the commit except the files of nested
modules (a directory with its own go.mod) and `vendor/` (golang.org/x/mod/zip's rules).
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from common.cliutil import Failure


@dataclass(frozen=True)
class Release:
    """One module version and the git revision (a tag) it was released from."""

    module: str
    version: str
    repo: str        # the repository's name under the mirror directory's owner+name/repo layout
    revision: str


YUNIKORN = (
    Release("github.com/apache/yunikorn-k8shim", "v1.8.0", "apache+yunikorn-k8shim", "v1.8.0"),
    Release("github.com/apache/yunikorn-core", "v1.8.0-1", "apache+yunikorn-core", "v1.8.0-1"),
    Release("github.com/apache/yunikorn-scheduler-interface", "v1.8.0-0", "apache+yunikorn-scheduler-interface",
            "v1.8.0-0"),
)


def _git(repo: Path, *args: str) -> bytes:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True)
    if done.returncode != 0:
        raise Failure(f"git {' '.join(args)} in {repo} failed: {done.stderr.decode().strip()}")
    return done.stdout


def _files(repo: Path, revision: str) -> dict[str, bytes]:
    """The regular files of `revision`, without nested modules and vendor/."""
    archive = tarfile.open(fileobj=io.BytesIO(_git(repo, "archive", "--format=tar", revision)))
    files = {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}
    nested = {name.rsplit("/", 1)[0] + "/" for name in files if name.endswith("/go.mod")}
    return {name: data for name, data in files.items()
            if not any(name.startswith(n) for n in nested)
            and not name.startswith("vendor/") and "/vendor/" not in name}


def write_release(proxy: Path, mirror: Path, release: Release) -> None:
    """The four files a proxy serves for one version."""
    repo = mirror / release.repo / "repo"
    if not repo.is_dir():
        raise Failure(f"{release.module} {release.version}: no git repository at {repo}")
    files = _files(repo, release.revision)
    when = _git(repo, "log", "-1", "--format=%cI", release.revision).decode().strip()
    at = proxy / release.module / "@v"
    at.mkdir(parents=True, exist_ok=True)
    (at / "list").write_text(release.version + "\n")
    (at / f"{release.version}.info").write_text(json.dumps({"Version": release.version, "Time": when}))
    (at / f"{release.version}.mod").write_bytes(files["go.mod"])
    with zipfile.ZipFile(at / f"{release.version}.zip", "w", zipfile.ZIP_DEFLATED) as out:
        for name in sorted(files):
            out.writestr(f"{release.module}@{release.version}/{name}", files[name])


def make(proxy: Path, mirror: Path, releases=YUNIKORN) -> Path:
    """Write every release into `proxy`; return it (GOPROXY=file://PROXY)."""
    for release in releases:
        write_release(proxy, mirror, release)
    return proxy
