"""How a process pod's run is started: forked by the fork server, or as a fresh interpreter.

`Launcher.start` asks this sim-cluster's fork server (`forkserver`; `--fork-server`, the default)
for a child running the run's argv, and gets a `ForkedChild`; with `--no-fork-server`, when the
server cannot be started, or when it refuses a run (too long a command line or environment for
`proctitle`), the run is a `Child`: `subprocess.Popen` of the argv, as before. Both have `pid`,
`returncode` (None while it runs; -N when killed by signal N) and `await wait()`, and each run
is its own process group (`procpods.terminate` signals it with killpg).

The server is exec'd from sim-cluster's trio thread with PR_SET_PDEATHSIG (`Child`), in its own
session, with no environment but `proctitle`'s padding, and a SOCK_SEQPACKET socketpair as its
control channel (only its end is passed). One reader task per server takes its answers and exit
reports and tells the server to reap a child once its status is taken. If the server dies, its
children die with it (PDEATHSIG: their runs end as killed by SIGKILL, and restart as their policy
says); the death is logged and the next run starts a new server.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import itertools
import logging
import os
import signal
import socket
import subprocess
from typing import Any

import orjson
import trio

from . import forkserver, proctitle
from .sandbox import PodIdentity

log = logging.getLogger("ykshm.sim-cluster.launcher")


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when sim-cluster goes, however it goes."""
    try:
        ctypes.CDLL(None).prctl(forkserver.PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


class Child:
    """A run's process, forked by sim-cluster's own thread.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child ends, not the process: forked
    from a trio worker thread (`trio.lowlevel.open_process` does that), every pod was SIGKILLed
    when that thread went idle (10 s in trio's thread cache). So the fork happens here, on the
    thread running trio (it ends only with sim-cluster), and the exit is awaited on a pidfd, as
    trio does for its own processes on Linux.
    """

    def __init__(self, argv: list[str], identity: PodIdentity | None = None, **options: Any) -> None:
        become = identity.plan() if identity is not None else None

        def before_exec() -> None:  # the pod's identity first: a change of credentials clears PDEATHSIG
            if become is not None:
                become()
            _die_with_parent()

        self._popen = subprocess.Popen(argv, preexec_fn=before_exec, **options)
        self.pid = self._popen.pid
        self._pidfd = os.pidfd_open(self.pid)
        self._wait_lock = trio.Lock()  # several tasks may wait (the run, its killer): one at a time

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    async def wait(self) -> int:
        async with self._wait_lock:
            if self._popen.poll() is None:
                await trio.lowlevel.wait_readable(self._pidfd)
            code = self._popen.wait()
            if self._pidfd >= 0:
                os.close(self._pidfd)
                self._pidfd = -1
            return code


class ForkedChild:
    """A run forked by the fork server: its exit status comes from the server's report."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server = server
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd = os.pidfd_open(pid)  # the server keeps it a zombie until we reap: no reuse
        self._changed = trio.Event()
        self._wait_lock = trio.Lock()  # several tasks may wait (the run, its killer): one at a time

    def _exited(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
            os.close(self._pidfd)
            self._pidfd = -1
        self._changed.set()

    def _orphaned(self) -> None:
        self._changed.set()

    async def wait(self) -> int:
        async with self._wait_lock:
            while self.returncode is None:
                if self.server.gone:  # it dies with its server (PDEATHSIG), its status is nobody's
                    await trio.lowlevel.wait_readable(self._pidfd)
                    self._exited(-signal.SIGKILL)
                    break
                await self._changed.wait()
                self._changed = trio.Event()
        assert self.returncode is not None
        return self.returncode


class Refused(Exception):
    """The server will not run this argv (its form or size): start it as a fresh interpreter."""


class ForkServer:
    """sim-cluster's handle of one fork server process: requests out, answers and exits in."""

    def __init__(self) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = Child(forkserver.server_argv(theirs.fileno()), env=proctitle.padding(),
                                 pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, start_new_session=True)
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        mine.setblocking(False)
        self.chan = mine
        self.gone = False
        self.ids = itertools.count()
        self.pending: dict[int, tuple[trio.Event, list[dict[str, Any]]]] = {}
        self.children: dict[int, ForkedChild] = {}
        self.scope = trio.CancelScope(shield=True)  # outlives the pods' cancellation: they wait on it

    async def spawn(self, argv: list[str], env: dict[str, str], cwd: str, fd: int,
                    identity: PodIdentity | None = None) -> ForkedChild:
        ident = next(self.ids)
        done, answer = trio.Event(), []
        self.pending[ident] = (done, answer)
        message: dict[str, Any] = {"run": ident, "argv": argv, "env": env, "cwd": cwd}
        if identity is not None:
            message["uid"], message["gid"] = identity.uid, identity.gid
        try:
            await self._send(message, [fd])
            await done.wait()
        finally:
            self.pending.pop(ident, None)
        if not answer:
            raise Refused("the fork server is gone")
        reply = answer[0]
        if "refused" in reply:
            raise Refused(reply["refused"])
        if "errno" in reply:
            raise OSError(reply["errno"], reply["error"], reply["cwd"])
        return reply["child"]

    async def _send(self, message: dict[str, Any], fds: list[int] | None = None) -> None:
        while True:
            try:
                forkserver.send(self.chan, message, fds)
                return
            except BlockingIOError:
                try:
                    await trio.lowlevel.wait_writable(self.chan)
                except trio.ClosedResourceError:
                    raise Refused("the fork server is gone") from None
            except OSError as exc:
                if exc.errno == errno.EMSGSIZE:
                    raise Refused("the run's message is too large for the channel") from None
                self._lost()
                raise Refused(f"the fork server is gone: {exc}") from None

    async def read(self) -> None:
        """The reader task: answers to `spawn`, exits to their children, until the server goes."""
        with self.scope:
            try:
                while True:
                    await trio.lowlevel.wait_readable(self.chan)
                    try:
                        data = self.chan.recv(forkserver.MAX_MESSAGE)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if not data:
                        break
                    await self._dispatch(orjson.loads(data))
            finally:
                self._lost()
        if not self.scope.cancelled_caught:  # it died: close our end (`close` did when we stop)
            trio.lowlevel.notify_closing(self.chan)
            self.chan.close()
        with trio.move_on_after(5) as waited:  # it exits at EOF; a zombie only until then
            waited.shield = True
            code = await self.process.wait()
        if not self.scope.cancelled_caught:
            log.warning("the fork server (pid %d) is gone (exit code %s); the next run starts a new one",
                        self.process.pid, code if not waited.cancelled_caught else "unknown")

    async def _dispatch(self, message: dict[str, Any]) -> None:
        if "exit" in message:
            child = self.children.pop(int(message["exit"]), None)
            if child is not None:
                child._exited(int(message["code"]))
            await self._send({"reap": int(message["exit"])})  # its status is taken: the pid may go
        elif "run" in message:
            if "pid" in message:  # registered here: its exit may be the very next message
                message["child"] = self.children[message["pid"]] = ForkedChild(self, int(message["pid"]))
            waiting = self.pending.get(message["run"])
            if waiting is not None:
                waiting[1].append(message)
                waiting[0].set()
            elif "pid" in message:  # its launch was cancelled (the pod went): nobody will run it
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(int(message["pid"]), signal.SIGKILL)

    def _lost(self) -> None:
        if self.gone:
            return
        self.gone = True
        for done, _ in self.pending.values():
            done.set()
        for child in self.children.values():
            child._orphaned()

    def close(self) -> None:
        """sim-cluster stops (its pods are gone): EOF tells the server to exit."""
        self.scope.cancel()
        self._lost()
        trio.lowlevel.notify_closing(self.chan)
        self.chan.close()


class Launcher:
    """Starts every run of this sim-cluster's process pods; owns the fork server(s)."""

    def __init__(self, fork_server: bool = True) -> None:
        self.fork_server = fork_server
        self.server: ForkServer | None = None
        self.closed = False  # no new server once the pods are gone (its reader would keep `run` up)
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Owns the servers' reader tasks; they end with `close` (after the pods' processes)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    def _server(self) -> ForkServer | None:
        if self.server is not None and not self.server.gone:
            return self.server
        if self._nursery is None or self.closed:
            return None
        try:
            self.server = ForkServer()
        except OSError as exc:
            log.warning("cannot start the fork server (%s): runs start as fresh interpreters", exc)
            self.fork_server = False
            return None
        self._nursery.start_soon(self.server.read, name=f"fork server {self.server.process.pid}")
        return self.server

    async def start(self, argv: list[str], env: dict[str, str], cwd: str, fd: int,
                    identity: PodIdentity | None = None) -> Child | ForkedChild:
        """A run's process: stdin /dev/null, stdout+stderr `fd`, its own session, as `identity`
        (the pod's own uid, `sandbox`; None: sim-cluster's user) on either path."""
        server = self._server() if self.fork_server else None
        if server is not None:
            try:
                return await server.spawn(argv, env, cwd, fd, identity)
            except Refused as exc:
                log.info("a run starts as a fresh interpreter: %s", exc)
        return Child(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True,
                     identity=identity)

    def close(self) -> None:
        self.closed = True
        if self.server is not None and not self.server.gone:
            self.server.close()
