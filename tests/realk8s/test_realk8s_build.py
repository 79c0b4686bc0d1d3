"""`ykshm realk8s build`: the binaries are keyed by the pin and reused, progress and paths are
printed, and a machine without Go gets one line naming the command (exit 2)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy import helmcli
from tests.realk8s import realplane
from tools import helm_build, realk8s_build


def build(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.cli", "realk8s", "build"], capture_output=True, text=True,
                          env=env, cwd=realk8s_build.MODULE_DIR.parent, timeout=120)


def test_a_built_pin_is_reused_and_its_paths_printed():
    directory = realplane.require_binaries()
    done = build(dict(os.environ))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    names = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
    assert lines[:4] == [f"{name}: cached" for name in names]
    assert lines[5:9] == [f"  {directory / name}" for name in names]
    helm = helmcli.binary()                  # then helm, from its own module and cache directory
    assert lines[9] == "helm: cached" and lines[10].startswith("done in ") and lines[11:] == [f"  {helm}"]
    assert helm.parent.parent.name == f"helm-{realk8s_build.pin_hash(helm_build.HELM_DIR)}"


def test_without_go_the_build_is_one_line_naming_it(tmp_path):
    bare = tmp_path / "bin"      # a PATH with only what the CLI needs: no go
    bare.mkdir()
    done = build(dict(os.environ, PATH=str(bare), XDG_CACHE_HOME=str(tmp_path)))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "ykshm realk8s build: error: `ykshm realk8s build` needs the Go toolchain (go 1.26) on PATH; "
        "`go` was not found"]


def test_the_cache_key_is_the_pin_and_a_missing_binary_is_not_built(tmp_path, monkeypatch):
    for name in ("go.mod", "go.sum"):
        shutil.copy(realk8s_build.MODULE_DIR / name, tmp_path / name)
    assert realk8s_build.pin_hash(tmp_path) == realk8s_build.pin_hash()
    with open(tmp_path / "go.sum", "a") as f:
        f.write("example.com/other v1.0.0 h1:x=\n")
    assert realk8s_build.pin_hash(tmp_path) != realk8s_build.pin_hash()   # a new pin, a new directory
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    directory = realk8s_build.bin_dir(tmp_path)
    directory.mkdir(parents=True)
    for name in ("etcd", "kube-apiserver"):
        (directory / name).write_bytes(b"")
    (directory / ".kube-controller-manager.1.partial").write_bytes(b"")  # a cut build
    assert realk8s_build.built(tmp_path) is None
    assert Path(directory).parent.name == realk8s_build.pin_hash(tmp_path)


def test_helm_has_its_own_pin_and_a_missing_build_names_the_command(tmp_path, monkeypatch):
    for name in ("go.mod", "go.sum"):
        shutil.copy(helm_build.HELM_DIR / name, tmp_path / name)
    assert helm_build.bin_dir(tmp_path) == helm_build.bin_dir()
    with open(tmp_path / "go.sum", "a") as f:
        f.write("example.com/other v1.0.0 h1:x=\n")
    assert helm_build.bin_dir(tmp_path) != helm_build.bin_dir()      # a new Helm pin, a new directory
    assert realk8s_build.pin_hash() not in str(helm_build.bin_dir())  # the control plane's pin is not Helm's
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert helm_build.built() is None
    with pytest.raises(AssertionError, match=f"run `{realk8s_build.BUILD_COMMAND}`"):
        helmcli.binary()
    assert "helm.sh/helm/v3/internal/version.version=v3.22.0" in helm_build.ldflags()
