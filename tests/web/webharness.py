"""Harness of the web tests: real rings, real `ykshm web` subprocesses on free ports.

Every server is started as `python -m tools.cli web --bind fd://N` on a socket the test bound to
127.0.0.1:0 (no port race), and stopped by pid (SIGTERM, then SIGKILL of the supervisor and of
every worker it spawned). Every /dev/shm/NAME* a test makes is unlinked afterwards.
"""

from __future__ import annotations

import glob
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import psutil
from shm import RingWriter

ROOT = Path(__file__).resolve().parents[2]


def _children(pid: int) -> list[int]:
    try:
        return [k.pid for k in psutil.Process(pid).children()]
    except psutil.NoSuchProcess:
        return []


class WebServer:
    """A running `ykshm web`; `url` is its base URL, `pid` the supervisor's pid."""

    def __init__(self, name: str, *, workers: int = 2, config: str | None = None,
                 extra: list[str] | None = None, verify=None, env: dict[str, str] | None = None) -> None:
        """`verify`: an ssl.SSLContext trusting the server's CA when it serves TLS (https URL)."""
        self.name = name
        self.verify = verify if verify is not None else True
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"{'https' if verify is not None else 'http'}://127.0.0.1:{self.port}"
        fd = self.sock.fileno()
        args = [sys.executable, "-m", "tools.cli", "web", "--name", name, "--bind", f"fd://{fd}",
                "--workers", str(workers)]
        if config:
            args += ["--config", config]
        args += extra or []
        self.stderr_path = f"/tmp/ykshm-web-test-{name}.log"
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(args, cwd=ROOT, pass_fds=(fd,), stdout=subprocess.DEVNULL,
                                     stderr=self._stderr, env={**os.environ, **(env or {})})
        self.workers = workers
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ykshm web exited {self.proc.returncode}: {self.log()}")
            try:
                r = httpx.get(self.url + "/ws/v1/scheduler/healthcheck", timeout=2, verify=self.verify)
                if r.status_code == 200 and len(self.worker_pids()) == self.workers:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"ykshm web did not become ready: {self.log()}")

    def worker_pids(self) -> list[int]:
        # multiprocessing "spawn" may also start a resource tracker; workers run spawn_main.
        pids = []
        for pid in _children(self.proc.pid):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    cmd = fh.read()
            except OSError:
                continue
            if b"spawn_main" in cmd and b"resource_tracker" not in cmd:
                pids.append(pid)
        return pids

    def log(self) -> str:
        try:
            return Path(self.stderr_path).read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        children = _children(self.proc.pid)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.sock.close()
        self._stderr.close()
        try:
            os.unlink(self.stderr_path)
        except OSError:
            pass


def unique_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def cleanup(name: str) -> None:
    for path in glob.glob(f"/dev/shm/{name}*"):
        try:
            os.unlink(path)
        except (FileNotFoundError, IsADirectoryError):
            pass


class Ring:
    """The test's writer of one instance's ring; `renew()` makes a new instance (engine restart)."""

    def __init__(self, name: str, capacity: int = 100) -> None:
        self.name = name
        self.writer = RingWriter.create(name, capacity)

    def renew(self, capacity: int = 100) -> RingWriter:
        self.writer.close()
        self.writer = RingWriter.create(self.name, capacity)
        return self.writer

    def publish(self, n: int, start: int = 0, message: str = "", **kw) -> list[int]:
        ids = []
        w = self.writer
        for i in range(start, start + n):
            ids.append(w.publish(2, 2, 201, object_id=f"app-{i}", reference_id=f"ask-{i}",
                                 message=message, resource={"memory": 1024, "vcore": 100}, **kw))
        return ids

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:
            pass


