"""`ykshm shim`: run the Kubernetes shim, or show a running shim's state (`ykshm shim status`).

    ykshm shim --api-server URL | --kubeconfig FILE [--context CTX] [--socket PATH] [--name NAME]
               [--rm-id ID] [--bind-workers N] [--watch-timeout S] [--recovery-timeout S]
               [--configmaps | --no-configmaps] [--namespace NS] [--log-level LEVEL]
               [--leader-elect [--leader-elect-lease-duration 15s] [--leader-elect-renew-deadline 10s]
                [--leader-elect-retry-period 2s] [--leader-elect-resource-name yunikorn-scheduler]
                [--leader-elect-resource-namespace NS] [--leader-elect-identity ID]
                [--leader-elect-lifeline HOST[:PORT] | off]]

With `--configmaps` (the default inside a cluster, i.e. when KUBERNETES_SERVICE_HOST is set) the
engine's configuration is YuniKorn's: `yunikorn-defaults` + `yunikorn-configs` in `--namespace`
(default $NAMESPACE, else `default`), watched and hot-reloaded (shim_k8s.configmaps); it replaces
what the engine read from its `--config` file, except the sizes fixed at the engine's start.
Without it (systemd, `ykshm run`) the engine's file is the configuration.

With `--leader-elect` (kube-scheduler's flag names and client-go's defaults) the shim is one
candidate of the Lease `--leader-elect-resource-namespace`/`--leader-elect-resource-name`: a warm
standby until elected, the leader after (see shim_k8s.shim, "Active/standby", and
kube.leaderelection). The identity defaults to HOSTNAME_UUID (the pod's name in a pod). In a pod
($POD_NAME, or `--leader-elect-pod`) the shim labels it `ykshm.io/scheduler-role=leader|standby`,
which the Service selects. The leader's lifeline (kube.lifeline) lets a standby take over the
moment the leader's process ends instead of a lease duration later: a TCP listener on
`--leader-elect-lifeline` (default $POD_IP, else 127.0.0.1, any free port; `off`: none), named in
the Lease. A standby must be able to connect to it (in a pod: the pod's address).
    ykshm shim status [--name NAME | --status-file PATH] [--json] [--nodes]

The shim writes its state to `RUNTIME/NAME.shim.json` (`common.runtimedir`); `status` reads it (exit 1 if there is
none, or if the shim that wrote it is no longer running — the last state is still shown).
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import uuid
import sys
import time
from collections.abc import Sequence

import orjson

from common.cliutil import Failure, Parser, UsageError, run_main
from shm.segment import pid_exists

from kube import args as kubeargs

PROG = "ykshm shim"

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m)?")


def duration(text: str) -> float:
    """Seconds from "15", "15s", "1.5s", "500ms" or "1m" (kube-scheduler's flags take Go
    durations); argparse turns the ValueError into one usage line (exit 2)."""
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"not a duration: {text!r}")
    return float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[m.group(2)]


duration.__name__ = "duration"   # argparse names the type in its message


def _run(argv: Sequence[str]) -> int:
    parser = Parser(prog=PROG, description="The Kubernetes shim: list/watch, binding, recovery.",
                    epilog="`ykshm shim status [--name NAME] [--json] [--nodes]` shows the state "
                           "of a running shim (from RUNTIME/NAME.shim.json).")
    kubeargs.add_source(parser)
    parser.add_argument("--name", default="ykshm", help="instance name (default ykshm)")
    parser.add_argument("--socket", metavar="PATH",
                        help="engine SI socket (default RUNTIME/NAME.sock in the private runtime directory)")
    parser.add_argument("--rm-id", default=None,
                        help="resource manager ID (default: the ConfigMaps' service.clusterId, "
                             "else mycluster)")
    parser.add_argument("--configmaps", action=argparse.BooleanOptionalAction,
                        default=bool(os.environ.get("KUBERNETES_SERVICE_HOST")),
                        help="configure the engine from yunikorn-defaults/yunikorn-configs, "
                             "hot-reloaded (default: on inside a cluster)")
    parser.add_argument("--namespace", default=None,
                        help="namespace of the ConfigMaps (default $NAMESPACE, else default)")
    parser.add_argument("--bind-workers", type=int, default=8, help="parallel bindings (8)")
    parser.add_argument("--recovery-timeout", type=float, default=300.0, metavar="S",
                        help="fail (exit 1, to be restarted) when a recovery is not complete after S seconds "
                             "(default 300)")
    parser.add_argument("--watch-timeout", type=int, default=300,
                        help="watch timeoutSeconds (300)")
    parser.add_argument("--status-file", metavar="PATH",
                        help="status file (default RUNTIME/NAME.shim.json)")
    lead = parser.add_argument_group("leader election (active/standby through a Lease)")
    lead.add_argument("--leader-elect", action="store_true",
                      help="run as a candidate of the Lease: standby until elected (default off)")
    lead.add_argument("--leader-elect-lease-duration", type=duration, default=15.0, metavar="D",
                      help="how long a standby waits after the Lease last changed (default 15s)")
    lead.add_argument("--leader-elect-renew-deadline", type=duration, default=10.0, metavar="D",
                      help="a leader not renewed for this long stops writing and exits (default 10s)")
    lead.add_argument("--leader-elect-retry-period", type=duration, default=2.0, metavar="D",
                      help="between tries to acquire or renew (default 2s)")
    lead.add_argument("--leader-elect-resource-name", default="yunikorn-scheduler", metavar="NAME",
                      help="the Lease's name (default yunikorn-scheduler)")
    lead.add_argument("--leader-elect-resource-namespace", default=None, metavar="NS",
                      help="the Lease's namespace (default: --namespace's)")
    lead.add_argument("--leader-elect-identity", default=None, metavar="ID",
                      help="this candidate's holderIdentity (default HOSTNAME_UUID)")
    lead.add_argument("--leader-elect-lifeline", metavar="HOST[:PORT]",
                      default=os.environ.get("POD_IP") or "127.0.0.1",
                      help="the leader's lifeline listener: a standby takes over as soon as it "
                           "ends (default $POD_IP, else 127.0.0.1, any port; off: none)")
    lead.add_argument("--leader-elect-pod", default=os.environ.get("POD_NAME", ""), metavar="NAME",
                      help="label this pod (in the Lease's namespace) ykshm.io/scheduler-role="
                           "leader|standby, for the Service to select the leader (default $POD_NAME)")
    args = parser.parse_args(argv)
    if args.bind_workers < 1:
        raise UsageError("--bind-workers must be at least 1")
    if args.watch_timeout < 1:
        raise UsageError("--watch-timeout must be at least 1")
    if not args.recovery_timeout > 0:
        raise UsageError(f"--recovery-timeout {args.recovery_timeout:g}: must be more than 0 seconds")


    from kube.leaderelection import LeadershipLost

    from .shim import ShimFailed, ShimOptions, serve

    kube = kubeargs.kube_config(args)
    from .configmaps import default_namespace

    leader = lifeline = None
    if args.leader_elect:
        from kube.leaderelection import LeaseConfig
        try:
            leader = LeaseConfig(
                namespace=args.leader_elect_resource_namespace or args.namespace or default_namespace(),
                name=args.leader_elect_resource_name,
                identity=args.leader_elect_identity or f"{socket.gethostname()}_{uuid.uuid4()}",
                lease_duration=args.leader_elect_lease_duration,
                renew_deadline=args.leader_elect_renew_deadline,
                retry_period=args.leader_elect_retry_period)
        except ValueError as exc:
            raise UsageError(f"--leader-elect: {exc}") from None
        lifeline = _lifeline(args.leader_elect_lifeline)
    opts = ShimOptions(kube=kube, name=args.name, socket_path=args.socket or "",
                       rm_id=args.rm_id or "mycluster", status_file=args.status_file or "",
                       bind_workers=args.bind_workers, watch_timeout=args.watch_timeout,
                       recovery_timeout=args.recovery_timeout, configmaps=args.configmaps,
                       namespace=args.namespace or default_namespace(),
                       rm_id_from_config=args.rm_id is None, leader=leader,
                       leader_pod=args.leader_elect_pod if leader is not None else "",
                       lifeline=lifeline if leader is not None else None)
    try:
        kubeargs.run_role(serve, opts)
    except* LeadershipLost as group:
        lost: BaseException = group
        while isinstance(lost, BaseExceptionGroup):
            lost = lost.exceptions[0]
        raise Failure(f"leadership lost: {lost}") from None
    except* ShimFailed as group:
        leaf: BaseException = group
        while isinstance(leaf, BaseExceptionGroup):
            leaf = leaf.exceptions[0]
        raise Failure(str(leaf)) from None
    return 0


def _lifeline(text: str):
    """The bound lifeline listener for `--leader-elect-lifeline` (None for `off`)."""
    from kube.lifeline import Listener, parse_bind

    if text == "off":
        return None
    try:
        return Listener(*parse_bind(text))
    except ValueError as exc:
        raise UsageError(f"--leader-elect-lifeline: {exc}") from None
    except OSError as exc:
        raise UsageError(f"--leader-elect-lifeline {text}: cannot listen there: "
                         f"{exc.strerror or exc}") from None


def _status(argv: Sequence[str]) -> int:
    parser = Parser(prog=f"{PROG} status", description="State of a running shim.")
    parser.add_argument("--name", default="ykshm", help="instance name (default ykshm)")
    parser.add_argument("--status-file", metavar="PATH", help="read this status file instead")
    parser.add_argument("--json", action="store_true", help="print the status document as JSON")
    parser.add_argument("--nodes", action="store_true", help="list every node's recovery state")
    args = parser.parse_args(argv)
    from common.shimstatus import read_status, status_path

    path = args.status_file or status_path(args.name)
    try:
        doc = read_status(path)
    except FileNotFoundError:
        raise Failure(f"no shim status at {path} (is `ykshm shim --name {args.name}` running?)")
    except (OSError, ValueError) as exc:
        raise Failure(f"cannot read {path}: {exc}") from None
    alive = pid_exists(int(doc.get("pid", 0))) and not doc.get("stopped")
    doc["alive"] = alive
    if args.json:
        sys.stdout.write(orjson.dumps(doc).decode() + "\n")
    else:
        counts = doc.get("nodeRecovery", {})
        cluster, engine, binds = doc.get("cluster", {}), doc.get("engine", {}), doc.get("bindings", {})
        print(f"shim {doc.get('name')} (pid {doc.get('pid')}{'' if alive else ', not running'}): "
              f"{doc.get('state')}{' - ' + doc['failure'] if doc.get('failure') else ''}")
        print(f"  engine: {'connected' if doc.get('connected') else 'disconnected'} "
              f"{doc.get('engineInstanceUUID') or ''} socket {doc.get('socket')}; "
              f"registrations {doc.get('registrations')}, recoveries {doc.get('recoveries')}")
        print(f"  nodes: {cluster.get('nodes')} ({counts.get('recovering', 0)} recovering, "
              f"{counts.get('recovered', 0)} recovered, {counts.get('lost', 0)} lost); "
              f"pods: {cluster.get('pods')} ours, {cluster.get('otherPods')} others, "
              f"{cluster.get('badPods')} skipped, {cluster.get('heldPods')} held")
        print(f"  engine view: {engine.get('applications')} apps, {engine.get('asks')} asks, "
              f"{engine.get('allocations')} allocations; bindings {binds.get('done')} done, "
              f"{binds.get('inFlight')} in flight")
        lead = doc.get("leaderElection")
        if lead:
            print(f"  leader election: {lead.get('role')} of lease {lead.get('lease')} as "
                  f"{lead.get('identity')}; holder {lead.get('holder') or '(none)'}, transitions "
                  f"{lead.get('leaseTransitions')}, fenced writes {lead.get('fencedWrites')}")
        cms = doc.get("configMaps")
        if cms:
            refused = cms.get("refused")
            print(f"  config: ConfigMaps in namespace {cms.get('namespace')}, hot refresh "
                  f"{'on' if cms.get('hotRefresh') else 'off'}"
                  + (f"; refused: {refused.get('reason')}" if refused else "")
                  + (f"; not applied: {'; '.join(cms['notApplied'])}"
                     if cms.get("notApplied") else ""))
        for t in doc.get("history", [])[-10:]:
            when = time.strftime("%H:%M:%S", time.localtime(t.get("time", 0)))
            print(f"  {when} {t.get('from')} -> {t.get('to')} ({t.get('event')})"
                  f"{': ' + t['reason'] if t.get('reason') else ''}")
        if args.nodes:
            for node, state in doc.get("nodeStates", {}).items():
                print(f"  node {node}: {state}")
    return 0 if alive else 1


def _main(argv: Sequence[str]) -> int:
    if argv and argv[0] == "status":
        return _status(argv[1:])
    return _run(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    prog = f"{PROG} status" if args[:1] == ["status"] else PROG
    return run_main(prog, _main, args)


if __name__ == "__main__":
    sys.exit(main())
