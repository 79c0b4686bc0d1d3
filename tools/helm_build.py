"""The real `helm` (issue 35 item 7), built by `ykshm realk8s build` after the control plane from the
Go module in `realk8s/helm/`, into a cache keyed by its pin:

    ~/.cache/ykshm/realk8s/helm-<pin>/bin/helm

`<pin>` hashes `realk8s/helm/go.{mod,sum}`. Its own module, not realk8s/go.mod: Helm v3.22.0 pins
its own k8s.io versions (v0.37.0, the control plane v0.37.2 through a replace block); one module
would build one of them against versions it was not released with, and any change to Helm would
change the control plane's pin and rebuild it. Go's caches stay where `go env` puts them.

The ldflags are the ones Helm's Makefile sets: the version `helm version` prints, and the
Kubernetes version `helm lint` and `helm template` assume (the minor of its client-go, major 1).
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from common.cliutil import Failure
from tools import realk8s_build

HELM_DIR = realk8s_build.MODULE_DIR / "helm"
BINARY = realk8s_build.Binary("helm", "helm.sh/helm/v3/cmd/helm")


def bin_dir(module_dir: Path = HELM_DIR) -> Path:
    return realk8s_build.cache_root() / f"helm-{realk8s_build.pin_hash(module_dir)}" / "bin"


def built(module_dir: Path = HELM_DIR) -> Path | None:
    """The helm binary when it is built for this pin, else None."""
    path = bin_dir(module_dir) / BINARY.name
    return path if path.is_file() else None


def required_version(module: str, module_dir: Path = HELM_DIR) -> str:
    """The version of `module` go.mod requires (e.g. helm.sh/helm/v3 -> v3.22.0)."""
    match = re.search(rf"^\s*{re.escape(module)} (v\S+)", (module_dir / "go.mod").read_text(), re.M)
    if match is None:
        raise Failure(f"{module_dir / 'go.mod'} does not require {module}")
    return match.group(1)


def ldflags(module_dir: Path = HELM_DIR) -> str:
    helm = required_version("helm.sh/helm/v3", module_dir)
    minor = required_version("k8s.io/client-go", module_dir).lstrip("v").split(".")[1]
    stamp = [f"-X helm.sh/helm/v3/internal/version.version={helm}",
             "-X helm.sh/helm/v3/internal/version.gitTreeState=clean"]
    stamp += [f"-X helm.sh/helm/v3/pkg/{pkg}.k8sVersion{part}={value}"
              for pkg in ("lint/rules", "chartutil") for part, value in (("Major", "1"), ("Minor", minor))]
    return "-s -w " + " ".join(stamp)


def build(module_dir: Path = HELM_DIR, out=sys.stdout) -> Path:
    """Build helm when it is missing for this pin; print progress and its path."""
    go = realk8s_build.go_tool()
    directory = bin_dir(module_dir)
    directory.mkdir(parents=True, exist_ok=True)
    flags = ldflags(module_dir)
    start = time.monotonic()
    realk8s_build.build_missing(
        [BINARY], directory,
        lambda binary, target: realk8s_build.build_one(go, binary, target, module_dir, flags), out)
    print(f"done in {time.monotonic() - start:.0f}s", file=out)
    print(f"  {directory / BINARY.name}", file=out)
    return directory / BINARY.name
