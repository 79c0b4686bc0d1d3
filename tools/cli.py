"""The `ykshm` console script: one subcommand per process role or tool.

Each subcommand lives in its own module as `main(argv) -> int` (or `module:function` when one
module holds two related commands); this table only names them, so
importing the CLI does not import trio, hypercorn or the cffi extension until a subcommand needs it.
"""

from __future__ import annotations

import importlib
import signal
import sys
from collections.abc import Sequence

from common import podhosts, podsandbox
from common.cliutil import EXIT_INTERRUPTED, EXIT_OK

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "run": ("tools.run_cmd", "everything in one: sim-cluster, engine, shim, Streams controller and web (the embedded default)"),
    "engine": ("engine.main", "the scheduler process, only writer of the shared-memory ring"),
    "web": ("web.main", "REST and streaming readers (hypercorn, trio workers)"),
    "shim": ("shim_k8s.main", "the Kubernetes shim: list/watch, binding, restart recovery"),
    "admission": ("shim_k8s.admission.main", "YuniKorn's admission controller: HTTPS webhook for user.info, schedulerName, app IDs, ConfigMap validation"),
    "sim-cluster": ("simcluster.main", "a simulated kube-apiserver that kubectl can drive"),
    "node-agent": ("nodeagent.main", "sim-cluster's nodes and process pods for any API server (also sim-cluster --node-agent)"),
    "streams": ("streams.main", "the Streams instance controller: Jobs -> PEs -> pods, gang-scheduled"),
    "cr-operator": ("streams.region_main:operator_main", "the consistent-region operator of one Streams job"),
    "pe-sim": ("streams.region_main:pesim_main", "play a Streams job's PEs against its cr-operator"),
    "export": ("export.main", "copy the event ring and state snapshot to Redis Streams"),
    "ring": ("tools.ring_cmd", "create, inspect and feed shared-memory event rings"),
    "realk8s": ("tools.realk8s_cmd", "the real Kubernetes control plane: build it (Go), run a command against it"),
    "status": ("tools.status_cmd", "processes, ring and engine state of a running ykshm"),
    "bench": ("bench.cli", "benchmarks: ring, sched, web, export, retention, preempt, e2e, streams, regions, report"),
    "completion": ("tools.completion", "print a bash or zsh completion script (source <(ykshm completion bash))"),
}

RUNTIME_BOOTSTRAP = frozenset({"bootstrap", "/usr/local/streams/system/impl/bin/streams-k8s-bootstrap"})
"""What OpenStreams' PE pod spec runs in its runtime image (streams.peobjects.BOOTSTRAP; no command,
this as the only arg). In ykshm's own image, as `ykshm streams --pe-image ykshm:VERSION` makes it,
it is `pe-sim` in a PE pod (streams/pepod.py), so a cluster without the runtime image runs PEs."""

# Commands whose documented stop is Ctrl-C (the banner's "Ctrl-C stops everything."): exit 0 on it
STOPPED_BY_CTRL_C = frozenset({"run"})

USAGE = "usage: ykshm <command> [options]   (ykshm <command> --help, ykshm --version)\n\ncommands:\n" + "".join(
    f"  {name:<12} {help_}\n" for name, (_, help_) in SUBCOMMANDS.items()
)


def version() -> str:
    """The installed distribution's version (pyproject.toml), as `pip show ykshm` says it."""
    from importlib.metadata import PackageNotFoundError, version as dist_version

    try:
        return dist_version("ykshm")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0
    if args[0] in ("--version", "-V", "version"):
        print(f"ykshm {version()}")
        return 0
    name, rest = args[0], args[1:]
    if name == "sim-cluster" and "--node-agent" in rest:   # the node half alone, against any API server
        name, rest = "node-agent", [a for a in rest if a != "--node-agent"]
    if name in RUNTIME_BOOTSTRAP:       # a PE pod of ykshm's own image
        name = "pe-sim"
    if name not in SUBCOMMANDS:
        print(f"ykshm: error: unknown command {name!r} (try ykshm --help)", file=sys.stderr)
        return 2
    try:
        podsandbox.check_argv(rest)  # in a process pod: no file outside its directory
    except podsandbox.Refused as exc:
        print(f"ykshm {name}: error: {exc}", file=sys.stderr)
        return 2
    podhosts.install()  # in a sim-cluster process pod: Service names resolve (common/podhosts.py)
    module_name, _, function = SUBCOMMANDS[name][0].partition(":")
    try:     # Ctrl-C while the subcommand's modules load: no traceback, the shell's 130
        module = _import_holding_sigint(module_name)
        return int(getattr(module, function or "main")(rest) or 0)
    except KeyboardInterrupt:       # `ykshm run`'s Ctrl-C is its normal stop: 0 (tools/run_cmd.py)
        return EXIT_OK if name in STOPPED_BY_CTRL_C else EXIT_INTERRUPTED


def _import_holding_sigint(module_name: str):
    """Import with SIGINT blocked, then let a pending one through: a KeyboardInterrupt raised
    inside an extension module's initialisation (orjson 3.13's, measured: 70 of 300 runs
    interrupted during `import orjson` died of SIGSEGV) crashes the interpreter instead of stopping
    it. Blocked, the Ctrl-C waits the few hundred ms of the import and arrives in our own code."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        return importlib.import_module(module_name)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


if __name__ == "__main__":
    sys.exit(main())
