"""Harness of the `ykshm run` tests (tests/run): a real supervisor with real children on free ports.

`RunInstance` starts `ykshm run --port P --api-port Q --name NAME --nodes 4 --no-demo` (the console
script of this venv), reads its banner from stdout, finds its children and the web workers in
/proc, and `stop()`s everything by pid: SIGTERM (or SIGINT) to the supervisor, a wait, then SIGKILL
of its process group and of every descendant pid it ever saw. `leftovers()` says what survived:
/dev/shm/NAME* paths and live pids. Nothing is ever killed by name.
"""

from __future__ import annotations

import glob
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from kube.kubeconfig import load_kubeconfig
from tools.harness import HarnessError, pod_body, wait_for
from common.runtimedir import runtime_dir
from common.shimstatus import status_path

ROOT = Path(__file__).resolve().parents[2]


def ykshm() -> list[str]:
    script = Path(sys.executable).with_name("ykshm")
    return [sys.executable, str(script)] if script.exists() else [sys.executable, "-m", "tools.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children(pid: int) -> list[int]:
    """Live (non-zombie) child pids of pid."""
    try:
        kids = psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []
    return [k.pid for k in kids if _status(k) not in (None, psutil.STATUS_ZOMBIE)]


def _status(proc: psutil.Process) -> str | None:
    try:
        return proc.status()
    except psutil.NoSuchProcess:
        return None


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """The pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return False
    return data[data.rfind(b")") + 2:].split()[0] != b"Z"


def proc_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as fh:
        data = fh.read()
    return data[data.rfind(b")") + 2:].split()[0].decode()


def pids_naming(name: str) -> list[int]:
    """Every live process whose command line mentions the instance name."""
    me = os.getpid()
    return [pid for pid in psutil.pids() if pid != me and name in cmdline(pid) and alive(pid)]


class RunInstance:
    def __init__(self, name: str, *, nodes: int = 4, extra: tuple[str, ...] = (),
                 port: int | None = None, api_port: int | None = None, admission_port: int | None = None) -> None:
        self.name = name
        self.port = port or free_port()
        self.api_port = api_port or free_port()
        self.admission_port = admission_port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_url = f"https://127.0.0.1:{self.api_port}"
        self.status_file = Path(status_path(name, create=True))
        self.log_file = runtime_dir() / f"{name}.log"
        self.stderr_path = Path(tempfile.gettempdir()) / f"ykshm-{name}.run-stderr"
        self._stderr = open(self.stderr_path, "wb")
        self.seen: set[int] = set()
        self.proc = subprocess.Popen(
            [*ykshm(), "run", "--port", str(self.port), "--api-port", str(self.api_port),
             "--admission-port", str(self.admission_port),
             "--name", name, "--nodes", str(nodes), "--no-demo", *extra],
            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._stderr,
            start_new_session=True,
            # a fatal signal dumps the Python frames to stderr (one SIGSEGV seen on a SIGINT 0.1 s
            # after start, 2026-11-28: the next one names its frame in the assertion message)
            env={**os.environ, "PYTHONFAULTHANDLER": "1"})
        self.pid = self.proc.pid
        self.banner = ""
        self.api = httpx.Client(base_url=self.api_url, timeout=10)  # as the admin once the banner names it
        self.kubeconfig = ""
        self.web = httpx.Client(base_url=self.url, timeout=10)

    # ------------------------------------------------------------------ start-up
    def read_banner(self, timeout: float = 45) -> str:
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        out = b""
        deadline = time.monotonic() + timeout
        while b"Ctrl-C stops everything." not in out:
            chunk = self.proc.stdout.read()
            if chunk:
                out += chunk
            elif self.proc.poll() is not None:
                raise HarnessError(f"ykshm run exited {self.proc.returncode}: {self.stderr()}"
                                   f" log: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise HarnessError(f"no banner within {timeout}s: {out!r} log: {self.log_tail()}")
            time.sleep(0.05)
        self.banner = out.decode()
        self.remember()
        self.kubeconfig = re.search(r"kubectl --kubeconfig (\S+) get pods -A", self.banner).group(1)
        cfg = load_kubeconfig(self.kubeconfig)  # HTTPS, the admin's client certificate
        self.api.close()
        self.api = httpx.Client(base_url=cfg.server, verify=cfg.verify, timeout=10)
        return self.banner

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n: int = 15) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    # ------------------------------------------------------------------ processes
    def roles(self) -> dict[str, int]:
        """role -> pid of the supervisor's live children (by `ykshm <role>` in the cmdline)."""
        found = {}
        for pid in children(self.pid):
            cmd = cmdline(pid)
            for role in ("sim-cluster", "engine", "shim", "admission", "streams", "export", "web"):
                if f"ykshm {role} " in cmd:
                    found[role] = pid
        self.seen.update(found.values())
        return found

    def workers(self) -> list[int]:
        web = self.roles().get("web")
        pids = [p for p in children(web) if "resource_tracker" not in cmdline(p)] if web else []
        self.seen.update(pids)
        return pids

    def remember(self) -> None:
        """Record every descendant pid (for stop() and leftovers())."""
        todo = [self.pid]
        while todo:
            for child in children(todo.pop()):
                if child not in self.seen:
                    self.seen.add(child)
                    todo.append(child)

    def wait_role_pid(self, role: str, old: int, timeout: float = 20) -> int:
        """The new pid of `role` after `old` died (restarted by the supervisor)."""
        return wait_for(lambda: (p := self.roles().get(role)) and p != old and p, timeout,
                        f"{role} restarted (old pid {old})", interval=0.05)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int | None:
        self.remember()
        code = None
        if self.proc.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass
            try:
                code = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        else:
            code = self.proc.returncode
        for pid in [self.pid, *self.seen]:
            cmd = cmdline(pid)      # a pid of ours, not a reused one
            if alive(pid) and ("ykshm" in cmd or "spawn_main" in cmd or "resource_tracker" in cmd):
                for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
                    try:
                        kill()
                    except (ProcessLookupError, PermissionError):
                        pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        return code

    def leftovers(self) -> dict[str, Any]:
        live = sorted(p for p in self.seen | {self.pid} if alive(p))
        if live:          # a pid may be in a SIGKILL's last moments: give it a moment
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and any(alive(p) for p in live):
                time.sleep(0.05)
            live = [p for p in live if alive(p)]
        return {"shm": glob.glob(f"/dev/shm/{glob.escape(self.name)}*"), "pids": live,
                "status_file": self.status_file.exists()}

    def close(self) -> None:
        self.stop()
        self.api.close()
        self.web.close()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()
        for path in (self.stderr_path, self.log_file, self.status_file):
            path.unlink(missing_ok=True)
        for path in glob.glob(f"/dev/shm/{glob.escape(self.name)}*"):
            Path(path).unlink(missing_ok=True)

    # ------------------------------------------------------------------ cluster and REST
    def shim_status(self) -> dict[str, Any]:
        import orjson

        return orjson.loads(self.status_file.read_bytes())

    def wait_shim_running(self, pid: int | None = None, registrations: int | None = None,
                          timeout: float = 30) -> dict[str, Any]:
        def ok():
            doc = self.shim_status()
            if doc["state"] != "Running" or (pid is not None and doc["pid"] != pid):
                return None
            if registrations is not None and doc["registrations"] < registrations:
                return None
            return doc

        try:
            return wait_for(ok, timeout, "shim state Running", interval=0.05)
        except HarnessError as exc:
            raise HarnessError(f"{exc}; log: {self.log_tail()}") from None

    def create_pod(self, name: str, **kw) -> None:
        r = self.api.post("/api/v1/namespaces/default/pods", json=pod_body(name, **kw))
        assert r.status_code == 201, r.text

    def delete_pod(self, name: str) -> None:
        r = self.api.delete(f"/api/v1/namespaces/default/pods/{name}")
        assert r.status_code == 200, r.text

    def placement(self) -> dict[str, str]:
        r = self.api.get("/api/v1/namespaces/default/pods")
        assert r.status_code == 200, r.text
        return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in r.json()["items"]}

    def wait_bound(self, names, timeout: float = 30, phase: str | None = None) -> dict[str, str]:
        """name -> node of the named pods once all are bound (and in `phase`, if given)."""
        want = set(names)

        def ok():
            r = self.api.get("/api/v1/namespaces/default/pods")
            got = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in r.json()["items"]
                   if p["metadata"]["name"] in want and p["spec"].get("nodeName")
                   and (phase is None or p.get("status", {}).get("phase") == phase)}
            return got if len(got) == len(want) else None

        return wait_for(ok, timeout, f"{len(want)} pods bound", interval=0.1)

    def get_json(self, path: str) -> Any:
        r = self.web.get(path)
        assert r.status_code == 200, (path, r.status_code, r.text[:300])
        return r.json()


