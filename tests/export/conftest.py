"""Fixtures of the export tests: a real redis-server per test, stopped by pid."""

from __future__ import annotations

import pytest

from bench.redis_server import RedisServer


@pytest.fixture
def redis_server():
    server = RedisServer()
    yield server
    server.close()


@pytest.fixture
def durable_redis():
    """A redis-server with an fsync'ed AOF: a stop and start keeps the stream."""
    server = RedisServer(persist=True)
    yield server
    server.close()
