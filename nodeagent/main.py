"""`ykshm node-agent` (also `ykshm sim-cluster --node-agent`): nodes and process pods for any API server.

    ykshm node-agent [--kubeconfig FILE | --api-server URL] [--nodes N] [--node-prefix agent-node-]
                     [--node-cpu 16] [--node-memory 64Gi] [--node-pods 110]
                     [--pod-cidr 10.244.1.0/24 | --loopback-block N] [--node-ip IP] [--kubelet-port 0]
                     [--client-ca-file FILE]
                     [--kubelet-delay 0.2] [--node-lease-interval 10] [--node-status-interval 60]
                     [--pods-dir DIR] [--ykshm-image IMAGE] [--process-image IMAGE=COMMAND] ...

Registers the nodes Ready and prints `node agent: N nodes Ready on SERVER (NAMES), kubelet
https://IP:PORT` once their pods are watched; SIGTERM or SIGINT stops every process pod by pid
(exit 0). The nodes stay registered, as a stopped kubelet's do. A bad flag, an unreachable or
refusing API server, a pod CIDR that cannot serve: one line (exit 2 for usage, 1 otherwise).

`--pod-cidr` must be local to the machine's (or the namespace's) `lo`: `ykshm realk8s run` puts
10.244.1.0/24 there. Against an API server on loopback (a sim-cluster: `--api-server
http://127.0.0.1:P`) the pods get a loopback block 127.N.0.0/16 instead, as sim-cluster's own
(`--loopback-block N`, default the first free one), and sim-cluster's kubelet leaves the agent's
nodes (label `ykshm.io/node-agent`) to it; `--node-ip` (default: the API server's address, the run's 10.244.0.1) is
where kube-apiserver reaches the agent for `kubectl logs`. That endpoint serves process pods' logs,
so, as a kubelet's, it needs a client certificate signed by `--client-ca-file` (the kubelet's flag;
kube-apiserver presents its `--kubelet-client-certificate`); without the flag it is not served
(`kubectl logs` then fails) rather than served to anyone who can reach the address.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import trio

from common.cliutil import Failure, Parser, UsageError, run_main
from kube.args import add_source, kube_config, run_role
from simcluster import loopback, nodeshape, procimages, sandbox

from .agent import Agent, Settings, api_address
from .network import NetworkError, PodNetwork
from .nodes import RegisterError
from .uidslot import SlotsTaken, UidSlot

PROG = "ykshm node-agent"
log = logging.getLogger("ykshm.node-agent")
DEFAULT_POD_CIDR = "10.244.1.0/24"


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.01 <= value <= 86400:
        raise argparse.ArgumentTypeError(f"must be 0.01..86400: {text!r}")
    return value


def build_parser() -> Parser:
    p = Parser(prog=PROG, description="sim-cluster's kubelet half against any API server: nodes with "
                                      "Leases, bound pods run (ykshm's images as processes).")
    add_source(p)
    p.add_argument("--nodes", type=int, default=1, help="nodes this agent registers and runs (default 1)")
    p.add_argument("--node-prefix", default="agent-node-", help="node names PREFIX0, PREFIX1, ... (default agent-node-)")
    nodeshape.add_flags(p, "each node")
    net = p.add_mutually_exclusive_group()
    net.add_argument("--pod-cidr", default=None,
                     help="process pods' addresses, local on lo (default 10.244.1.0/24, the realk8s run's, "
                          "unless the API server is on loopback)")
    net.add_argument("--loopback-block", type=int, default=None, metavar="N",
                     help="pods and Services on 127.N.0.0/16 as sim-cluster's own (100..254; the default, "
                          "first free block, when the API server is on loopback: a sim-cluster)")
    p.add_argument("--node-ip", default=None, help="the nodes' InternalIP and the kubelet endpoint's address "
                                                   "(default: the API server's address)")
    p.add_argument("--kubelet-port", type=int, default=0, help="port of the kubelet endpoint (default 0: free)")
    p.add_argument("--client-ca-file", default="", metavar="FILE",
                   help="CA of the client certificates the kubelet endpoint accepts (kube-apiserver's "
                        "--kubelet-client-certificate); without it the endpoint (kubectl logs) is not served")
    p.add_argument("--kubelet-delay", type=_seconds, default=0.2, help="seconds from binding to start (default 0.2)")
    p.add_argument("--node-lease-interval", type=_seconds, default=10.0, help="seconds between Lease renewals (default 10)")
    p.add_argument("--node-status-interval", type=_seconds, default=60.0,
                   help="seconds between node status heartbeats (default 60)")
    p.add_argument("--no-kubelet-events", action="store_true", help="post no Pulled/Created/Started/Killing events")
    proc = p.add_argument_group("process pods")
    proc.add_argument("--ykshm-image", metavar="IMAGE", default=None,
                      help=f"the image that runs `ykshm` (default {procimages.default_image()})")
    proc.add_argument("--process-image", action="append", default=[], metavar="IMAGE=COMMAND",
                      help="run IMAGE as COMMAND, which starts with ykshm; repeat")
    proc.add_argument("--process-images", action="append", default=[], metavar="FILE",
                      help="a YAML mapping IMAGE: COMMAND, as --process-image")
    proc.add_argument("--pods-dir", metavar="DIR", default=None,
                      help="where process pods' directories go (default: a new temporary directory, removed at exit)")
    proc.add_argument("--backoff-initial", type=_seconds, default=10.0, help="CrashLoopBackOff's first delay (default 10)")
    proc.add_argument("--backoff-max", type=_seconds, default=300.0, help="CrashLoopBackOff's longest delay (default 300)")
    proc.add_argument("--fork-server", action=argparse.BooleanOptionalAction, default=True,
                      help="fork runs from one warm interpreter (default)")
    return p


def _check(args) -> None:
    if not 1 <= args.nodes <= 1000:
        raise UsageError(f"--nodes must be 1..1000, got {args.nodes}")
    if args.client_ca_file and not os.path.isfile(args.client_ca_file):
        raise UsageError(f"--client-ca-file {args.client_ca_file}: no such file")
    if not 0 <= args.kubelet_port <= 65535:
        raise UsageError(f"--kubelet-port must be 0..65535, got {args.kubelet_port}")
    nodeshape.check(args)
    if args.pod_cidr is not None:
        try:
            args.network = PodNetwork.parse(args.pod_cidr)
        except NetworkError as exc:
            raise UsageError(str(exc)) from None
    if args.loopback_block is not None and not 100 <= args.loopback_block <= 254:
        raise UsageError(f"--loopback-block must be 100..254, got {args.loopback_block}")
    if args.node_ip is not None:
        try:
            ipaddress.ip_address(args.node_ip)
        except ValueError:
            raise UsageError(f"--node-ip {args.node_ip}: not an IP address") from None
    try:
        args.images = procimages.ProcessImages.build(args.ykshm_image, args.process_image, args.process_images)
    except procimages.ImageConfigError as exc:
        raise UsageError(str(exc)) from None


async def serve(args, cfg, settings: Settings) -> None:
    async with cfg.client() as client:
        agent = Agent(client, cfg.server, settings)
        try:
            port = await agent.prepare()
        except OSError as exc:
            raise Failure(f"cannot listen on {settings.host_ip}:{settings.kubelet_port} for the kubelet "
                          f"endpoint: {exc.strerror or exc}") from None
        except RegisterError as exc:
            raise Failure(str(exc)) from None
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                await nursery.start(agent.run)
                kubelet = f"https://{settings.host_ip}:{port}" if port else "off (no --client-ca-file)"
                print(f"node agent: {len(settings.nodes)} nodes Ready on {cfg.server} ({', '.join(settings.nodes)}), "
                      f"kubelet {kubelet}", flush=True)
                async for signum in signals:
                    log.warning("node agent: %s, stopping", signal.Signals(signum).name)
                    nursery.cancel_scope.cancel()
                    break


def _body(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    _check(args)
    cfg = kube_config(args)
    host, _ = api_address(cfg.server)
    try:
        api_ip = ipaddress.ip_address("127.0.0.1" if host == "localhost" else host)
    except ValueError:
        api_ip = ipaddress.ip_address("127.0.0.1")  # a host name: the endpoint stays on loopback
    host_ip = args.node_ip or str(api_ip)
    network = _network(args, api_ip.is_loopback)
    own_dir = None if args.pods_dir else tempfile.mkdtemp(prefix="ykshm-agent-pods-")
    pods_dir = Path(args.pods_dir or own_dir)
    pods_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    base = sandbox.default_base()
    # each process pod's uid: base + a slot of this agent's + its address's index (uidslot.py)
    try:
        slot = None if base is None else UidSlot.take()
    except SlotsTaken as exc:
        network.close()
        raise Failure(str(exc)) from None
    uid_base = None if slot is None else slot.uid_base(base)
    try:
        sandbox.check_pods_dir(pods_dir, uid_base)
    except ValueError as exc:
        network.close()
        if slot is not None:
            slot.close()
        raise UsageError(str(exc)) from None
    width = max(1, len(str(args.nodes - 1)))
    names = [f"{args.node_prefix}{i:0{width}d}" for i in range(args.nodes)]
    resources = {"cpu": args.node_cpu, "memory": args.node_memory, "pods": str(args.node_pods)}
    settings = Settings(names, resources, pods_dir, args.images, network, host_ip, args.kubelet_port,
                        args.kubelet_delay, args.node_lease_interval, args.node_status_interval,
                        args.backoff_initial, args.backoff_max, args.fork_server, uid_base,
                        events=not args.no_kubelet_events, client_ca=args.client_ca_file)
    try:
        run_role(serve, args, cfg, settings)
    finally:
        network.close()
        if slot is not None:
            slot.close()
        if own_dir is not None:
            shutil.rmtree(own_dir, ignore_errors=True)
    return 0


def _network(args, api_on_loopback: bool):
    """The pods' addresses: --pod-cidr, or a loopback block as sim-cluster's (claimed, so no
    sim-cluster on this machine hands out the same), by default when the API server is on loopback."""
    if args.pod_cidr is not None:
        return args.network
    if args.loopback_block is None and not api_on_loopback:
        return PodNetwork.parse(DEFAULT_POD_CIDR)
    try:
        return loopback.Block.take(args.loopback_block)
    except loopback.BlockTaken as exc:
        raise Failure(str(exc)) from None


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(PROG, _body, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
