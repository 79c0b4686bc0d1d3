"""`ykshm streams`: run the Streams instance controller.

    ykshm streams --api-server URL | --kubeconfig FILE [--context CTX] [--namespace NS]
                  [--bundle-dir DIR] [--cache-dir DIR] [--install-crds] [--no-operators]
                  [--github-host HOST]... [--allow-fetch-host HOST[:PORT]]... [--max-submissions N]
                  [--log-level LEVEL]

`--bundle-dir` is where `bundle.file.path` is resolved (a path may not leave it); `--cache-dir`
keeps bundles fetched with `pullPolicy: IfNotPresent`. Unless `--no-operators`, it starts one
`ykshm cr-operator --job NS/NAME` per job with consistent regions and restarts it when it exits.
Bundle fetching (`streams/fetchpolicy.py`): a `github` source's Secret token goes only over
https to api.github.com and the `--github-host` hosts; no URL or redirect may lead to loopback,
link-local (cloud metadata) or other special addresses unless its host is an `--allow-fetch-host`;
at most `--max-submissions` (default 4) jobs fetch and parse at once.
The CRDs must be installed (`kubectl apply -f deploy/crds/`), or `--install-crds` creates or
updates them first (what `ykshm run` does).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from common.cliutil import Parser, UsageError, run_main

from kube import args as kubeargs

PROG = "ykshm streams"


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
    parser.add_argument("--no-operators", action="store_true",
                        help="do not start consistent-region operators")
    parser.add_argument("--github-host", action="append", default=[], metavar="HOST",
                        help="a GitHub API host (GitHub Enterprise) that may get a Job's github token; repeat")
    parser.add_argument("--allow-fetch-host", action="append", default=[], metavar="HOST[:PORT]",
                        help="a bundle host allowed though it is loopback/link-local (e.g. a test server); repeat")
    parser.add_argument("--max-submissions", type=int, default=4, metavar="N",
                        help="jobs fetching and parsing bundles at once (default 4)")
    args = parser.parse_args(argv)
    if args.max_submissions < 1:
        raise UsageError(f"--max-submissions must be at least 1, got {args.max_submissions}")
    for flag, hosts in (("--github-host", args.github_host), ("--allow-fetch-host", args.allow_fetch_host)):
        for host in hosts:
            if not host or "/" in host or " " in host:
                raise UsageError(f"{flag} {host!r}: a host name or address, optionally :PORT")
    if not os.path.isdir(args.bundle_dir):
        raise UsageError(f"--bundle-dir {args.bundle_dir!r}: not a directory")


    from .controller import Controller, Settings

    kube = kubeargs.kube_config(args)
    kubeargs.log_to_stderr(args.log_level)
    operator_argv = None if args.no_operators else [
        sys.executable, "-m", "tools.cli", "cr-operator", *kubeargs.source_argv(args)]
    from .fetchpolicy import FetchPolicy

    policy = FetchPolicy(github_hosts=frozenset({"api.github.com", *(h.lower() for h in args.github_host)}),
                         allow_hosts=frozenset(h.lower() for h in args.allow_fetch_host))
    settings = Settings(bundle_dir=os.path.abspath(args.bundle_dir), cache_dir=args.cache_dir,
                        namespace=args.namespace, operator_argv=operator_argv, fetch_policy=policy,
                        max_submissions=args.max_submissions)

    async def serve() -> None:
        async with kube.client() as client:
            if args.install_crds:
                from .crds import install
                await install(client)
            await Controller(client, settings).run()

    kubeargs.run_role(serve)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(PROG, _run, list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
