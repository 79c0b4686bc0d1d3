"""Connecting to Redis (standalone or Cluster) and talking to the node that holds our keys.

`Link.open(url)` connects, authenticates and finds out whether the server is a Cluster node; in a
Cluster it asks for the master of our hash tag's slot. Everything the exporter sends goes to that
one node (all our keys share the slot), through `node`, a plain `redis.Redis`. After any failure
the exporter calls `refresh()`, which re-reads the Cluster's topology from whichever known node
still answers (so after a failover it finds the promoted replica).

`BulkPipe` writes a batch of already-packed commands in one `sendall` and reads the replies with a
hiredis parser: one round trip per batch, two batches in flight, no per-command Python objects.

Errors: every failure becomes `RedisProblem(reason)`, a one-line text a user can act on ("connection
refused by 127.0.0.1:6390", "authentication refused: WRONGPASS ...", "cluster is down"); the
caller decides between exit 2 (start-up) and a retry (running). The URL never appears with its
password (`redact`).
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from typing import Any

import hiredis
import redis
import redis.exceptions as rex
from redis.cluster import RedisCluster

from .redisauth import RedisAuth

CONNECT_TIMEOUT = 2.0
SOCKET_TIMEOUT = 5.0


class RedisProblem(Exception):
    """Redis cannot be used right now, or at all; `str()` is the one-line reason."""


def redact(url: str) -> str:
    """The URL with any password replaced by ***."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))


def split_instance(url: str) -> tuple[str, str | None]:
    """(URL without our `instance=` query parameter, its value or None)."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    instance = None
    kept = []
    for key, value in query:
        if key == "instance":
            instance = value
        else:
            kept.append((key, value))
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(kept))), instance


def check_url(url: str) -> None:
    """RedisProblem unless `url` is a redis:// or rediss:// URL with a host."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise RedisProblem(f"bad Redis URL {redact(url)!r}: {exc}") from None
    if parts.scheme not in ("redis", "rediss") or not parts.hostname:
        raise RedisProblem(f"bad Redis URL {redact(url)!r}: expected redis://[user:password@]host[:port][/db]")
    del port


def describe(exc: BaseException) -> str:
    """One line for a redis-py exception (or an OSError under it)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, rex.AuthenticationError) or "NOAUTH" in text or "WRONGPASS" in text:
        return f"authentication refused: {text}"
    if "CLUSTERDOWN" in text:
        return f"cluster is down: {text}"
    if isinstance(exc, rex.TimeoutError):
        return f"Redis timed out: {text}"
    if isinstance(exc, rex.ConnectionError):
        return f"cannot connect to Redis: {text}"
    if isinstance(exc, rex.ResponseError):
        return f"Redis refused a command: {text}"
    return f"Redis error: {text}"


def _client_kwargs() -> dict[str, Any]:
    return {"socket_connect_timeout": CONNECT_TIMEOUT, "socket_timeout": SOCKET_TIMEOUT,
            "retry": None, "protocol": 2}


@dataclasses.dataclass
class Link:
    """A connection to the Redis node that holds one hash-tagged key (and the rest of the slot)."""

    url: str
    key: str
    node: redis.Redis
    cluster: RedisCluster | None = None

    @classmethod
    def open(cls, url: str, key: str, auth: RedisAuth | None = None) -> "Link":
        """Connect; `auth` (password, CA) goes to redis-py as arguments, never into the URL."""
        check_url(url)
        secrets = auth.client_kwargs() if auth else {}
        try:
            probe = redis.Redis.from_url(url, **_client_kwargs(), **secrets)
            try:
                info = probe.info("cluster")
            except BaseException:
                probe.close()
                raise
            if not info.get("cluster_enabled"):
                return cls(url, key, probe)
            probe.close()
            cluster = RedisCluster.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT,
                                            socket_timeout=SOCKET_TIMEOUT, protocol=2, **secrets)
            link = cls(url, key, probe, cluster)
            link.node = link._node_for_key()
            return link
        except (rex.RedisError, OSError, ValueError, IndexError) as exc:
            raise RedisProblem(describe(exc)) from None

    def _node_for_key(self) -> redis.Redis:
        assert self.cluster is not None
        node = self.cluster.get_node_from_key(self.key)
        if node is None:
            raise RedisProblem(f"cluster is down: no master serves the slot of {self.key}")
        client = self.cluster.get_redis_connection(node)
        if client is None:
            raise RedisProblem(f"cluster is down: no connection to {node.name}")
        return client

    def refresh(self) -> None:
        """Reconnect after a failure: a standalone server's pool reconnects by itself; a Cluster's
        topology is read again from any node that answers (a failover moved the slot)."""
        try:
            self.node.connection_pool.disconnect()
            if self.cluster is not None:
                self.cluster.nodes_manager.initialize()
                self.node = self._node_for_key()
            self.node.ping()
        except (rex.RedisError, OSError, IndexError, KeyError) as exc:
            raise RedisProblem(describe(exc)) from None

    @property
    def where(self) -> str:
        kwargs = self.node.connection_pool.connection_kwargs
        return f"{kwargs.get('host')}:{kwargs.get('port')}"

    def close(self) -> None:
        try:
            self.node.close()
            if self.cluster is not None:
                self.cluster.close()
        except (rex.RedisError, OSError):
            pass


class BulkPipe:
    """A connection of its own for the exporter's batches: `send` a batch of packed commands in one
    write, `receive` its replies later, so Redis works on one batch while we read and pack the next
    (at most two batches in flight).

    redis-py connects and authenticates it (the pool's handshake: AUTH, SELECT, ...); the replies of
    the batches are read straight from its socket by a `hiredis.Reader` of our own, which parses a
    whole buffer of XADD replies in C (redis-py's per-reply `read_response` costs more than the
    XADD itself). Any socket error drops the connection: what Redis applied is then unknown and
    the caller re-reads the stream's last ID.
    """

    def __init__(self, client: redis.Redis) -> None:
        self._pool = client.connection_pool
        self._conn = self._pool.get_connection()
        self._reader = hiredis.Reader(replyError=rex.ResponseError)
        self._buf = bytearray(1 << 18)
        self.last_reply: Any = None

    def send(self, payload: bytes) -> None:
        try:
            self._conn.send_packed_command([payload], check_health=False)
        except BaseException:
            self.close()
            raise

    def receive(self, count: int) -> list[Exception]:
        """Read `count` replies; the error replies among them (empty: all were applied)."""
        reader, buf = self._reader, self._buf
        gets = reader.gets
        errors: list[Exception] = []
        sock = self._conn._sock  # redis-py's connected socket: the handshake replies are consumed
        try:
            if sock is None:
                raise rex.ConnectionError("connection closed")
            done = 0
            while done < count:
                reply = gets()
                if reply is False:
                    n = sock.recv_into(buf)
                    if n == 0:
                        raise rex.ConnectionError("Redis closed the connection")
                    reader.feed(buf, 0, n)
                    continue
                if isinstance(reply, Exception):
                    errors.append(reply)
                done += 1
            self.last_reply = reply
        except TimeoutError:
            self.close()
            raise rex.TimeoutError(f"no reply from Redis within {SOCKET_TIMEOUT:g} s") from None
        except OSError as exc:
            self.close()
            raise rex.ConnectionError(f"connection to Redis lost: {exc}") from None
        except BaseException:
            self.close()
            raise
        return errors

    def close(self) -> None:
        if self._conn is None:
            return
        self._conn.disconnect()
        self._pool.release(self._conn)
        self._conn = None
        self._reader = hiredis.Reader(replyError=rex.ResponseError)


def wait_command(replicas: int, timeout_ms: int) -> bytes:
    """WAIT numreplicas timeout, packed: blocks our connection until the replicas have every
    write it sent before (its reply is how many did)."""
    return b"*3\r\n$4\r\nWAIT\r\n" + bulk(b"%d" % replicas) + bulk(b"%d" % timeout_ms)


def bulk(data: bytes) -> bytes:
    """One RESP bulk string."""
    return b"$%d\r\n%s\r\n" % (len(data), data)
