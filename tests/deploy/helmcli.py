"""The real `helm` for the chart's tests (deploy/helm/ykshm): the binary `ykshm realk8s build` makes
(tools/helm_build.py), run with its cache, config and data directories in the test's tmp dir (no
repository, no plugin, nothing of the user's ~/.config/helm). A missing build fails the test with
the command that makes it, it is never skipped."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from tools import harness, helm_build, realk8s_build

CHART = Path(harness.ROOT) / "deploy" / "helm" / "ykshm"
KUSTOMIZATION = Path(harness.ROOT) / "deploy" / "kubernetes"
NAMESPACE = "yunikorn"


def binary() -> Path:
    path = helm_build.built()
    assert path is not None, (f"helm is not built ({helm_build.bin_dir()}): run `{realk8s_build.BUILD_COMMAND}` "
                              f"(.ci/run does) before these tests")
    return path


def env(home: Path) -> dict[str, str]:
    """HELM_*_HOME under `home`: helm writes there, never in the user's home."""
    return {f"HELM_{part}_HOME": str(home / part.lower()) for part in ("CACHE", "CONFIG", "DATA")}


def run(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([str(binary()), *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **env(home)))
    if check and done.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
    return done


def template(home: Path, *args: str) -> list[dict]:
    """`helm template ykshm CHART -n yunikorn ARGS...`: the rendered objects."""
    out = run(home, "template", "ykshm", str(CHART), "--namespace", NAMESPACE, *args).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def by_name(objects: list[dict]) -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}
