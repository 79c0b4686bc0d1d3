"""Each notification as one UDP datagram to the PE's address, when the PE has one.

OpenStreams sends `{"<region>": {"type", "message"}}` (JSON) to `<job>-<peId>.<namespace>` on port
10001 (STREAMS_PE_CONSISENT_REGION_PORT) and never waits for an answer: loosely coupled, so the
operator holds no connection per PE. A datagram can be lost; the board (board.py) keeps the same
notification for polling. Who has which address is the caller's knowledge (`AddressBook`: the lead
maps a PE id to its pod IP and port; tests use 127.0.0.1). A send error is logged, never raised.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Iterable

import orjson

from .board import Notification

log = logging.getLogger("ykshm.cr-operator")

PE_NOTIFICATION_PORT = 10001
"""The UDP port of a real Streams PE's consistent-region listener."""

AddressBook = Callable[[int], "tuple[str, int] | None"]
"""PE id -> (host, port) to send its notifications to, or None (the PE only polls)."""


def datagram(region: int, notification: Notification) -> bytes:
    return orjson.dumps({str(region): notification.as_json()})


class UdpNotifier:
    """One unconnected, non-blocking UDP socket for every PE of the job; `close()` at the end.

    Addresses must be IP literals (pod IPs): `sendto` on a non-blocking socket never waits, so a
    region of 100 PEs is notified in 100 syscalls with no scheduling in between; a datagram the
    kernel cannot queue right now is dropped (the board still has it)."""

    def __init__(self, addresses: AddressBook) -> None:
        self._addresses = addresses
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.setblocking(False)

    def send(self, pes: Iterable[int], region: int, notification: Notification) -> int:
        """Send to every PE that has an address; how many datagrams went out."""
        data = datagram(region, notification)
        sent = 0
        for pe in pes:
            address = self._addresses(pe)
            if address is None:
                continue
            try:
                self._sock.sendto(data, address)
            except OSError as exc:
                log.warning("cr-operator: notification to PE %s at %s not sent: %s", pe, address, exc)
                continue
            sent += 1
        return sent

    def close(self) -> None:
        self._sock.close()
