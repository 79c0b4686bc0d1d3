"""`ykshm realk8s build` and `ykshm realk8s run [--nodes N] -- CMD...`: the real Kubernetes control
plane (issue 31) built from the Go module in `realk8s/`, and a command run against it. `build`
also builds `helm` from its own module `realk8s/helm/` (helm_build), for the chart's tests.

`run` moves itself into a network namespace of its own (realk8s_netns), makes a private directory
(0700) with the PKI, starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler (realk8s_plane),
writes the admin kubeconfig, and runs CMD with `KUBECONFIG` set to it (and `YKSHM_REALK8S_DIR`
to the directory, for a test that wants another user's certificate signed by the CA). When CMD
ends, everything is stopped by pid and the directory removed; the exit code is CMD's. SIGINT or
SIGTERM to the run reaches CMD as SIGTERM (SIGKILL after a grace period), then the same.

Bad input: an unbuilt pin is one line naming `ykshm realk8s build`, exit 2; a component that
does not start is one line naming it and its log, every component started so far is stopped
and the directory is kept for that log, exit 1.

`--nodes N` starts the node agent (`ykshm node-agent`, nodeagent/) inside the namespace once the
control plane is ready, with the admin kubeconfig: N nodes `agent-node-*` Ready with their Leases,
bound pods running (ykshm's images as process pods on 10.244.1.0/24), its log `node-agent.log` in
the run's directory and its pods' directories in a directory of their own in $TMPDIR (the pods'
own uids must reach it). CMD starts once the agent printed its ready line; the agent is stopped by pid
(SIGTERM: its process pods stopped by pid) before the control plane. An agent that does not come
up: one line naming its log, exit 1, nothing left running.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from common.cliutil import Failure, Parser, UsageError, run_main
from tools import helm_build, peers_build, realk8s_build, realk8s_netns
from tools.realk8s_plane import ControlPlane, Layout

GRACE_SECONDS = 10.0
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
USAGE = "usage: ykshm realk8s {build | build-peers [--git-mirror DIR] | run [--nodes N] [--COMPONENT-arg ARG]... -- CMD...}"


def run_parser() -> Parser:
    parser = Parser(prog="ykshm realk8s run", usage="ykshm realk8s run [options] -- CMD...",
                    description="run CMD against a real control plane (etcd, kube-apiserver, "
                                "kube-controller-manager, kube-scheduler) in a network namespace of its own")
    parser.add_argument("--nodes", type=int, default=0,
                        help="nodes from the node agent (ykshm node-agent), running bound pods (default 0: none)")
    parser.add_argument("--dir", default=None, help="parent of the run's private directory (default: $TMPDIR)")
    for name in COMPONENTS:
        parser.add_argument(f"--{name}-arg", action="append", default=[], metavar="ARG",
                            help=f"one more flag for {name} (repeatable)")
    return parser


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(options, CMD) around the first `--`; CMD must not be empty."""
    args = list(argv)
    if "--" not in args or args.index("--") == len(args) - 1:
        raise UsageError("missing the command to run: ykshm realk8s run [options] -- CMD...")
    cut = args.index("--")
    return args[:cut], args[cut + 1:]


def wait_command(proc: subprocess.Popen) -> int:
    """CMD's exit code; SIGINT/SIGTERM to us are passed on as SIGTERM, SIGKILL after GRACE_SECONDS."""
    asked: list[float] = []

    def on_signal(signum, frame):  # noqa: ARG001 - signal handler signature
        if not asked and proc.poll() is None:
            proc.terminate()
        asked.append(time.monotonic())

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    while True:
        try:
            code = proc.wait(timeout=0.5)
            return code if code >= 0 else 128 - code
        except subprocess.TimeoutExpired:
            if asked and time.monotonic() - asked[0] > GRACE_SECONDS:
                proc.kill()


def _stop_on_sigterm(signum, frame):  # noqa: ARG001 - signal handler signature
    raise KeyboardInterrupt  # while starting: unwind, so `finally` stops what was started


AGENT_READY = "node agent: "
AGENT_TIMEOUT = 120.0


def start_node_agent(kubeconfig: Path, client_ca: Path, nodes: int, pods_dir: Path,
                     log_path: Path) -> subprocess.Popen:
    """`ykshm node-agent` in this namespace, once it printed its ready line; Failure naming its log.
    Its kubelet endpoint takes kube-apiserver's client certificate (signed by `client_ca`) only."""
    with open(log_path, "wb") as log:   # the child keeps its own copy of the fd
        proc = subprocess.Popen([sys.executable, "-m", "tools.cli", "node-agent", "--kubeconfig", str(kubeconfig),
                                 "--client-ca-file", str(client_ca), "--nodes", str(nodes),
                                 "--pods-dir", str(pods_dir)],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + AGENT_TIMEOUT
    while AGENT_READY not in log_path.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_node_agent(proc)
            lines = log_path.read_text(errors="replace").strip().splitlines() or ["(no output)"]
            raise Failure(f"the node agent did not start: {lines[-1]} (its log: {log_path})")
        time.sleep(0.1)
    print(f"ykshm realk8s: {nodes} nodes from the node agent (log {log_path})", file=sys.stderr, flush=True)
    return proc


def stop_node_agent(proc: subprocess.Popen) -> None:
    """SIGTERM by pid (it stops its process pods by pid), SIGKILL after 30 s."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run(argv: Sequence[str]) -> int:
    if list(argv[:1]) in (["-h"], ["--help"]):
        run_parser().parse_args(["--help"])  # prints the help, exits 0 (and shows completion the flags)
    options, command = split_command(argv)
    args = run_parser().parse_args(options)
    if args.dir is not None and not os.path.isdir(args.dir):
        raise UsageError(f"--dir {args.dir!r}: not a directory")
    if args.nodes < 0:
        raise UsageError(f"--nodes must be >= 0, not {args.nodes}")
    if args.nodes > 1000:
        raise UsageError(f"--nodes must be 0..1000, not {args.nodes}")
    if shutil.which(command[0]) is None:
        raise UsageError(f"command not found: {command[0]}")
    binaries = realk8s_build.require_built()
    network = realk8s_netns.Network()
    realk8s_netns.enter(network)
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    layout = Layout(Path(tempfile.mkdtemp(prefix="ykshm-realk8s-", dir=args.dir)))
    extra = {name: getattr(args, f"{name.replace('-', '_')}_arg") for name in COMPONENTS}
    plane = ControlPlane(binaries, layout, network, extra)
    keep = False  # the directory stays only when a component failed: its log is there
    agent: subprocess.Popen | None = None
    pods_dir: str | None = None
    try:
        admin = plane.start()
        env = dict(os.environ, KUBECONFIG=str(admin), YKSHM_REALK8S_DIR=str(layout.dir))
        print(f"ykshm realk8s: control plane ready at {plane.server} (KUBECONFIG={admin})",
              file=sys.stderr, flush=True)
        if args.nodes > 0:
            pods_dir = tempfile.mkdtemp(prefix="ykshm-realk8s-pods-")   # $TMPDIR: the pods' uids reach it
            agent = start_node_agent(admin, layout.pki.ca_crt, args.nodes, Path(pods_dir), layout.log("node-agent"))
        return wait_command(subprocess.Popen(command, env=env))
    except Failure:
        keep = True
        raise
    finally:
        if agent is not None:
            stop_node_agent(agent)
        if pods_dir is not None:
            shutil.rmtree(pods_dir, ignore_errors=True)
        plane.stop()
        if not keep:
            shutil.rmtree(layout.dir, ignore_errors=True)


def build(argv: Sequence[str]) -> int:
    """The control plane, then helm (its own module and cache, tools/helm_build.py)."""
    code = realk8s_build.main(argv)
    if code == 0 and not argv:   # not --help
        helm_build.build()
    return code


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if args[:1] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    if not args:
        print(f"ykshm realk8s: error: missing subcommand ({USAGE})", file=sys.stderr)
        return 2
    if args[0] == "build":
        return run_main("ykshm realk8s build", build, args[1:])
    if args[0] == "run":
        return run_main("ykshm realk8s run", run, args[1:])
    if args[0] == "build-peers":
        return run_main(peers_build.BUILD_COMMAND, peers_build.main, args[1:])
    print(f"ykshm realk8s: error: unknown subcommand {args[0]!r} ({USAGE})", file=sys.stderr)
    return 2
