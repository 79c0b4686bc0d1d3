"""Connecting to Redis (standalone or Cluster) and talking to the node that holds our keys.

`Link.open(url)` connects, authenticates and finds out whether the server is a Cluster node; in a
Cluster it asks for the master of our hash tag's slot. Everything the exporter sends goes to that
one node (all our keys share the slot), through `node`, a plain `redis.Redis`. After any failure
the exporter calls `refresh()`, which re-reads the Cluster's topology from whichever known node
still answers (so after a failover it finds the promoted replica).

`send_pipelined` writes a batch of already-packed commands in one `sendall` and reads the replies
with the client's (hiredis) parser: one round trip per batch, no per-command Python objects.

Errors: every failure becomes `RedisProblem(reason)`, a one-line text a user can act on ("connection
refused by 127.0.0.1:6390", "authentication refused: WRONGPASS ...", "cluster is down"); the
caller decides between exit 2 (start-up) and a retry (running). The URL never appears with its
password (`redact`).
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from typing import Any

import redis
import redis.exceptions as rex
from redis.cluster import RedisCluster

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
    def open(cls, url: str, key: str) -> "Link":
        check_url(url)
        try:
            probe = redis.Redis.from_url(url, **_client_kwargs())
            try:
                info = probe.info("cluster")
            except BaseException:
                probe.close()
                raise
            if not info.get("cluster_enabled"):
                return cls(url, key, probe)
            probe.close()
            cluster = RedisCluster.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT,
                                            socket_timeout=SOCKET_TIMEOUT, protocol=2)
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


def send_pipelined(client: redis.Redis, payload: bytes, count: int) -> list[Exception | None]:
    """Send `count` packed commands in one write; per command None (ok) or its ResponseError.

    A connection or timeout error raises (the connection is dropped): nothing is known about
    which commands Redis applied, so the caller re-reads the stream's last ID.
    """
    pool = client.connection_pool
    conn = pool.get_connection()
    try:
        conn.send_packed_command([payload], check_health=False)
        results: list[Exception | None] = []
        for _ in range(count):
            try:
                conn.read_response(disable_decoding=True)
                results.append(None)
            except rex.ResponseError as exc:
                results.append(exc)
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)
    return results


def bulk(data: bytes) -> bytes:
    """One RESP bulk string."""
    return b"$%d\r\n%s\r\n" % (len(data), data)
