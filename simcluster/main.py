"""`ykshm sim-cluster`: a simulated kube-apiserver that kubectl and the shim can drive.

    ykshm sim-cluster --port P [--bind 127.0.0.1] [--nodes N] [--workload FILE | --demo]
                      [--node-cpu 16] [--node-memory 64Gi] [--watch-history 10000]
                      [--kubelet-delay 0.2] [--bookmark-interval 5] [--event-ttl 3600]
                      [--node-lease-interval 10] [--no-kubelet-events] [--default-scheduler]

Prints `sim-cluster listening on http://127.0.0.1:P` once it accepts connections (`--port 0`
picks a free port and prints it). SIGTERM or SIGINT stops it cleanly (exit 0). A port in use, a
non-loopback --bind or a bad workload file is a one-line error (exit 1, or 2 for usage).
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import logging
import math
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import trio

from common import gcfreeze, logsetup
from common.http1.limits import LimitError
from common.cliutil import Failure, Parser, UsageError, run_main

from . import (authconfig, controllers, defaultsched, disruption, endpoints, eventttl, kinds, leases, loopback, nodeshape,
               objects, pki, priority, podtoken, procimages, procpods, rbac, sandbox, services, tlsserve, tokens,
               workload)
from .api import Api
from .faults import Faults
from .httpserver import LIMITS, HttpServer, open_listeners
from .kubelet import Kubelet
from .resources import BUCKETS, NAMESPACES, NODES, PRIORITYCLASSES, SERVICES
from .store import Store

PROG = "ykshm sim-cluster"
log = logging.getLogger("ykshm.sim-cluster")


def _seconds(minimum: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(value) or value < minimum:
            raise argparse.ArgumentTypeError(f"must be a number >= {minimum:g}: {text!r}")
        return value

    return parse


def _isolated_namespace() -> bool:
    """Whether this process's network namespace has no interface but `lo` (a `ykshm realk8s run`'s:
    its pod addresses are reachable from nothing off the machine, so a process pod may bind one)."""
    try:
        with open("/proc/self/net/dev", encoding="ascii") as f:
            names = {line.split(":", 1)[0].strip() for line in f.readlines()[2:] if ":" in line}
    except OSError:
        return False
    return names == {"lo"}


def build_parser() -> Parser:
    p = Parser(prog=PROG, description="A simulated kube-apiserver (nodes and pods are API objects, "
                                      "a simulated kubelet runs bound pods).")
    p.add_argument("--port", type=int, default=6443, help="TCP port (0 = pick a free one; default 6443)")
    p.add_argument("--bind", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    p.add_argument("--nodes", type=int, default=0, help="pre-create nodes node-0000 .. (default 0)")
    p.add_argument("--node-agent", action="store_true",
                   help="no API server: only the node half, against any API server (`ykshm node-agent`, whose "
                        "flags then apply; the CLI hands the command over before this parser)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--workload", metavar="FILE", help="YAML list of apps whose pods arrive over time")
    src.add_argument("--demo", action="store_true", help="generate apps of 3-10 pods every few seconds, forever")
    p.add_argument("--demo-interval", type=_seconds(0.01), default=3.0, help="seconds between demo apps (default 3)")
    nodeshape.add_flags(p, "generated nodes")
    p.add_argument("--watch-history", type=int, default=10_000, help="changes kept for watch resumption (default 10000)")
    p.add_argument("--kubelet-delay", type=_seconds(0), default=0.2,
                   help="seconds from binding to Running (default 0.2)")
    p.add_argument("--bookmark-interval", type=_seconds(0.05), default=5.0,
                   help="seconds between BOOKMARK events on watches that allow them (default 5)")
    p.add_argument("--default-scheduler", action="store_true",
                   help="bind pods of schedulerName default-scheduler, as kube-scheduler would (defaultsched)")
    p.add_argument("--no-kubelet-events", action="store_true",
                   help="the simulated kubelet posts no Pulled/Created/Started/Killing events")
    p.add_argument("--node-lease-interval", type=_seconds(0), default=10.0,
                   help="seconds between node lease renewals in kube-node-lease (default 10; 0 = no leases)")
    p.add_argument("--event-ttl", type=_seconds(1), default=3600.0,
                   help="seconds an Event is kept, as the apiserver's --event-ttl (default 3600)")
    p.add_argument("--fault-rate", type=float, default=0.0, metavar="R",
                   help="fail this fraction of writes with 500/429/409/504 (testing only; default 0)")
    p.add_argument("--fault-seed", type=int, default=None, metavar="N", help="seed of the fault draw")
    proc = p.add_argument_group("process pods (ykshm's own images run as local processes)")
    proc.add_argument("--ykshm-image", metavar="IMAGE", default=None,
                      help=f"the image that runs `ykshm` (default {procimages.default_image()})")
    proc.add_argument("--process-image", action="append", default=[], metavar="IMAGE=COMMAND",
                      help="run IMAGE as COMMAND, which starts with ykshm "
                           "(e.g. 'streams-runtime:1=ykshm pe-sim'); repeat")
    proc.add_argument("--process-images", action="append", default=[], metavar="FILE",
                      help="a YAML mapping IMAGE: COMMAND, as --process-image")
    proc.add_argument("--no-process-pods", action="store_true", help="simulate every pod, run none")
    proc.add_argument("--pods-dir", metavar="DIR", default=None,
                      help="where process pods' directories go (default: a new temporary directory, removed at exit)")
    proc.add_argument("--loopback-block", type=int, default=None, metavar="N",
                      help="serve pods and Services on 127.N.0.0/16 (100..254; default: the first free one)")
    proc.add_argument("--backoff-initial", type=_seconds(0.01), default=10.0,
                      help="CrashLoopBackOff's first delay in seconds, doubling (default 10, as the kubelet)")
    proc.add_argument("--fork-server", action=argparse.BooleanOptionalAction, default=True,
                      help="fork runs from one warm interpreter (default) instead of starting each fresh "
                           "(simcluster/forkserver.py)")
    proc.add_argument("--pod-uid-base", type=int, default=None, metavar="UID",
                      help="each process pod runs as its own uid and gid UID + index (default "
                           f"{sandbox.DEFAULT_BASE} when sim-cluster is root; without root pods run as "
                           "sim-cluster's user: simcluster/sandbox.py)")
    proc.add_argument("--backoff-max", type=_seconds(0.01), default=300.0,
                      help="CrashLoopBackOff's longest delay in seconds (default 300)")
    p.add_argument("--max-connections", type=int, default=LIMITS.max_connections, metavar="N",
                   help=f"open connections in all; at the cap the longest idle one makes room (default "
                        f"{LIMITS.max_connections})")
    p.add_argument("--max-connections-per-peer", type=int, default=LIMITS.max_per_peer, metavar="N",
                   help=f"open connections per client address; more are answered 503 (default {LIMITS.max_per_peer})")
    logsetup.add_flags(p, default_level="warning")
    authconfig.add_flags(p)
    return p


def _check_args(args) -> None:
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be 0..65535, got {args.port}")
    try:
        bind = "127.0.0.1" if args.bind == "localhost" else args.bind
        if not ipaddress.ip_address(bind).is_loopback and not _isolated_namespace():
            raise UsageError(f"--bind {args.bind}: the sim-cluster binds loopback addresses only (or any "
                             "address inside a network namespace whose only interface is lo)")
        args.bind = bind
    except ValueError:
        raise UsageError(f"--bind {args.bind}: not an IP address") from None
    if not 0.0 <= args.fault_rate <= 1.0:
        raise UsageError(f"--fault-rate must be 0..1, got {args.fault_rate}")
    if args.nodes < 0 or args.nodes > 100_000:
        raise UsageError(f"--nodes must be 0..100000, got {args.nodes}")
    if args.watch_history < 1:
        raise UsageError(f"--watch-history must be at least 1, got {args.watch_history}")
    nodeshape.check(args)
    if args.pod_uid_base is not None and (os.geteuid() != 0 or not 1000 <= args.pod_uid_base <= 2**31 - 2**23):
        raise UsageError(f"--pod-uid-base {args.pod_uid_base}: needs root, and 1000..{2**31 - 2**23}")
    args.limits = dataclasses.replace(LIMITS, max_connections=args.max_connections,
                                      max_per_peer=args.max_connections_per_peer)
    try:
        args.limits.check()
    except LimitError as exc:
        flag = {"max_connections": "--max-connections", "max_per_peer": "--max-connections-per-peer"}[exc.name]
        raise UsageError(f"{flag} {exc.rule}, not {exc.value}") from None
    if args.loopback_block is not None and not 100 <= args.loopback_block <= 254:
        raise UsageError(f"--loopback-block must be 100..254, got {args.loopback_block}")
    try:
        args.images = procimages.ProcessImages.build(args.ykshm_image, args.process_image, args.process_images)
    except procimages.ImageConfigError as exc:
        raise UsageError(str(exc)) from None


def populate(api: Api, nodes: int, cpu: str, memory: str, pods: int) -> None:
    """The namespaces every cluster has, and `nodes` ready nodes node-0000 ..."""
    for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
        api.create_object(NAMESPACES, "", {"metadata": {"name": ns}})
    api.create_object(SERVICES, "default", kinds.kubernetes_service())
    for pc in priority.system_classes():
        api.create_object(PRIORITYCLASSES, "", pc)
    width = max(4, len(str(nodes - 1))) if nodes else 4
    for i in range(nodes):
        name = f"node-{i:0{width}d}"
        status = objects.default_node_status(cpu, memory, str(pods))
        status["addresses"] = [{"type": "InternalIP", "address": f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"},
                               {"type": "Hostname", "address": name}]
        api.create_object(NODES, "", {"metadata": {"name": name}, "status": status})


def _pod_token_signer(issuer) -> "podtoken.Signer":
    """Process pods' projected tokens signed with the ServiceAccount key, under the issuer and
    audiences sim-cluster authenticates (a pod's token then works against this API server)."""
    def sign(claims: dict) -> str:
        claims = {**claims, "iss": issuer.issuer}
        if claims.get("aud") == [podtoken.ISSUER]:
            claims["aud"] = list(issuer.audiences)
        return tokens.sign(claims, issuer.key)
    return sign


async def serve(args, apps: list[workload.App] | None, security: authconfig.Security) -> None:
    store = Store(BUCKETS, history_size=args.watch_history)
    try:
        listeners = await open_listeners(args.bind, args.port)
    except OSError as exc:
        raise Failure(f"cannot listen on {args.bind}:{args.port}: {exc.strerror or exc}") from None
    port = listeners[0].socket.getsockname()[1]
    if security.tls is not None:
        listeners = tlsserve.wrap(listeners, security.tls)
    host = f"[{args.bind}]" if ":" in args.bind else args.bind
    api = Api(store, server=f"{args.bind}:{port}", bookmark_interval=args.bookmark_interval,
              node_cpu=args.node_cpu, node_memory=args.node_memory,
              faults=Faults(args.fault_rate, args.fault_seed))
    endpoints_ctl = endpoints.EndpointsController(store, api.create_object, (args.bind, port))
    pods, network, block, own_dir = None, None, None, None
    if not args.no_process_pods:
        try:
            block = loopback.Block.take(args.loopback_block)
        except loopback.BlockTaken as exc:
            raise Failure(str(exc)) from None
        own_dir = None if args.pods_dir else tempfile.mkdtemp(prefix="ykshm-pods-")
        pods_dir = Path(args.pods_dir or own_dir)
        pods_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        uid_base = args.pod_uid_base if args.pod_uid_base is not None else sandbox.default_base()
        try:
            sandbox.check_pods_dir(pods_dir, uid_base)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        network = services.ServiceNetwork(store, block, pods_dir / "hosts")
        pods = procpods.ProcPods(store, procpods.Settings(pods_dir, args.images, args.bind, port, args.backoff_initial,
                                                          args.backoff_max, fork_server=args.fork_server,
                                                          uid_base=uid_base), block,
                                 extra_env=lambda pod: services.dns_env(pod, network.hosts))
    api.logs = pods
    if pods is not None and security.issuer is not None:
        pods.signer = _pod_token_signer(security.issuer)
    kubelet = Kubelet(store, start_delay=args.kubelet_delay, events=not args.no_kubelet_events, procpods=pods)
    node_leases = leases.NodeLeases(api, args.node_lease_interval)
    authconfig.install(api, security)
    populate(api, args.nodes, args.node_cpu, args.node_memory, args.node_pods)
    authconfig.create_policy(api, security)
    server = HttpServer(api.handle, limits=args.limits)
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(endpoints_ctl.run)
            if pods is not None and network is not None:
                await nursery.start(network.run)
                await nursery.start(pods.run)
            await nursery.start(kubelet.run)
            await nursery.start(api.gc.run)
            await nursery.start(disruption.DisruptionController(store).run)
            await nursery.start(controllers.Controllers(api).run)
            if args.default_scheduler:
                await nursery.start(defaultsched.DefaultScheduler(api).run)
            await nursery.start(node_leases.run)
            await nursery.start(eventttl.run_event_expiry, store, args.event_ttl)
            await nursery.start(rbac.Aggregator(store).run)
            await nursery.start(server.serve, listeners)
            print(f"sim-cluster listening on {security.scheme}://{host}:{port}", flush=True)
            if security.pki is not None:
                path = pki.write_admin_kubeconfig(security.pki, f"https://{host}:{port}")
                print(f"admin kubeconfig: {path}", flush=True)
            gen = workload.Workload(api)
            if apps is not None:
                nursery.start_soon(gen.run_file, apps)
            elif args.demo:
                nursery.start_soon(gen.run_demo, args.demo_interval)
            async for signum in signals:
                log.warning("sim-cluster: %s, stopping", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break
    if own_dir is not None:
        shutil.rmtree(own_dir, ignore_errors=True)
    if block is not None:
        block.close()


def _body(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    _check_args(args)
    logsetup.configure_from(args)
    apps = None
    if args.workload:
        try:
            apps = workload.load(args.workload)
        except workload.WorkloadError as exc:
            raise UsageError(f"--workload: {exc}") from None
    security = authconfig.load(args)
    gcfreeze.install()   # the store's objects are long-lived JSON: full collections walk them once
    trio.run(serve, args, apps, security)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(PROG, _body, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
