"""`ykshm realk8s build-peers [--git-mirror DIR]`: Apache YuniKorn's scheduler and KWOK, the peers
`ykshm bench vs-yunikorn` runs beside ykshm (issue 32), built once into a cache keyed by their pin:

    ~/.cache/ykshm/realk8s/peers-<pin>/bin/{yunikorn-scheduler,kwok}

`<pin>` hashes `realk8s/peers/{yunikorn,kwok}/go.{mod,sum}`. Two Go modules, not one and not
realk8s/go.mod: the k8shim pins its own k8s.io versions (v0.34, with a replace block) and KWOK
its own (v0.36); each builds against what it was released with, and the control plane stays v1.37.

Which YuniKorn: k8shim v1.8.0 (core v1.8.0-1, scheduler-interface v1.8.0-0), the scheduler binary
`pkg/cmd/shim` (core in-process, YuniKorn's standard deployment). On this machine the Go module
proxy answers 403 "This module version is not available" for every github.com/apache/yunikorn-*
module version list, but serves exact versions: k8shim v1.8.0 and core v1.8.0-1; of the
scheduler-interface it refuses v1.8.0-0 (what the k8shim names) and serves v1.8.0, the same tree
byte for byte, which realk8s/peers/yunikorn/go.mod's last `replace` takes. So the default GOPROXY
builds both on a fresh machine (`.ci/run` does). `--git-mirror DIR` (DIR/apache+NAME/repo, git
repositories) instead makes a local file:// proxy of exactly those releases
(tools/peers_goproxy.py), checked by go.sum, for a proxy that refuses them. Not v1.9.0, the newest
tag: the checksum database has no entry for k8shim v1.9.0 and its scheduler-interface v1.9.0-0
commit is in no repository reachable here.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from common.cliutil import Failure, Parser, UsageError
from tools import peers_goproxy, realk8s_build

PEERS_DIR = realk8s_build.MODULE_DIR / "peers"
BUILD_COMMAND = "ykshm realk8s build-peers"


@dataclass(frozen=True)
class PeerBinary:
    """One peer binary: its file name, its module directory and its main package."""

    name: str
    module: str
    package: str


PEERS = (
    PeerBinary("yunikorn-scheduler", "yunikorn", "github.com/apache/yunikorn-k8shim/pkg/cmd/shim"),
    PeerBinary("kwok", "kwok", "sigs.k8s.io/kwok/cmd/kwok"),
)


def pin_hash(peers_dir: Path = PEERS_DIR) -> str:
    digest = hashlib.sha256()
    for module in sorted({p.module for p in PEERS}):
        for name in ("go.mod", "go.sum"):
            digest.update((peers_dir / module / name).read_bytes())
    return digest.hexdigest()[:16]


def bin_dir(peers_dir: Path = PEERS_DIR) -> Path:
    return realk8s_build.cache_root() / f"peers-{pin_hash(peers_dir)}" / "bin"


KWOK_STAGES = "kwok-stages.yaml"
STAGE_FILES = ("node/fast/node-initialize.yaml", "pod/fast/pod-ready.yaml", "pod/fast/pod-complete.yaml",
               "pod/fast/pod-delete.yaml")


def built(peers_dir: Path = PEERS_DIR) -> Path | None:
    directory = bin_dir(peers_dir)
    names = [p.name for p in PEERS] + [KWOK_STAGES]
    return directory if all((directory / n).is_file() for n in names) else None


def write_kwok_stages(go: str, directory: Path, peers_dir: Path, env: dict[str, str]) -> None:
    """KWOK's "fast" stages (node Ready at once; a bound pod Running, a deleted one gone), the
    ones kwokctl gives its clusters: the `kwok` binary alone has none and refuses to start."""
    done = subprocess.run([go, "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kwok"], cwd=peers_dir / "kwok",
                          env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise Failure(f"go list -m sigs.k8s.io/kwok failed: {done.stderr.strip()}")
    stages = Path(done.stdout.strip()) / "kustomize" / "stage"
    text = "\n---\n".join((stages / f).read_text() for f in STAGE_FILES)
    (directory / KWOK_STAGES).write_text(text)


def require_built(peers_dir: Path = PEERS_DIR) -> Path:
    directory = built(peers_dir)
    if directory is None:
        raise UsageError(f"YuniKorn and KWOK are not built for this pin ({bin_dir(peers_dir)}): "
                         f"run `{BUILD_COMMAND}` first")
    return directory


def go_env(mirror: Path | None, proxy_dir: Path) -> dict[str, str]:
    """The build's environment: with a mirror, the local proxy first, then the default one."""
    env = dict(os.environ, GOFLAGS="-mod=readonly")
    if mirror is not None:
        peers_goproxy.make(proxy_dir, mirror)
        env["GOPROXY"] = f"file://{proxy_dir},https://proxy.golang.org"
        env["GONOSUMDB"] = "github.com/apache"  # go.sum holds their hashes: no checksum database asked
    return env


def build_one(go: str, peer: PeerBinary, target: Path, peers_dir: Path, env: dict[str, str]) -> None:
    partial = target.with_name(f".{target.name}.partial")
    cmd = ["nice", "-n", "10", go, "build", "-o", str(partial), "-ldflags", "-s -w", peer.package]
    done = subprocess.run(cmd, cwd=peers_dir / peer.module, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        tail = done.stdout.strip().splitlines()[-3:] or ["(no output)"]
        raise Failure(f"go build {peer.package} failed (exit {done.returncode}): {' | '.join(tail)}")
    partial.replace(target)


def build(mirror: Path | None, peers_dir: Path = PEERS_DIR, out=sys.stdout) -> Path:
    """Build the missing peer binaries; print progress and the paths."""
    go = realk8s_build.go_tool()
    directory = bin_dir(peers_dir)
    directory.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ykshm-goproxy-") as proxy_dir:
        env = go_env(mirror, Path(proxy_dir))
        realk8s_build.build_missing(PEERS, directory,
                                    lambda peer, target: build_one(go, peer, target, peers_dir, env), out)
        write_kwok_stages(go, directory, peers_dir, env)
    print(f"done in {time.monotonic() - start:.0f}s", file=out)
    for name in [p.name for p in PEERS] + [KWOK_STAGES]:
        print(f"  {directory / name}", file=out)
    return directory


def main(argv: Sequence[str]) -> int:
    parser = Parser(prog=BUILD_COMMAND, description="build YuniKorn's scheduler and KWOK from "
                    f"{PEERS_DIR} into {realk8s_build.cache_root()}/peers-<pin>/bin")
    parser.add_argument("--git-mirror", default=os.environ.get("YKSHM_PEERS_GIT_MIRROR"),
                        help="DIR/apache+yunikorn-*/repo git repositories, for a Go proxy that refuses "
                             "the YuniKorn modules (also $YKSHM_PEERS_GIT_MIRROR)")
    args = parser.parse_args(list(argv))
    build(Path(args.git_mirror) if args.git_mirror else None)
    return 0
