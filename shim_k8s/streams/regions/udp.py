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
from collections.abc import Callable

import orjson
import trio

from .board import Notification

log = logging.getLogger("ykshm.cr-operator")

PE_NOTIFICATION_PORT = 10001
"""The UDP port of a real Streams PE's consistent-region listener."""

AddressBook = Callable[[int], "tuple[str, int] | None"]
"""PE id -> (host, port) to send its notifications to, or None (the PE only polls)."""


def datagram(region: int, notification: Notification) -> bytes:
    return orjson.dumps({str(region): notification.as_json()})


class UdpNotifier:
    """One unconnected UDP socket for every PE of the job; `close()` when the operator stops."""

    def __init__(self, addresses: AddressBook) -> None:
        self._addresses = addresses
        self._sock = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    async def send(self, pe: int, region: int, notification: Notification) -> bool:
        """Send to the PE if it has an address; whether a datagram went out."""
        address = self._addresses(pe)
        if address is None:
            return False
        try:
            await self._sock.sendto(datagram(region, notification), address)
        except OSError as exc:
            log.warning("cr-operator: notification to PE %s at %s not sent: %s", pe, address, exc)
            return False
        return True

    def close(self) -> None:
        self._sock.close()
