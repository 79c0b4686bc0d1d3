"""`ykshm web`: serve the REST and streaming API of one instance from shared memory.

    ykshm web [--name NAME] [--bind HOST:PORT | fd://N] [--workers N] [--config FILE]
              [--heartbeat-timeout S] [--stall-timeout S] [--nice N] [--ui-dir DIR]
              [--source redis://...] [--max-connections N] [--max-connections-per-peer N]
              [--idle-timeout S] [--head-timeout S] [--body-timeout S]
              [--certfile PEM --keyfile PEM [--ca-certs PEM [--require-client-cert]]]
              [--trusted-proxies ADDR|CIDR,...] [--hypercorn-only]

Runs N hypercorn worker processes (trio) sharing one listening socket; `fd://N` takes an inherited
socket (systemd socket activation: `--bind fd://3`). The event endpoints need only the ring
(`/dev/shm/NAME.events`); the state views answer 503 until an engine publishes its snapshot.
`--ui-dir DIR` (or `ui.dir` in the config) serves a single-page UI build, e.g. YuniKorn's web UI,
at `/` on the same origin as `/ws` (web.ui).
With `--source redis://HOST[:PORT][/DB][?instance=NAME]` the web is a read replica: the same API from
what `ykshm export` wrote to Redis (web/redis_source.py), on any machine; a bad URL, an unreachable
Redis, a refused password or a key of another type is one line and exit 2 at start-up.
With `--certfile/--keyfile` (or `service.web.certFile/keyFile` in the config; the flags win) the
API and the event streams are served over TLS only (common.http1.tls); `--ca-certs` verifies client
certificates (`--require-client-cert`: a client without one fails the handshake). A file that
cannot be used is one line naming the flag or key and the file (exit 2). `--trusted-proxies`
(`service.web.trustedProxies`) lists the proxies whose X-Forwarded-For names the client the
per-host limits count (common.http1.forwarded); none by default.
Exit codes: 0 after SIGINT/SIGTERM, 2 usage (bad flag, bad config), 1 failure (cannot bind...).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING

from common import logsetup
from common.cliutil import Failure, Parser, UsageError, run_main
from common.http1.flags import add_limit_flags, limits_of

if TYPE_CHECKING:
    from common.http1.forwarded import TrustedProxies
    from common.http1.tls import TlsFiles
    from export.redisauth import RedisAuth

DEFAULT_BIND = "127.0.0.1:9080"


def _parser() -> Parser:
    parser = Parser(prog="ykshm web", description="REST and streaming readers of a ykshm instance")
    parser.add_argument("--name", default="ykshm", help="instance name: segments /dev/shm/NAME.* (default ykshm)")
    parser.add_argument("--bind", default=DEFAULT_BIND, help=f"HOST:PORT or fd://N (default {DEFAULT_BIND})")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--config", default=None, help="ykshm YAML config (service.event.* is read)")
    parser.add_argument("--heartbeat-timeout", type=float, default=3.0,
                        help="engine is live only if its ring heartbeat is newer than this (s, default 3)")
    parser.add_argument("--stall-timeout", type=float, default=5.0,
                        help="TCP_USER_TIMEOUT: a peer that stops reading is dropped after this (s, default 5)")
    parser.add_argument("--nice", type=int, default=10,
                        help="niceness added to worker processes so the engine wins the CPU (default 10)")
    parser.add_argument("--ui-dir", default=None,
                        help="serve this single-page UI build at / (overrides ui.dir of --config)")
    parser.add_argument("--source", default="", metavar="URL",
                        help="serve from Redis (read replica of `ykshm export`): redis://host[:port][/db]"
                             "[?instance=NAME] (instance default: --name); no password in the URL: "
                             "$REDISCLI_AUTH, --source-password-file or systemd's LoadCredential=redis-password")
    parser.add_argument("--source-password-file", default=None, metavar="FILE",
                        help="the Redis password of --source, one line in a file only the ykshm user reads")
    parser.add_argument("--source-ca", default=None, metavar="PEM",
                        help="verify a rediss:// --source against this CA")
    tls = parser.add_argument_group("TLS (plain HTTP without --certfile)")
    tls.add_argument("--certfile", default=None, metavar="PEM",
                     help="serve HTTPS with this certificate chain (service.web.certFile)")
    tls.add_argument("--keyfile", default=None, metavar="PEM",
                     help="the certificate's private key (service.web.keyFile)")
    tls.add_argument("--ca-certs", default=None, metavar="PEM",
                     help="verify client certificates signed by these CAs (service.web.caCerts)")
    tls.add_argument("--require-client-cert", action="store_true", default=None,
                     help="with --ca-certs: refuse clients without a certificate "
                          "(service.web.requireClientCert)")
    parser.add_argument("--trusted-proxies", default=None, metavar="LIST",
                        help="comma-separated addresses/CIDRs whose X-Forwarded-For names the client "
                             "the per-host limits count (service.web.trustedProxies; default none)")
    parser.add_argument("--hypercorn-only", action="store_true",
                        help="serve event streams through hypercorn too, not on the direct path "
                             "(slower; for comparison: `ykshm bench web --tls`)")
    add_limit_flags(parser, idle_timeout=5.0)
    logsetup.add_flags(parser)
    return parser


def tls_files(args, web) -> "TlsFiles | None":
    """The TLS files of the flags, else of `service.web` (`web`), checked by loading them; None
    for plain HTTP. UsageError names the flag or key."""
    from common.http1.tls import TlsConfigError, TlsFiles

    by_flag = any(v is not None for v in (args.certfile, args.keyfile, args.ca_certs))
    if by_flag:
        cert, key, ca = args.certfile or "", args.keyfile or "", args.ca_certs or ""
        names = {"cert": "--certfile", "key": "--keyfile", "ca": "--ca-certs"}
    else:
        cert, key, ca = web.cert_file, web.key_file, web.ca_certs
        names = {"cert": "service.web.certFile", "key": "service.web.keyFile",
                 "ca": "service.web.caCerts"}
    require = args.require_client_cert if args.require_client_cert is not None else web.require_client_cert
    if not (cert or key or ca):
        if args.require_client_cert:
            raise UsageError("--require-client-cert needs --certfile, --keyfile and --ca-certs")
        return None
    if not cert or not key:
        raise UsageError(f"{names['cert']} and {names['key']} go together (TLS needs both)")
    if require and not ca:
        raise UsageError(f"--require-client-cert needs {names['ca']}")
    files = TlsFiles(cert, key, ca, bool(require), tuple(names.items()))
    try:
        files.context()
    except TlsConfigError as exc:
        raise UsageError(str(exc)) from None
    return files


def trusted_proxies(flag: str | None, configured: tuple[str, ...]) -> "TrustedProxies":
    """`--trusted-proxies` (comma-separated), else `service.web.trustedProxies`."""
    from common.http1.forwarded import ProxyConfigError, TrustedProxies

    if flag is None:
        return TrustedProxies.parse(configured)  # checked by the config loader
    try:
        return TrustedProxies.parse([e for e in flag.split(",") if e.strip()] if flag.strip() else [])
    except ProxyConfigError as exc:
        raise UsageError(f"--trusted-proxies {exc}") from None


def check_source(url: str, name: str, password_file: str | None = None,
                 ca_file: str | None = None) -> tuple[str, str, "RedisAuth"]:
    """(Redis URL, instance, password and CA) of `--source`, checked by connecting: UsageError
    with one line. The password never comes from the URL (argv is readable by every local user:
    export.redisauth); the workers get it in their pickled options, not on a command line."""
    from export.main import preflight
    from export.redisauth import AuthProblem, resolve
    from export.redisconn import redact, split_instance

    if not url.startswith(("redis://", "rediss://")):
        raise UsageError(f"--source {redact(url)!r}: expected redis://host[:port][/db] "
                         "(a read replica of ykshm export)")
    bare, instance = split_instance(url)
    try:
        bare, auth = resolve(bare, password_file, ca_file, flag="--source")
    except AuthProblem as exc:
        raise UsageError(str(exc)) from None
    instance = instance or name
    try:
        preflight(bare, instance, auth).close()
    except UsageError as exc:
        raise UsageError(f"--source {exc}") from None
    return bare, instance, auth


def check_bind(bind: str) -> str:
    """Validate HOST:PORT / [V6]:PORT / fd://N (hypercorn would silently fall back to port 8000)."""
    if bind.startswith("fd://"):
        text = bind[5:]
        if not text.isdigit():
            raise UsageError(f"--bind {bind!r}: fd://N needs a file descriptor number")
        fd = int(text)
        try:
            sock = socket.socket(fileno=os.dup(fd))
        except OSError as exc:
            raise UsageError(f"--bind {bind!r}: fd {fd} is not a socket ({exc.strerror})") from None
        try:
            if sock.type != socket.SOCK_STREAM:
                raise UsageError(f"--bind {bind!r}: fd {fd} is not a stream socket")
        finally:
            sock.close()
        return bind
    if bind.startswith("unix:"):
        raise UsageError(f"--bind {bind!r}: use HOST:PORT or fd://N")
    host, sep, port = bind.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise UsageError(f"--bind {bind!r}: expected HOST:PORT (e.g. 127.0.0.1:9080) or fd://N")
    if host.startswith("[") != host.endswith("]"):
        raise UsageError(f"--bind {bind!r}: bad IPv6 address brackets")
    return bind


def _ui_dir(path: str, source: str) -> str:
    """The checked UI directory ("" for none); a usage error names the flag or key."""
    if not path:
        return ""
    from .ui import UIError, check_dir

    try:
        return check_dir(path)
    except UIError as exc:
        raise UsageError(f"{source} {exc}") from None


def _body(argv: Sequence[str]) -> int:
    args = _parser().parse_args(list(argv))
    if not 1 <= args.workers <= 64:
        raise UsageError("--workers must be between 1 and 64")
    if not 0 <= args.nice <= 19:
        raise UsageError("--nice must be between 0 and 19")
    if args.heartbeat_timeout <= 0 or args.stall_timeout < 0:
        raise UsageError("--heartbeat-timeout must be > 0 and --stall-timeout >= 0")
    from shm.segment import validate_name

    try:
        validate_name(args.name)
    except ValueError:
        raise UsageError(f"--name {args.name!r}: not a valid instance name") from None
    bind = check_bind(args.bind)
    limits = limits_of(args)

    from engine.config import ConfigError, load_web_config

    try:
        web_config = load_web_config(args.config)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    ui_dir = _ui_dir(args.ui_dir if args.ui_dir is not None else web_config.ui_dir,
                     "--ui-dir" if args.ui_dir is not None else "ui.dir")
    tls = tls_files(args, web_config.web)
    proxies = trusted_proxies(args.trusted_proxies, web_config.web.trusted_proxies)

    from .app import WebOptions
    from .segment import SegmentError
    from .server import serve, setup_logging

    setup_logging(args.log_level, args.log_format)
    source, source_instance, source_auth = (check_source(args.source, args.name, args.source_password_file,
                                                         args.source_ca)
                                            if args.source else ("", "", None))
    options = WebOptions(name=args.name, settings=web_config.event,
                         heartbeat_timeout=args.heartbeat_timeout, nice=args.nice, ui_dir=ui_dir,
                         source=source, source_instance=source_instance, source_auth=source_auth,
                         cors_origins=web_config.cors_origins, limits=limits, proxies=proxies,
                         tls=tls, hypercorn_only=args.hypercorn_only)
    try:
        return serve(options, bind, args.workers, args.stall_timeout, args.idle_timeout)
    except SegmentError as exc:
        raise Failure(str(exc)) from None
    except OSError as exc:
        raise Failure(f"cannot listen on {bind}: {exc.strerror or exc}") from None


def main(argv: Sequence[str] | None = None) -> int:
    import sys

    return run_main("ykshm web", _body, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    raise SystemExit(main())
