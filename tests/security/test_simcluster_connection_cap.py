"""sim-cluster caps connections as SECURITY.md says (review 2026-11-28, N15).

The review held 1,500 idle connections from 127.0.0.9 to sim-cluster: all accepted, its fds 53 ->
1,553. Here a real sim-cluster runs with small caps (64 per address, 160 in all) so the attack is
quick: one address holding its 64 gets a 503 for the next and the admin is still answered; when
the 64 close, that address is served again; with the whole server full of idle connections from
several addresses, the admin is still answered (the longest idle one makes room).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.security.test_web_tls_security import _answer as read_answer
from tests.simcluster.test_simcluster import start_cluster, stop_cluster
from tests.simcluster.test_simcluster_clients import eventually

PER_PEER, TOTAL = 64, 160
GET = b"GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    proc, url = start_cluster("--no-process-pods", "--nodes", "1", "--max-connections-per-peer", str(PER_PEER),
                              "--max-connections", str(TOTAL))
    try:
        yield int(url.rsplit(":", 1)[1])
    finally:
        stop_cluster(proc)


def connect(port: int, source: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(5)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def ask(sock: socket.socket) -> bytes:
    """One request on a keep-alive connection: the whole answer (b"" when closed unanswered)."""
    try:
        sock.sendall(GET)
    except OSError:
        return b""
    return read_answer(sock)


def held(port: int, source: str, count: int) -> list[socket.socket]:
    """`count` connections from `source`, each answered once, then left idle."""
    socks = []
    for _ in range(count):
        sock = connect(port, source)
        assert ask(sock).startswith(b"HTTP/1.1 200 ")
        socks.append(sock)
    return socks


def close_all(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()


def test_one_address_over_its_cap_is_refused_and_the_admin_still_answered(port: int) -> None:
    flood = held(port, "127.0.0.9", PER_PEER)
    try:
        extra = connect(port, "127.0.0.9")
        answer = ask(extra)
        extra.close()
        assert answer.startswith(b"HTTP/1.1 503 ") and b'"code":503' in answer, answer[:200]
        admin = connect(port, "127.0.0.1")
        assert ask(admin).startswith(b"HTTP/1.1 200 ")
        admin.close()
    finally:
        close_all(flood)

    def served_again() -> bool:
        sock = connect(port, "127.0.0.9")
        try:
            return ask(sock).startswith(b"HTTP/1.1 200 ")
        finally:
            sock.close()

    assert eventually(served_again, timeout=5)


def test_a_full_server_makes_room_for_the_admin(port: int) -> None:
    flood: list[socket.socket] = []
    try:
        for source, count in (("127.0.0.10", PER_PEER), ("127.0.0.11", PER_PEER), ("127.0.0.12", TOTAL - 2 * PER_PEER)):
            flood += held(port, source, count)
        admin = connect(port, "127.0.0.1")
        assert ask(admin).startswith(b"HTTP/1.1 200 ")
        admin.close()
        assert flood[0].recv(1) == b""  # the longest idle one was closed to make room
    finally:
        close_all(flood)
