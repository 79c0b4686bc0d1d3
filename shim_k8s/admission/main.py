"""`ykshm admission`: YuniKorn's admission controller (an HTTPS webhook, port 9089 as YuniKorn's).

    ykshm admission [--api-server URL | --kubeconfig FILE] [--namespace NS] [--bind HOST:PORT]
                    [--webhook-url URL] [--key-bits N] [--rotation-grace S] [--log-level LEVEL]

YuniKorn's binary takes no flags; these have its defaults: the namespace is $NAMESPACE (else
`default`, shim_k8s.configmaps.default_namespace), the listener `0.0.0.0:9089` (`fd://N` too), RSA 4096 keys. The webhook
configurations point at the Service `admissionController.webHook.amServiceName` in that namespace,
or at `--webhook-url` when kube-apiserver reaches the controller by URL (beside a cluster, or a
sim-cluster); the URL's host is added to the serving certificate. At start-up it lists ConfigMaps
(its namespace), PriorityClasses and Namespaces, then puts the certificates and webhooks in place
(a failure there is exit 1 with the reason, as YuniKorn's is fatal), then serves. SIGUSR1
regenerates the certificates; SIGTERM/SIGINT stop it (exit 0).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence
from typing import Any

from common import logsetup
from common.cliutil import Failure, Parser, UsageError, run_main
from kube import args as kubeargs

PROG = "ykshm admission"


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
    parser.add_argument("--queues-file", metavar="PATH", default=None,
                        help="the scheduler beside this controller reads its queues from PATH, not "
                             "from the ConfigMaps (`ykshm run`): a change to their queues document "
                             "is denied naming PATH, instead of being accepted and ignored")
    args = parser.parse_args(argv)
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


async def serve(kube: Any, args: Any, namespace: str) -> None:
    import httpx
    import trio
    from hypercorn.trio import serve as hypercorn_serve

    from .caches import ClusterCache
    from .informers import start_informers
    from .review import Webhook
    from .tls import CertManager, ServingTLS, SwappableTLSConfig

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
            config = SwappableTLSConfig(tls)
            config.bind = [args.bind]
            config.read_timeout = 10
            logsetup.hypercorn_loggers(config)
            stop = trio.Event()
            nursery.start_soon(_stop_on_signal, stop)
            await hypercorn_serve(Webhook(cache, scheduler, args.queues_file), config, shutdown_trigger=stop.wait)
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
