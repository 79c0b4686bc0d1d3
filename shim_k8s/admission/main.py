"""`ykshm admission`: YuniKorn's admission controller (an HTTPS webhook, port 9089 as YuniKorn's).

    ykshm admission [--api-server URL | --kubeconfig FILE] [--namespace NS] [--bind HOST:PORT]
                    [--webhook-url URL] [--key-bits N] [--rotation-grace S] [--log-level LEVEL]
                    [--max-connections N] [--max-connections-per-peer N] [--idle-timeout S]
                    [--head-timeout S] [--body-timeout S]

YuniKorn's binary takes no flags; these have its defaults: the namespace is $NAMESPACE (else
`default`, shim_k8s.configmaps.default_namespace), the listener `0.0.0.0:9089` (`fd://N` too), RSA 4096 keys. The webhook
configurations point at the Service `admissionController.webHook.amServiceName` in that namespace,
or at `--webhook-url` when kube-apiserver reaches the controller by URL (beside a cluster, or a
sim-cluster); the URL's host is added to the serving certificate. At start-up it lists ConfigMaps
(its namespace), PriorityClasses and Namespaces, then puts the certificates and webhooks in place
(a failure there is exit 1 with the reason, as YuniKorn's is fatal), then serves. SIGUSR1
regenerates the certificates; SIGTERM/SIGINT stop it (exit 0). The connection limits are
common.http1's (`LIMITS` has this server's defaults: security review 2, N4).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence
from typing import Any

import logging

from common import logsetup
from common.cliutil import Failure, Parser, UsageError, run_main
from common.http1.flags import add_limit_flags, limits_of
from common.http1.limits import Limits
from kube import args as kubeargs

PROG = "ykshm admission"
log = logging.getLogger("ykshm.admission")


def _parse(argv: Sequence[str]) -> Any:
    parser = Parser(prog=PROG, description="YuniKorn's admission controller: user.info, "
                    "schedulerName, application IDs; validation of the yunikorn ConfigMaps.")
    kubeargs.add_source(parser)
    parser.add_argument("--namespace", help="where the ConfigMaps, the Secret and the Service are "
                        "(default $NAMESPACE, else default, as the shim and YuniKorn)")
    parser.add_argument("--bind", default="0.0.0.0:9089", metavar="HOST:PORT",
                        help="HTTPS listener (default 0.0.0.0:9089; fd://N an inherited socket)")
    parser.add_argument("--webhook-url", default="", metavar="URL",
                        help="register the webhooks with this https:// URL instead of the Service")
    parser.add_argument("--rotation-grace", type=float, default=15.0, metavar="S",
                        help="seconds between writing a new caBundle and serving the new "
                             "certificate (default 15: kube-apiserver's watch catches up)")
    parser.add_argument("--key-bits", type=int, default=4096, choices=[2048, 3072, 4096],
                        help="RSA key size of the CAs and serving certificate (4096, as YuniKorn)")
    add_limit_flags(parser, idle_timeout=30.0, defaults=LIMITS)
    args = parser.parse_args(argv)
    args.limits = limits_of(args)
    if args.webhook_url and not args.webhook_url.startswith("https://"):
        raise UsageError(f"--webhook-url {args.webhook_url!r}: must be an https:// URL")
    if not args.rotation_grace >= 0:
        raise UsageError(f"--rotation-grace {args.rotation_grace:g}: must be 0 or more seconds")
    if not args.bind.startswith("fd://") and ":" not in args.bind:
        raise UsageError(f"--bind {args.bind!r}: expected HOST:PORT or fd://N")
    return args


def _namespace(args: Any) -> str:
    from ..configmaps import default_namespace

    return args.namespace or default_namespace()


LIMITS = Limits(max_connections=256, max_per_peer=64, head_timeout=10.0, body_timeout=10.0)
"""kube-apiserver, the one client, keeps a small pool of connections per replica; anyone else who
reaches the port (the review flooded it from a pod) is capped at 64 connections per address, and
at 256 in all the connection waiting longest for a request head makes room (common.http1.limits).
With the body cap and budget (review.py) and an app queue of 2 messages per connection, a flood
holds tens of MB, not the 200 MB of the review (N4)."""
BUSY = (b"text/plain; charset=utf-8", b"too many connections\n")


async def _first_head(conn: Any) -> bytes | None:
    """The direct path: wait for the first request head under the head deadline (evictable
    meanwhile), then hand everything to hypercorn."""
    return None if await conn.next_head() is None else conn.buf


def _config(args: Any) -> Any:
    from hypercorn.config import Config

    config = Config()
    config.bind = [args.bind]
    config.read_timeout = 10
    config.keep_alive_timeout = args.idle_timeout
    config.accesslog = None
    config.include_server_header = False
    config.max_app_queue_size = 2          # body messages buffered per request before read
    config.h11_max_incomplete_size = 64 * 1024
    return config


async def serve(kube: Any, args: Any, namespace: str) -> None:
    """Serve HTTPS through common.http1's listener: the connection Gate, the TLS handshake under
    the head deadline, hypercorn for the requests (SECURITY.md, "admission webhook")."""
    import httpx
    import trio

    from common.http1 import listener as http1

    from .caches import ClusterCache
    from .informers import start_informers
    from .review import Webhook
    from .tls import CertManager, ServingTLS

    cache = ClusterCache(namespace)
    tls = ServingTLS()
    host = httpx.URL(args.webhook_url).host if args.webhook_url else ""
    async with kube.client() as client, httpx.AsyncClient(trust_env=False) as scheduler:
        async with trio.open_nursery() as nursery:
            await start_informers(nursery, client, cache)
            manager = CertManager(client, lambda: cache.conf, tls, url=args.webhook_url,
                                  extra_hosts=(host,) if host else (), key_bits=args.key_bits,
                                  grace=args.rotation_grace)
            await manager.refresh()
            nursery.start_soon(manager.run)
            nursery.start_soon(manager.on_sigusr1)
            config = _config(args)
            logsetup.hypercorn_loggers(config)
            listener = http1.Listener(Webhook(cache, scheduler, args.limits.body_timeout), config,
                                      _first_head, limits=args.limits, busy=BUSY, log=log,
                                      tls=tls.current)
            sockets = config.create_sockets()
            for sock in sockets.insecure_sockets:
                sock.listen(config.backlog)
            log.info("Running on https://%s (CTRL + C to quit)", args.bind)
            stop = trio.Event()
            nursery.start_soon(_stop_on_signal, stop)
            await http1.serve(listener, sockets, shutdown_trigger=stop.wait)
            nursery.cancel_scope.cancel()


async def _stop_on_signal(stop: Any) -> None:
    import trio

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            stop.set()
            return


def _run(argv: Sequence[str]) -> int:
    args = _parse(argv)
    kube = kubeargs.kube_config(args)
    from .webhooks import SetupError

    try:
        kubeargs.run_role(serve, kube, args, _namespace(args))
    except* SetupError as group:
        leaf: BaseException = group
        while isinstance(leaf, BaseExceptionGroup):
            leaf = leaf.exceptions[0]
        raise Failure(str(leaf)) from None
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(PROG, _run, list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
