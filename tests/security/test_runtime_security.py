"""The SI socket and the roles' files cannot be impersonated or swapped by another local user.

The attacker is a real process of another uid (nobody, 65534): the tests run as root and start it
with `user=` (so the suite runs as root, as CI does). Each test fails without the check it names (issue 26.2, 26.3 files part).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from common import runtimedir
from si import protocol as P

NOBODY = 65534
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def shared_dir():
    """A world-writable sticky directory, like /tmp (in it, so nobody can reach it): where the
    attacker can plant things."""
    d = Path(tempfile.mkdtemp(prefix="ykshm-sec-"))
    d.chmod(0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@dataclasses.dataclass
class Nobody:
    """A forked child running as uid nobody; `reports` are the lines it wrote back."""

    pid: int
    reports: Any

    def line(self) -> bytes:
        return self.reports.readline()

    def stop(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        self.reports.close()


def _as_nobody(work: Callable[[Callable[[bytes], None]], None]) -> Nobody:
    """Fork; the child drops to uid/gid nobody and runs work(report)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the attacker
        code = 1
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            work(lambda msg: os.write(w, msg + b"\n"))
            code = 0
        except BaseException as exc:  # noqa: BLE001 - reported to the test, which fails on it
            os.write(w, f"error {exc!r}\n".encode())
        finally:
            os._exit(code)
    os.close(w)
    return Nobody(pid, os.fdopen(r, "rb"))


def _listener(path: Path) -> Nobody:
    def listen(report):
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.listen(8)
        report(b"listening")
        s.accept()
        report(b"accepted")
        time.sleep(30)

    attacker = _as_nobody(listen)
    assert attacker.line() == b"listening\n"
    return attacker


def _client(path: Path, hello: bytes) -> bytes:
    """What a client of uid nobody gets back for `hello` (up to an Ack, or until closed)."""
    def connect(report):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(20)
        s.connect(str(path))
        data = b""
        try:
            s.sendall(hello)
            while b"Ack" not in data and (chunk := s.recv(65536)):
                data += chunk
        except (ConnectionResetError, BrokenPipeError):  # closed, our hello unread
            pass
        report(b"Ack" if b"Ack" in data else b"closed")

    client = _as_nobody(connect)
    try:
        return client.line().strip()
    finally:
        client.stop()


# -- the directory -----------------------------------------------------------------------------


def test_runtime_dir_owned_by_someone_else_is_refused(tmp_path):
    (tmp_path / "ykshm").mkdir(mode=0o700)
    os.chown(tmp_path / "ykshm", NOBODY, NOBODY)
    with pytest.raises(runtimedir.RuntimeDirError, match="owned by uid 65534"):
        runtimedir.runtime_dir(environ={"XDG_RUNTIME_DIR": str(tmp_path)})


def test_runtime_dir_others_could_write_or_read_is_refused(tmp_path):
    (tmp_path / "ykshm").mkdir()
    (tmp_path / "ykshm").chmod(0o755)
    with pytest.raises(runtimedir.RuntimeDirError, match="not 700"):
        runtimedir.runtime_dir(environ={"XDG_RUNTIME_DIR": str(tmp_path)})
    # systemd's RuntimeDirectory= may be 0750 (group ykshm reads), never writable by others
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(0o750)
    assert runtimedir.runtime_dir(environ={"RUNTIME_DIRECTORY": str(run)}) == run
    run.chmod(0o777)
    with pytest.raises(runtimedir.RuntimeDirError, match="others may write"):
        runtimedir.runtime_dir(environ={"RUNTIME_DIRECTORY": str(run)})


def test_runtime_dir_symlink_is_refused(tmp_path):
    ours = tmp_path / "elsewhere"
    ours.mkdir(mode=0o700)
    (tmp_path / "ykshm").symlink_to(ours)
    with pytest.raises(runtimedir.RuntimeDirError, match="not a directory"):
        runtimedir.runtime_dir(environ={"XDG_RUNTIME_DIR": str(tmp_path)})


def test_runtime_dir_made_private(tmp_path):
    d = runtimedir.runtime_dir(environ={"XDG_RUNTIME_DIR": str(tmp_path)})
    assert d == tmp_path / "ykshm" and (d.stat().st_mode & 0o777) == 0o700


def test_engine_refuses_a_runtime_dir_of_another_user(tmp_path, ring_name):
    (tmp_path / "ykshm").mkdir(mode=0o700)
    os.chown(tmp_path / "ykshm", NOBODY, NOBODY)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path)}
    env.pop("RUNTIME_DIRECTORY", None)
    r = subprocess.run([sys.executable, "-m", "tools.cli", "engine", "--name", ring_name],
                       cwd=ROOT, env=env, capture_output=True, timeout=60)
    err = r.stderr.decode()
    assert r.returncode == 1 and "owned by uid 65534" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1


def _plant_tmp(tmp_path: Path) -> Path:
    """The review's N16: another local user makes /tmp/ykshm-UID first."""
    planted = tmp_path / "tmp" / f"ykshm-{os.geteuid()}"
    planted.mkdir(parents=True, mode=0o700)
    os.chown(planted, NOBODY, NOBODY)
    return planted


def test_a_planted_tmp_dir_does_not_stop_us_every_role_agrees_on_a_private_one(tmp_path, monkeypatch):
    planted = _plant_tmp(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(planted.parent))
    env = {"HOME": str(tmp_path / "home")}
    first = runtimedir.runtime_dir(environ=env)
    assert first == tmp_path / "home" / ".cache" / "ykshm" / "run"
    assert (first.stat().st_mode & 0o777) == 0o700 and first.stat().st_uid == os.geteuid()
    assert runtimedir.runtime_dir(environ=env) == first == runtimedir.runtime_dir_candidate(env)
    planted.rmdir()
    planted.symlink_to(first)              # a symlink there is not ours either
    assert runtimedir.runtime_dir(environ=env) == first
    planted.unlink()                       # nothing planted: /tmp/ykshm-UID as before
    assert runtimedir.runtime_dir(environ=env) == planted


def test_the_engine_starts_despite_a_planted_tmp_dir(tmp_path, ring_name):
    """`ykshm engine` with no systemd or session runtime directory: before, one line "owned by
    uid 65534" and exit 1; now it serves its SI socket from the home fallback."""
    planted = _plant_tmp(tmp_path)
    env = {**os.environ, "TMPDIR": str(planted.parent), "HOME": str(tmp_path / "home")}
    env.pop("RUNTIME_DIRECTORY", None)
    env.pop("XDG_RUNTIME_DIR", None)
    fallback = tmp_path / "home" / ".cache" / "ykshm" / "run"
    proc = subprocess.Popen([sys.executable, "-m", "tools.cli", "engine", "--name", ring_name],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not list(fallback.glob("*.sock")):
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "no SI socket in the fallback directory"
            time.sleep(0.05)
        assert not list(planted.iterdir())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


# -- the socket --------------------------------------------------------------------------------


def test_shim_refuses_a_socket_planted_by_another_user(shared_dir):
    """The attacker binds the engine's path first: the shim does not connect (it would bind and
    delete pods on the impostor's word)."""
    path = shared_dir / "engine.sock"
    attacker = _listener(path)
    try:
        with pytest.raises(runtimedir.RuntimeDirError, match="owned by uid 65534"):
            trio.run(_shim_connect, str(path))
    finally:
        attacker.stop()


def test_shim_refuses_an_engine_of_another_uid_even_at_our_socket(shared_dir):
    """The file is ours (renamed over, or a lax directory), the listener is not: SO_PEERCRED."""
    path = shared_dir / "engine.sock"
    attacker = _listener(path)
    os.chown(path, 0, 0)
    try:
        with pytest.raises(runtimedir.RuntimeDirError, match="peer uid 65534"):
            trio.run(_shim_connect, str(path))
    finally:
        attacker.stop()
    # allowed when configured
    attacker = _listener(shared_dir / "ok.sock")
    os.chown(shared_dir / "ok.sock", 0, 0)
    os.environ[runtimedir.ENV_ALLOWED] = "nobody"
    try:
        trio.run(_shim_connect, str(shared_dir / "ok.sock"))
        assert attacker.line() == b"accepted\n"
    finally:
        del os.environ[runtimedir.ENV_ALLOWED]
        attacker.stop()


async def _shim_connect(path: str) -> None:
    from shim_k8s.shim import _open_engine

    stream = await _open_engine(path)
    await stream.aclose()


def test_engine_refuses_to_remove_a_socket_planted_by_another_user(shared_dir, ring_name):
    path = shared_dir / "engine.sock"
    attacker = _listener(path)
    try:
        r = subprocess.run([sys.executable, "-m", "tools.cli", "engine", "--name", ring_name,
                            "--socket", str(path), "--unlink-on-exit"],
                           cwd=ROOT, capture_output=True, timeout=60)
        err = r.stderr.decode()
        assert r.returncode == 1 and "belongs to uid 65534" in err and "Traceback" not in err
        assert path.is_socket()
    finally:
        attacker.stop()


@pytest.mark.parametrize("allowed", [False, True])
def test_engine_closes_a_connection_from_another_uid(shared_dir, ring_name, allowed):
    """Even if the socket's mode let another user connect (here 0666), the engine answers only
    the shim's user: our own uid, root, or $YKSHM_ALLOWED_UIDS."""
    path = shared_dir / "engine.sock"
    env = {**os.environ, runtimedir.ENV_ALLOWED: "nobody" if allowed else ""}
    engine = subprocess.Popen([sys.executable, "-m", "tools.cli", "engine", "--name", ring_name,
                               "--socket", str(path), "--unlink-on-exit"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not path.exists():
            assert engine.poll() is None and time.monotonic() < deadline, engine.stderr.read()
            time.sleep(0.05)
        path.chmod(0o666)
        hello = P.encode({"type": "RegisterResourceManager", "rmID": "rm", "id": 1})
        assert _client(path, hello) == (b"Ack" if allowed else b"closed")
    finally:
        engine.terminate()
        engine.wait(20)
    if not allowed:
        assert b"SI connection refused: peer uid 65534" in engine.stderr.read()


# -- files -------------------------------------------------------------------------------------


def test_status_write_replaces_a_planted_symlink_instead_of_following_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    status = tmp_path / "NAME.shim.json"
    status.symlink_to(victim)
    runtimedir.write_private(status, b"{}", 0o640)
    assert victim.read_bytes() == b"precious"
    assert not status.is_symlink() and status.read_bytes() == b"{}"
    assert (status.stat().st_mode & 0o777) == 0o640


def test_log_open_refuses_a_symlink_and_a_file_of_another_user(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    log = tmp_path / "NAME.log"
    log.symlink_to(victim)
    with pytest.raises(OSError):
        runtimedir.open_private_append(log)
    log.unlink()
    log.write_bytes(b"")
    os.chown(log, NOBODY, NOBODY)
    with pytest.raises(runtimedir.RuntimeDirError, match="not owned by us"):
        runtimedir.open_private_append(log)
    assert victim.read_bytes() == b"precious"


def test_export_status_does_not_follow_a_planted_symlink(tmp_path, ring_name):
    from export.status import ExportStatus, status_path, write_file

    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    os.symlink(victim, status_path(ring_name))
    write_file(ring_name, ExportStatus(pid=os.getpid()))
    assert victim.read_bytes() == b"precious"
    assert not os.path.islink(status_path(ring_name))


def test_peer_uid_through_socketpair():
    a, b = socket.socketpair(socket.AF_UNIX)
    try:
        assert runtimedir.peer_uid(a) == os.geteuid()
        assert runtimedir.check_peer(a, frozenset({os.geteuid()})) == os.geteuid()
        with pytest.raises(runtimedir.RuntimeDirError):
            runtimedir.check_peer(a, frozenset({12345}))
    finally:
        a.close()
        b.close()


def test_allowed_uids_config_error_names_key_and_value():
    with pytest.raises(runtimedir.RuntimeDirError, match="YKSHM_ALLOWED_UIDS: 'no-such-user-x'"):
        runtimedir.allowed_uids({runtimedir.ENV_ALLOWED: "no-such-user-x"})
    assert runtimedir.allowed_uids({runtimedir.ENV_ALLOWED: "nobody, 7"}) >= {0, 7, NOBODY}
