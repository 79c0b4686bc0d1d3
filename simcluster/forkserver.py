"""The fork server ("warm interpreter"): one process per sim-cluster that forks its pods' runs.

A process pod's run was a fresh `python -I -m tools.cli ARGS`: ~0.13 s of CPU each, most of it
importing trio. This process is exec'd once by sim-cluster (`launcher`) the same way (`-I`, its
own session, PR_SET_PDEATHSIG from sim-cluster's trio thread), imports `PRELOAD` once, then forks
a child per run it is asked for. Plain blocking Python: a poll on the control channel (a
SOCK_SEQPACKET socketpair sim-cluster made; fd `argv[1]`) and on a SIGCHLD wakeup pipe.

Messages (one orjson object per packet):

- sim-cluster -> server: `{"run": ID, "argv": [...], "env": {...}, "cwd": DIR}` (and `"uid"`, `"gid"`:
  the pod's own identity, `sandbox`) with the run's log fd (SCM_RIGHTS); `{"reap": PID}` once
  sim-cluster has taken PID's exit status.
- server -> sim-cluster: `{"run": ID, "pid": PID}` (once the child is in its own session: a
  `killpg(PID)` right after it reaches the whole run), or `{"run": ID, "errno": E, "error": TEXT}`
  (the cwd cannot be opened: the kubelet's StartError), or `{"run": ID, "refused": TEXT}` (not a
  form it runs, or too long for `proctitle`: sim-cluster starts it fresh); `{"exit": PID, "code": C}`
  (C < 0: killed by signal -C). An exit is learnt with `waitid(WNOWAIT)` and the zombie reaped
  only on `reap`, so the pid is not reused while sim-cluster may still `killpg` it.

A child is what `python -I -m MODULE ARGS` (or `-c CODE ARGS`) would be: run as the pod's uid and gid
with no supplementary group (dropped before anything of the pod's runs), its own session, stdin
/dev/null, stdout and stderr the log fd, the cwd, `os.environ` cleared and refilled with exactly the
run's environment, /proc/PID/cmdline and environ showing its own (`proctitle`), default signal
dispositions (as the interpreter set them at start) and an empty mask, PR_SET_PDEATHSIG (it dies
with the server, which dies with sim-cluster), every other fd closed (the channel above all: a pod
cannot ask the server for anything). The module runs as `__main__` (`runpy`, so a multiprocessing
spawn child of a pod starts right); SystemExit gives the exit code, any other exception a traceback
on stderr and exit 1, KeyboardInterrupt death by SIGINT; threads are joined, atexit handlers run,
stdio flushed, then `os._exit`: a child never returns into this loop. EOF on the channel ends the
server (its children die with it).

What differs from a fresh interpreter: the children share the server's hash-randomisation seed and
its interpreter-start settings (the stdio and filesystem encodings: UTF-8 whatever a pod's
LANG/LC_* say; the C library's LC_CTYPE and PEP 538's coercion are redone from the pod's env), `PRELOAD` is imported before the pod's environment is set (checked: none of them reads the
environment at import; `common.podhosts.install()` reads it when called, `tempfile.tempdir` is
reset), and objects imported by the server are frozen for the collector (`gc.freeze`, fewer
copy-on-write pages).
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import importlib
import locale
import os
import runpy
import select
import signal
import socket
import sys
import threading
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from .proctitle import Regions
from .sandbox import PodIdentity

PRELOAD = ("trio", "orjson", "h11", "logging", "argparse", "json", "uuid", "datetime", "common.cliutil",
           "common.podhosts", "common.http1.flags")
"""Imported once by the server: what every ykshm role imports (trio ~0.10 s of a start)."""
MAX_MESSAGE = 1 << 20
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4


def server_argv(fd: int) -> list[str]:
    from .proctitle import PAD_ARG
    return [sys.executable, "-I", "-m", "simcluster.forkserver", str(fd), PAD_ARG]


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = orjson.dumps(message)
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.send(data)


def module_of(argv: list[str]) -> tuple[str, str] | None:
    """("-m", MODULE) or ("-c", CODE) of `python -I -m MODULE ...`, None for another form."""
    if len(argv) >= 4 and argv[0] == sys.executable and argv[1] == "-I" and argv[2] in ("-m", "-c"):
        return argv[2], argv[3]
    return None


@dataclass
class Server:
    chan: socket.socket
    regions: Regions
    libc: Any
    wake: int
    running: set[int] = field(default_factory=set)   # forked, exit not yet reported
    reported: set[int] = field(default_factory=set)  # exit reported, zombie kept until `reap`

    def serve(self) -> None:
        poll = select.poll()
        poll.register(self.chan, select.POLLIN)
        poll.register(self.wake, select.POLLIN)
        while True:
            for fd, _ in poll.poll():
                if fd == self.wake:
                    _drain(self.wake)
                    self.report_exits()
                elif not self.receive():
                    return

    def receive(self) -> bool:
        try:
            data, fds, _, _ = socket.recv_fds(self.chan, MAX_MESSAGE, 1)
        except ConnectionError:
            return False
        if not data:
            return False
        message = orjson.loads(data)
        if "reap" in message:
            self.reap(int(message["reap"]))
        elif "run" in message:
            self.run(message, fds[0] if fds else -1)
        for fd in fds[1:]:
            os.close(fd)
        return True

    def reap(self, pid: int) -> None:
        if pid in self.reported:
            self.reported.discard(pid)
            os.waitid(os.P_PID, pid, os.WEXITED)

    def report_exits(self) -> None:
        for pid in list(self.running):
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            if info is None:
                continue
            code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
            self.running.discard(pid)
            self.reported.add(pid)
            send(self.chan, {"exit": pid, "code": code})

    def run(self, message: dict[str, Any], log_fd: int) -> None:
        ident, argv, env, cwd = message["run"], message["argv"], message["env"], message["cwd"]
        try:
            if log_fd < 0 or module_of(argv) is None or not self.regions.fits(argv, env):
                send(self.chan, {"run": ident, "refused": "not a form or size the fork server runs"})
                return
            try:
                dir_fd = os.open(cwd, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as exc:
                send(self.chan, {"run": ident, "errno": exc.errno, "error": exc.strerror, "cwd": cwd})
                return
            server = os.getpid()
            become = PodIdentity(int(message["uid"]), int(message["gid"])).plan() if "uid" in message else None
            ready, setting_up = os.pipe()
            pid = os.fork()
            if pid == 0:
                _child(self, log_fd, dir_fd, argv, env, server, become)  # never returns
            os.close(setting_up)
            os.read(ready, 1)  # EOF once the child closed its fds, after setsid: its group exists to killpg
            os.close(ready)
            os.close(dir_fd)
            self.running.add(pid)
            send(self.chan, {"run": ident, "pid": pid})
        finally:
            if log_fd >= 0:
                os.close(log_fd)
        self.report_exits()  # it may have exited before being in `running`


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


# -- in the child -----------------------------------------------------------------------------

def _child(server: Server, log_fd: int, dir_fd: int, argv: list[str], env: dict[str, str], parent: int,
           become: Callable[[], None] | None) -> None:
    """Become the run, run its module, exit: never returns into the server's loop."""
    try:
        os.setsid()
        os.fchdir(dir_fd)  # before `become`: its new mount namespace takes the cwd along
        if become is not None:  # the pod's identity (`sandbox`), before the PDEATHSIG (a change of
            # credentials clears it)
            become()
            server.libc.prctl(PR_SET_DUMPABLE, 1)  # as after an exec: its own uid may read its /proc
        server.libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the server went before the prctl
            os._exit(1)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        server.chan.detach()  # the number is closed below; the object must not close a reused one
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        os.environ.clear()
        os.environ.update(env)
        server.regions.write(argv, env)
        _coerce_c_locale()
        if "tempfile" in sys.modules:
            sys.modules["tempfile"].tempdir = None
        sys.orig_argv = list(argv)
    except BaseException:  # noqa: BLE001 - nothing may return into the server
        traceback.print_exc()
        os._exit(127)
    os._exit(_run_main(argv))


def _coerce_c_locale() -> None:
    """The interpreter's start with the run's environment: LC_CTYPE from it, and the C locale
    coerced to UTF-8 (PEP 538: `LC_CTYPE=C.UTF-8` in os.environ) unless LC_ALL is set."""
    if os.environ.get("LC_ALL"):
        return
    try:
        current = locale.setlocale(locale.LC_CTYPE, "")
    except locale.Error:  # an unknown locale: the process's stays "C", which is coerced
        current = locale.setlocale(locale.LC_CTYPE, "C")
    if current not in ("C", "POSIX"):
        return
    for target in ("C.UTF-8", "C.utf8", "UTF-8"):
        try:
            locale.setlocale(locale.LC_CTYPE, target)
        except locale.Error:
            continue
        os.environ["LC_CTYPE"] = target
        return


def _run_main(argv: list[str]) -> int:
    kind, target = module_of(argv) or ("-m", "")
    interrupted = False
    try:
        if kind == "-m":
            sys.argv = ["-m", *argv[4:]]
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.argv = ["-c", *argv[4:]]
            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main
            exec(compile(target, "<string>", "exec"), main.__dict__)  # noqa: S102 - python -c
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        code, interrupted = 130, True
    except BaseException:  # noqa: BLE001 - what the interpreter does with an uncaught exception
        sys.excepthook(*sys.exc_info())
        code = 1
    return _finish(code, interrupted)


def _exit_code(code: Any) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _finish(code: int, interrupted: bool) -> int:
    """The interpreter's exit: join threads, atexit, flush stdio (a failed stdout flush is 120)."""
    threading._shutdown()  # type: ignore[attr-defined]  # what Py_FinalizeEx calls
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = 120 if code == 0 else code
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


# -- the server's start ------------------------------------------------------------------------

def main() -> None:
    chan = socket.socket(fileno=int(sys.argv[1]))
    own_words = sys.orig_argv[:-1]
    regions = Regions.of_self(own_words)
    os.environ.clear()  # nothing of the padding (or anything else) reaches a child
    regions.clear()
    for name in PRELOAD:
        importlib.import_module(name)
    libc = ctypes.CDLL(None, use_errno=True)
    gc.freeze()
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda _s, _f: None)
    Server(chan, regions, libc, wake_r).serve()


if __name__ == "__main__":
    main()
