"""`ykshm realk8s build`: etcd, kube-apiserver, kube-controller-manager and kube-scheduler from the Go module in
`realk8s/`, built once into a cache keyed by the pin.

Why a cache outside the repository: a cold build compiles a few thousand packages (README, "Real
control plane", has the time and disk use); a repository checkout, CI's or a user's, must not
carry it. The key is a hash of `realk8s/go.mod` + `realk8s/go.sum`, so changing a version is a
new directory and an unchanged pin is reused at once:

    ~/.cache/ykshm/realk8s/<pin>/bin/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler}

(`$XDG_CACHE_HOME` instead of `~/.cache` when set). Go's own caches (GOCACHE, GOMODCACHE) stay
where `go env` puts them: they are shared with any other Go work on the machine.

A binary is written under a temporary name and renamed when `go build` succeeds, so a cut build
never leaves a binary the run would take for finished. The version ldflags are the ones the
Kubernetes release build sets (`hack/lib/version.sh`), so `kubectl version` names v1.37.x
instead of v0.0.0-master.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from common.cliutil import Failure, UsageError

MODULE_DIR = Path(__file__).resolve().parents[1] / "realk8s"
BUILD_COMMAND = "ykshm realk8s build"


@dataclass(frozen=True)
class Binary:
    """One binary of the control plane: its file name and the Go package that is its main."""

    name: str
    package: str


BINARIES = (
    Binary("etcd", "./cmd/etcd"),
    Binary("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver"),
    Binary("kube-controller-manager", "k8s.io/kubernetes/cmd/kube-controller-manager"),
    Binary("kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler"),
)


def pin_hash(module_dir: Path = MODULE_DIR) -> str:
    """The cache key: the first 16 hex digits of sha256(go.mod + go.sum)."""
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update((module_dir / name).read_bytes())
    return digest.hexdigest()[:16]


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ykshm" / "realk8s"


def bin_dir(module_dir: Path = MODULE_DIR) -> Path:
    return cache_root() / pin_hash(module_dir) / "bin"


def kubernetes_version(module_dir: Path = MODULE_DIR) -> str:
    """The k8s.io/kubernetes version go.mod pins (e.g. v1.37.2)."""
    match = re.search(r"^\s*k8s\.io/kubernetes (v\S+)", (module_dir / "go.mod").read_text(), re.M)
    if match is None:
        raise Failure(f"{module_dir / 'go.mod'} does not require k8s.io/kubernetes")
    return match.group(1)


def ldflags(version: str) -> str:
    """Strip symbols (smaller binaries) and stamp the Kubernetes version as its release build does."""
    major, minor = version.lstrip("v").split(".")[:2]
    stamp = " ".join(f"-X k8s.io/{pkg}/version.{var}={value}"
                     for pkg in ("component-base", "client-go/pkg")
                     for var, value in (("gitVersion", version), ("gitMajor", major), ("gitMinor", minor),
                                        ("gitTreeState", "clean")))
    return f"-s -w {stamp}"


def built(module_dir: Path = MODULE_DIR) -> Path | None:
    """The bin directory when every binary is in it, else None."""
    directory = bin_dir(module_dir)
    return directory if all((directory / b.name).is_file() for b in BINARIES) else None


def require_built(module_dir: Path = MODULE_DIR) -> Path:
    """The bin directory, or the one-line usage error (exit 2) that names the build command."""
    directory = built(module_dir)
    if directory is None:
        raise UsageError(f"the real control plane is not built for this pin ({bin_dir(module_dir)}): "
                         f"run `{BUILD_COMMAND}` first")
    return directory


def go_tool() -> str:
    go = shutil.which("go")
    if go is None:
        raise UsageError(f"`{BUILD_COMMAND}` needs the Go toolchain (go 1.26) on PATH; `go` was not found")
    return go


def build_one(go: str, binary: Binary, target: Path, module_dir: Path, flags: str) -> None:
    """`go build` one binary to `target` through a temporary name (a cut build leaves none)."""
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")  # two builds at once do not meet
    cmd = ["nice", "-n", "10", go, "build", "-o", str(partial), "-ldflags", flags, binary.package]
    done = subprocess.run(cmd, cwd=module_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        tail = done.stdout.strip().splitlines()[-1:] or ["(no output)"]
        raise Failure(f"go build {binary.package} failed (exit {done.returncode}): {tail[0]}")
    partial.replace(target)


def build_missing(items, directory: Path, build_item, out) -> None:
    """Build each item (a `name` and a Go `package`) whose binary is not in `directory` yet, with
    `build_item(item, target)`, printing which and how long (the peers' build shares this)."""
    for item in items:
        target = directory / item.name
        if target.is_file():
            print(f"{item.name}: cached", file=out, flush=True)
            continue
        print(f"{item.name}: building {item.package} ...", file=out, flush=True)
        began = time.monotonic()
        build_item(item, target)
        print(f"{item.name}: built in {time.monotonic() - began:.0f}s", file=out, flush=True)


def build(module_dir: Path = MODULE_DIR, out=sys.stdout) -> Path:
    """Build the missing binaries into the pin's bin directory; print progress and the paths."""
    go = go_tool()
    directory = bin_dir(module_dir)
    directory.mkdir(parents=True, exist_ok=True)
    flags = ldflags(kubernetes_version(module_dir))
    start = time.monotonic()
    build_missing(BINARIES, directory, lambda binary, target: build_one(go, binary, target, module_dir, flags), out)
    print(f"done in {time.monotonic() - start:.0f}s", file=out)
    for binary in BINARIES:
        print(f"  {directory / binary.name}", file=out)
    return directory


def main(argv: Sequence[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(f"usage: {BUILD_COMMAND}\n\nbuild etcd, kube-apiserver, kube-controller-manager and kube-scheduler from "
              f"{MODULE_DIR} into {cache_root()}/<pin>/bin, then helm from {MODULE_DIR / 'helm'} into "
              f"{cache_root()}/helm-<pin>/bin (each reused while its go.mod and go.sum are unchanged)")
        return 0
    if argv:
        raise UsageError(f"unexpected argument {argv[0]!r}")
    build()
    return 0
