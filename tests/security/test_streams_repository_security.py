"""The bundle repository is a trust boundary (streams/repository.py): anyone who reaches its port
may read `apps` as the unmodified runtime does (no password), nobody without the writer's password
may change it or the server. The attacker here is an anonymous client on the port, with the real
redis-cli and redis-py."""

from __future__ import annotations

import os
import subprocess

import pytest
import redis
import trio

from streams import appgen, repository

SERVER = repository.find_server(None)
CLI = os.path.join(os.path.dirname(SERVER), "redis-cli")
PASSWORD = "writer-password-0123456789abcdef"


async def _repository(nursery: trio.Nursery) -> repository.Repository:
    config = repository.RepositoryConfig(server=SERVER, host="127.0.0.1", port=0, password=PASSWORD)
    return await nursery.start(repository.run, config)


def _anonymous(port: int, *args: str, stdin: bytes | None = None) -> bytes:
    done = subprocess.run([CLI, "-h", "127.0.0.1", "-p", str(port), *args], input=stdin, capture_output=True,
                          timeout=10)
    return done.stdout + done.stderr


ATTACKS = [("FLUSHALL",), ("CONFIG", "SET", "dir", "/tmp"), ("KEYS", "*"), ("MODULE", "LOAD", "/tmp/evil.so"),
           ("ACL", "SETUSER", "default", "+@all"), ("EVAL", "redis.call('hset','apps','a.sab','x')", "0"),
           ("SET", "other", "x"), ("HGET", "other", "a.sab"), ("HDEL", "apps", "a.sab"), ("DEBUG", "SLEEP", "0"),
           ("SLAVEOF", "127.0.0.1", "1"), ("SCAN", "0"), ("SHUTDOWN", "NOSAVE"), ("CLIENT", "LIST")]


async def test_an_anonymous_client_cannot_forge_a_bundle_nor_touch_the_server_but_reads_as_the_runtime():
    real, forged = appgen.make_sab(appgen.pipeline_adl(operators=2)), b"PK forged bundle"
    async with trio.open_nursery() as nursery:
        repo = await _repository(nursery)
        await repo.store("a.sab", real)
        port = repo.port

        # the runtime's read needs no password
        assert await trio.to_thread.run_sync(_anonymous, port, "--raw", "HGET", "apps", "a.sab") == real + b"\n"
        # an anonymous HSET of a forged bundle (OpenStreams' streams-repo-set, no password): refused
        said = await trio.to_thread.run_sync(lambda: _anonymous(port, "-x", "HSET", "apps", "a.sab", stdin=forged))
        assert b"NOPERM" in said
        for attack in ATTACKS:
            said = await trio.to_thread.run_sync(_anonymous, port, *attack)
            assert b"NOPERM" in said, (attack, said)
        with redis.Redis(host="127.0.0.1", port=port, socket_timeout=5) as anonymous:
            with pytest.raises(redis.exceptions.NoPermissionError):
                anonymous.hset("apps", "a.sab", forged)
            with pytest.raises(redis.exceptions.RedisError):      # no way to become the writer
                anonymous.execute_command("AUTH", repository.WRITER, "guess")
        assert await repo.load("a.sab") == real                   # nothing changed
        assert repo.pid and os.path.exists(f"/proc/{repo.pid}")   # nor stopped
        nursery.cancel_scope.cancel()


async def test_the_writers_password_is_in_no_command_line_nor_file_of_the_server():
    async with trio.open_nursery() as nursery:
        repo = await _repository(nursery)
        with open(f"/proc/{repo.pid}/cmdline", "rb") as f:
            argv = f.read()
        assert PASSWORD.encode() not in argv                      # the configuration came on stdin
        workdir = os.readlink(f"/proc/{repo.pid}/cwd")
        for root, _dirs, files in os.walk(workdir):
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    assert PASSWORD.encode() not in f.read()
        nursery.cancel_scope.cancel()
