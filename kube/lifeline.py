"""The leader's lifeline: proof that a Lease holder's process has ended, so a standby takes over
in a fraction of a second instead of a lease duration.

Why
---
client-go lets a standby take a Lease only once its record has not changed for a lease duration
(15 s by default): silence cannot tell a dead leader from a paused or partitioned one. One case
can be told apart for sure: the holder's process has exited. Its kernel then closes every socket
the process had, and a peer connected to one of them reads the end of the stream at once.

The protocol
------------
- A candidate binds a TCP listener when it starts (`--leader-elect-lifeline HOST[:PORT]`) and
  puts `HOST:PORT/NONCE` into every Lease record it writes, as the annotation `ANNOTATION`
  (NONCE: random, new for each process, so a holder restarted under the same identity is not
  taken for its dead predecessor).
- While it leads, each connection is greeted with one line, `ykshm-lifeline IDENTITY NONCE\\n`,
  then held open, silent, until the process ends. A peer says nothing: one that sends a byte is
  closed (it costs the leader no reading), and a lifeline that sends more than its greeting
  proves nothing to a standby. While it does not lead, a connection is closed
  at once, ungreeted. At most `MAX_PEERS` are held at once; more are closed ungreeted.
- A standby that sees another's record with a lifeline connects to it. A connection that greeted
  as that holder and nonce and then ends (EOF or reset) proves that the holder's process is gone:
  the standby may take the Lease at once, as if it had expired (`Proof`). Anything else (refused,
  silent, another identity, a time-out) proves nothing, and client-go's rule applies.

Why it stays safe
-----------------
A SIGSTOP or a partition closes nothing: they are still waited out by lease duration, and the
leader's own fence (renew deadline) stops it first. A wrong proof (a middlebox or an attacker
ending the standby's connection while the holder lives) only lets the standby take the Lease
early; the holder sees its Lease change on its own watch and stops writing at that moment
(kube.leaderelection, "the leader's watch"), and the API server binds each pod once. A peer
that fills the listener gets no greeting once `MAX_PEERS` are held: it can delay a takeover to
client-go's timing, never cause one.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import socket

import trio

log = logging.getLogger("ykshm.lifeline")

ANNOTATION = "ykshm.io/leader-lifeline"
"""On the Lease: `HOST:PORT/NONCE` of the holder's lifeline listener."""

MAX_PEERS = 16
"""Connections a leader holds at once (its standbys; a hostile peer gets no more than these)."""

GREETING = b"ykshm-lifeline"


@dataclasses.dataclass(frozen=True)
class Target:
    """Where a holder's lifeline is, and which holder and process it must greet as."""

    holder: str
    host: str
    port: int
    nonce: str

    def greeting(self) -> bytes:
        return b"%s %s %s\n" % (GREETING, self.holder.encode(), self.nonce.encode())


def parse_target(holder: str, annotation: object) -> Target | None:
    """The lifeline a record names (None when it names none or a malformed one)."""
    if not holder or not isinstance(annotation, str):
        return None
    address, _, nonce = annotation.partition("/")
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or not nonce.isalnum():
        return None
    return Target(holder, host, int(port), nonce)


def parse_bind(text: str) -> tuple[str, int]:
    """`HOST[:PORT]` or `[V6][:PORT]` (no port or 0: any free port) -> (host, port); ValueError
    with one line."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":") if rest.startswith(":") else ("0" if not rest else "x")
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, "0"
    if not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{text!r} is not HOST[:PORT]")
    return host, int(port)


class Listener:
    """The candidate's side: the bound socket (bound in the constructor, so a bad address is an
    error at start) and `serve`, which greets while `leading()` says so."""

    def __init__(self, host: str, port: int) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._sock.bind((host, port))
            self._sock.listen(MAX_PEERS)
        except OSError:
            self._sock.close()
            raise
        self.host = host
        self.port = self._sock.getsockname()[1]
        self.nonce = secrets.token_hex(8)
        self.held = 0

    def annotation(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}/{self.nonce}"

    async def serve(self, identity: str, leading, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Accept for ever: greet and hold while `leading()`, else close at once."""
        listener = trio.SocketListener(trio.socket.from_stdlib_socket(self._sock))
        greeting = Target(identity, self.host, self.port, self.nonce).greeting()
        async with listener, trio.open_nursery() as nursery:
            task_status.started()
            while True:
                stream = await listener.accept()
                if not leading() or self.held >= MAX_PEERS:
                    await stream.aclose()
                    continue
                nursery.start_soon(self._hold, stream, greeting)

    async def _hold(self, stream: trio.SocketStream, greeting: bytes) -> None:
        self.held += 1
        try:
            async with stream:
                await stream.send_all(greeting)
                await stream.receive_some(1)   # a standby says nothing: its end or a byte ends it
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            self.held -= 1


async def holder_ended(target: Target, timeout: float) -> bool:
    """Connect to `target`'s lifeline and wait: True when it greeted as `target` and then ended
    (the holder's process is gone); False as soon as it proves nothing (no connection or greeting
    within `timeout`, another greeting). Cancel it to stop following."""
    want = target.greeting()
    stream = None
    with trio.move_on_after(timeout):
        try:
            stream = await trio.open_tcp_stream(target.host, target.port)
        except OSError:
            return False
    if stream is None:
        return False
    async with stream:
        got = b""
        try:
            with trio.move_on_after(timeout):
                while len(got) < len(want) and (chunk := await stream.receive_some(len(want) - len(got))):
                    got += chunk
            if got != want or await stream.receive_some(1):
                return False                   # more than the greeting: not a lifeline
        except (trio.BrokenResourceError, OSError):
            if got != want:
                return False
            # a reset after the greeting: the holder's kernel ended the connection too
    log.info("lifeline of %s ended: its process is gone", target.holder)
    return True
