"""The command lines of the consistent-region roles: `ykshm cr-operator` and `ykshm pe-sim`.

    ykshm cr-operator --job NS/NAME (--api-server URL | --kubeconfig FILE) [--bind HOST:PORT]
                      [--max-connections N] [--max-connections-per-peer N] [--idle-timeout S]
                      [--head-timeout S] [--body-timeout S]   (common.http1.flags)
    ykshm pe-sim --job NS/NAME (--api-server URL | --kubeconfig FILE) [--listen udp|poll]
                 [--fail-pe N ...] [--blocking]
    ykshm pe-sim [BOOTSTRAP] [--log-level LEVEL]    as a PE pod's process (streams.pepod)

`ykshm streams` starts one cr-operator per job with consistent regions (and restarts it); a user
runs one by hand only to debug. The operator's REST API binds 127.0.0.1 on a free port unless
`--bind` says otherwise, and its URL is written to the ConsistentRegionOperator's status.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from functools import partial
from typing import Any

from common import logsetup
from common.cliutil import Failure, Parser, UsageError, run_main
from common.http1.flags import add_limit_flags, limits_of

from kube import args as kubeargs


def _common(parser: Parser) -> None:
    parser.add_argument("--job", required=True, metavar="NS/NAME", help="the Streams job")
    kubeargs.add_source(parser)


def _setup(args: Any) -> tuple[Any, str, str]:
    """(KubeConfig, namespace, job) from the common flags; UsageError on a bad one."""
    namespace, _, job = args.job.rpartition("/")
    if not job:
        raise UsageError(f"--job {args.job!r}: expected NS/NAME")
    kube = kubeargs.kube_config(args)
    return kube, namespace or "default", job


def _operator(argv: Sequence[str]) -> int:
    parser = Parser(prog="ykshm cr-operator", description="The consistent-region operator of one job.")
    _common(parser)
    parser.add_argument("--bind", default="127.0.0.1:0", metavar="HOST:PORT[,HOST:PORT]",
                        help="the REST API's address(es) (default 127.0.0.1, a free port); the "
                             "Deployment binds the pod IP on 10000 and 9696")
    parser.add_argument("--advertise", metavar="URL",
                        help="the API URL written to the ConsistentRegionOperator's status "
                             "(default: the bound address)")
    parser.add_argument("--notify-pods", action="store_true",
                        help="notify every PE by UDP at JOB-N.NS:10001 (its pod's address), as OpenStreams")
    add_limit_flags(parser, idle_timeout=30.0)
    args = parser.parse_args(argv)
    limits = limits_of(args)
    kube_config, namespace, job = _setup(args)

    from .operator_process import OperatorError, run

    try:
        kubeargs.run_role(partial(run, limits=limits, idle_timeout=args.idle_timeout, advertise=args.advertise,
                                  notify_pods=args.notify_pods), kube_config, namespace, job, args.bind)
    except* OperatorError as group:
        raise Failure(str(group.exceptions[0])) from None
    return 0


def _pe_pod(argv: Sequence[str]) -> int:
    parser = Parser(prog="ykshm pe-sim", description="Run as a PE pod: what the Streams runtime does.")
    parser.add_argument("bootstrap", nargs="?", help="the runtime image's bootstrap path (ignored)")
    logsetup.add_flags(parser)
    args = parser.parse_args(argv)
    logsetup.configure_from(args)
    from .pepod import PeConfigError, main

    try:
        main()
    except PeConfigError as exc:
        raise Failure(str(exc)) from None
    return 0


def _pesim(argv: Sequence[str]) -> int:
    if not any(a == "--job" or a.startswith("--job=") for a in argv) and \
            not any(a in ("-h", "--help") for a in argv):
        return _pe_pod(argv)
    parser = Parser(prog="ykshm pe-sim", description="Play a job's PEs against its cr-operator.")
    _common(parser)
    parser.add_argument("--listen", choices=["udp", "poll"], default="udp",
                        help="notifications by UDP (default) or by polling GET /pe/{id}")
    parser.add_argument("--fail-pe", type=int, action="append", default=[], metavar="N",
                        help="PE N never reports (its region's drains time out)")
    parser.add_argument("--blocking", action="store_true",
                        help="answer a drain with a blocking checkpoint first (CHECKPOINT_PENDING)")
    args = parser.parse_args(argv)
    kube_config, namespace, job = _setup(args)

    from .pesim_process import play

    kubeargs.run_role(lambda: play(kube_config, namespace, job, failing=set(args.fail_pe), listen=args.listen,
                          blocking=args.blocking))
    return 0


def operator_main(argv: Sequence[str] | None = None) -> int:
    return run_main("ykshm cr-operator", _operator, list(sys.argv[1:] if argv is None else argv))


def pesim_main(argv: Sequence[str] | None = None) -> int:
    return run_main("ykshm pe-sim", _pesim, list(sys.argv[1:] if argv is None else argv))
