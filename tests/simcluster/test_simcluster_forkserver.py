"""The fork server forks runs that are what a fresh `python -I ...` is (simcluster/forkserver.py).

Each test drives the real `Launcher` (a real fork server process) and compares a forked run with
the same argv started fresh (`--no-fork-server`'s Popen): environment, cwd, signals, fds, session,
argv, /proc views; exit codes and signals; a cwd that cannot be entered; a server that dies.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from simcluster import launcher, procpods

PROBE = r"""
import json, os, signal, sys
def words(path):
    return [w for w in open(path, 'rb').read().decode().split('\0') if w]
print(json.dumps({
    "env": dict(os.environ), "cwd": os.getcwd(), "argv": sys.argv, "orig_argv": sys.orig_argv,
    "mask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    "dispositions": {int(s): str(signal.getsignal(s)) for s in signal.valid_signals()
                     if s not in (signal.SIGKILL, signal.SIGSTOP)},
    "fds": sorted(os.listdir('/proc/self/fd')), "stdin": os.readlink('/proc/self/fd/0'),
    "session_leader": os.getsid(0) == os.getpid(), "pgrp_leader": os.getpgrp() == os.getpid(),
    "proc_environ": words('/proc/self/environ'), "proc_cmdline": words('/proc/self/cmdline'),
    "isolated": sys.flags.isolated, "main": sys.modules['__main__'].__name__,
}))
"""


@pytest.fixture
async def forking() -> AsyncIterator[launcher.Launcher]:
    async with trio.open_nursery() as nursery:
        owner = launcher.Launcher(fork_server=True)
        await nursery.start(owner.run)
        try:
            yield owner
        finally:
            owner.close()
            nursery.cancel_scope.cancel()


async def run(owner: launcher.Launcher, tmp_path: Path, code: str, *args: str,
              env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[int, str, int]:
    """(exit code, output, pid) of `python -I -c CODE ARGS` started by `owner`."""
    log = tmp_path / f"log-{os.urandom(4).hex()}"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        child = await owner.start([sys.executable, "-I", "-c", code, *args], env or {"A": "1"},
                                  str(cwd or tmp_path), fd)
    finally:
        os.close(fd)
    with trio.fail_after(30):
        code_ = await child.wait()
    return code_, log.read_text(), child.pid


def server_pid(owner: launcher.Launcher) -> int:
    assert owner.server is not None and not owner.server.gone
    return owner.server.process.pid


async def test_a_forked_run_is_what_a_fresh_interpreter_is(forking: launcher.Launcher, tmp_path: Path) -> None:
    work = tmp_path / "work dir"
    work.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "POD_SECRET": "s3", "EMPTY": ""}
    fresh = launcher.Launcher(fork_server=False)
    code_f, out_f, pid_f = await run(forking, tmp_path, PROBE, "a", "b c", env=env, cwd=work)
    code_p, out_p, _ = await run(fresh, tmp_path, PROBE, "a", "b c", env=env, cwd=work)
    assert code_f == code_p == 0, (out_f, out_p)
    forked, popen = json.loads(out_f), json.loads(out_p)
    assert forked == popen
    coerced = {k: v for k, v in forked["env"].items() if k != "LC_CTYPE"}  # PEP 538 adds it, as fresh
    assert coerced == env and forked["cwd"] == str(work) and forked["argv"] == ["-c", "a", "b c"]
    assert forked["proc_environ"] == [f"{k}={v}" for k, v in env.items()]
    assert forked["proc_cmdline"] == [sys.executable, "-I", "-c", PROBE, "a", "b c"]
    assert forked["fds"] == ["0", "1", "2", "3"] and forked["stdin"] == "/dev/null" and forked["mask"] == []
    assert forked["session_leader"] and forked["dispositions"][str(int(signal.SIGCHLD))] == str(signal.SIG_DFL)
    assert int(Path(f"/proc/{server_pid(forking)}/stat").read_text().split(") ")[1].split()[1]) == os.getpid()
    assert pid_f not in (os.getpid(), server_pid(forking))


async def test_exit_codes_signals_and_tracebacks(forking: launcher.Launcher, tmp_path: Path) -> None:
    assert (await run(forking, tmp_path, "import sys; print('out'); sys.exit(3)"))[:2] == (3, "out\n")
    assert (await run(forking, tmp_path, "import sys; sys.exit('bad thing')"))[:2] == (1, "bad thing\n")
    code, out, _ = await run(forking, tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    assert code == -signal.SIGTERM
    code, out, _ = await run(forking, tmp_path, "import threading, time, atexit\n"
                                                "atexit.register(print, 'atexit ran')\n"
                                                "threading.Thread(target=lambda: (time.sleep(0.2), print('joined'))).start()\n"
                                                "raise ValueError('boom')")
    assert code == 1 and "Traceback" in out and "ValueError: boom" in out
    assert out.index("joined") < out.index("atexit ran")  # threads joined, then atexit, as at exit


async def test_terminate_kills_the_forked_group(forking: launcher.Launcher, tmp_path: Path) -> None:
    fd = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT, 0o600)
    child = await forking.start([sys.executable, "-I", "-c", "import time; time.sleep(60)"], {}, str(tmp_path), fd)
    os.close(fd)
    with trio.fail_after(20):
        await procpods.terminate(child, 10)
    assert child.returncode == -signal.SIGTERM


async def test_a_cwd_that_cannot_be_entered_is_the_same_error(forking: launcher.Launcher, tmp_path: Path) -> None:
    errors = []
    for owner in (forking, launcher.Launcher(fork_server=False)):
        with pytest.raises(OSError) as caught:
            await run(owner, tmp_path, "pass", cwd=tmp_path / "missing")
        errors.append(str(caught.value))
    assert errors[0] == errors[1] and "No such file or directory" in errors[0]


async def test_a_multiprocessing_spawn_child_of_a_forked_run_starts(forking: launcher.Launcher,
                                                                    tmp_path: Path) -> None:
    code = ("import multiprocessing as mp\n"
            "p = mp.get_context('spawn').Process(target=print, args=('from the spawned child',))\n"
            "p.start(); p.join(); print('exit', p.exitcode)")
    assert (await run(forking, tmp_path, code, env={"PATH": "/usr/bin:/bin"}))[:2] == (
        0, "from the spawned child\nexit 0\n")


async def test_a_dead_server_takes_its_runs_and_is_replaced(forking: launcher.Launcher, tmp_path: Path) -> None:
    fd = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT, 0o600)
    child = await forking.start([sys.executable, "-I", "-c", "import time; time.sleep(60)"], {}, str(tmp_path), fd)
    os.close(fd)
    first = server_pid(forking)
    os.kill(first, signal.SIGKILL)
    with trio.fail_after(20):
        assert await child.wait() == -signal.SIGKILL  # it dies with its server (PDEATHSIG)
    code, out, pid = await run(forking, tmp_path, "import os; print(os.getppid())")
    assert code == 0 and int(out) == server_pid(forking) != first
