"""The admission webhook's server against a flood (security review 2, N4).

The review's reproduction: 12 TLS connections, each sending a 16 MiB body one byte short, took
`ykshm admission` from 54 MB to 254 MB of RSS, which it kept; about 28 of them OOM-kill it under
the deployment's 500Mi, and while it restarts `failurePolicy: Ignore` admits a forged `user.info`
(that half is replayed against `ykshm run` in test_admission_forgery.py). Here the real webhook
(`ykshm admission` on 127.0.0.1, TLS from its own CA, registered with a sim-cluster) is flooded from
other loopback addresses while kube-apiserver's stand-in (a client on 127.0.0.1) keeps being answered.
"""

from __future__ import annotations

import socket
import ssl
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shim"))

from admission_harness import AdmissionWorld, pod, review  # noqa: E402

from tools.harness import wait_for  # noqa: E402

from shim_k8s.admission.review import MAX_BODY, PEER_BUDGET  # noqa: E402

PER_PEER = 8
ATTACKERS = iter(f"127.0.0.{i}" for i in range(2, 250))
"""One source address per attack: the server counts a connection for its address until it has
seen it close, so each test floods from an address of its own."""


@pytest.fixture(scope="module")
def world():
    w = AdmissionWorld(f"t-admlim-{uuid.uuid4().hex[:8]}")
    try:
        yield w.start("--max-connections-per-peer", str(PER_PEER), "--body-timeout", "5")
    finally:
        w.close()


def _connect(world, source: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", world.port), timeout=10, source_address=(source, 0))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    return sock


def _closed_by_server(sock: socket.socket, deadline: float) -> bool:
    """Whether the server ends this (silent) connection before `deadline`: EOF or a reset."""
    sock.settimeout(max(0.01, deadline - time.monotonic()))
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except (TimeoutError, socket.timeout):
        return False


def test_connections_over_the_cap_are_refused_and_a_good_request_still_works(world):
    attacker = next(ATTACKERS)
    held = [_connect(world, attacker) for _ in range(PER_PEER * 4)]
    try:
        # the kube-apiserver stand-in (another address) is answered while the flood is held
        assert world.admit(review(pod()))["allowed"] is True
        deadline = time.monotonic() + 5
        closed = sum(_closed_by_server(s, deadline) for s in held[PER_PEER:])
        assert closed == PER_PEER * 3          # every connection over the cap, none under it
        assert not any(_closed_by_server(s, time.monotonic() + 0.2) for s in held[:PER_PEER])
    finally:
        for s in held:
            s.close()


def _peak_rss(pid: int) -> int:
    """VmHWM: the most resident memory the process ever had, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def _stalled_body(world, source: str, length: int, results: list) -> None:
    """One TLS request declaring `length` bytes: the answer to its head alone if one comes (a
    server that refuses the size unread), else the answer after all but the last byte was sent
    (the review's attack: the server holds what it read until its deadline)."""
    try:
        with world.verify().wrap_socket(_connect(world, source), server_hostname="127.0.0.1") as tls:
            tls.sendall((f"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                         f"\r\nContent-Length: {length}\r\n\r\n").encode())
            tls.settimeout(2)
            try:
                results.append(tls.recv(64)[:12])
                return
            except (TimeoutError, socket.timeout):
                pass
            tls.settimeout(30)
            tls.sendall(b" " * (length - 1))
            results.append(tls.recv(64)[:12])
    except (OSError, ssl.SSLError) as exc:
        results.append(exc)


def _flood(world, length: int, connections: int) -> list:
    results: list = []
    attacker = next(ATTACKERS)
    threads = [threading.Thread(target=_stalled_body, args=(world, attacker, length, results))
               for _ in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def test_a_body_over_the_cap_is_413_unread_and_memory_stays_bounded(world):
    """The review's 16 MiB bodies one byte short: refused on their Content-Length, unread."""
    assert world.proc is not None
    before = _peak_rss(world.proc.pid)
    results = _flood(world, 16 << 20, PER_PEER)
    assert [r[:12] if isinstance(r, bytes) else repr(r) for r in results] == [b"HTTP/1.1 413"] * PER_PEER
    assert _peak_rss(world.proc.pid) - before < 40 * 2**20       # the old server: +8 x 16 MiB
    big = b'{"request": {"uid": "' + b"x" * MAX_BODY + b'"}}'   # no Content-Length: read, then 413
    resp = world.post("/mutate", big)
    assert (resp.status_code, resp.text) == (413, f"request body larger than {MAX_BODY} bytes\n")
    assert world.admit(review(pod()))["allowed"] is True


def test_stalled_bodies_under_the_cap_neither_hold_memory_nor_hold_up_kube_apiserver(world):
    """Bodies just under the cap that never end: one address gets PEER_BUDGET's worth read at once
    (the rest a 503 at once), each let go at the body deadline (--body-timeout) with a 408, while
    kube-apiserver's stand-in (another address) is answered all along."""
    assert world.proc is not None
    before = _peak_rss(world.proc.pid)
    results: list = []
    attacker = next(ATTACKERS)
    threads = [threading.Thread(target=_stalled_body, args=(world, attacker, MAX_BODY, results))
               for _ in range(PER_PEER)]
    for t in threads:
        t.start()
    held = PEER_BUDGET // MAX_BODY
    # the budget is taken once the others were refused: then kube-apiserver's stand-in is answered
    # while the held bodies still stall (none of them has had its 408 yet)
    wait_for(lambda: results.count(b"HTTP/1.1 503") == PER_PEER - held, 20, "the refusals")
    assert world.admit(review(pod()))["allowed"] is True
    assert not [r for r in results if r != b"HTTP/1.1 503"]
    for t in threads:
        t.join(30)
    assert sorted(r[:12] for r in results) == [b"HTTP/1.1 408"] * held + [b"HTTP/1.1 503"] * (PER_PEER - held)
    assert _peak_rss(world.proc.pid) - before < PEER_BUDGET + 24 * 2**20
