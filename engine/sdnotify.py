"""A tiny sd_notify(3): datagrams to $NOTIFY_SOCKET (path or '@' abstract namespace).

`Notifier()` reads NOTIFY_SOCKET and WATCHDOG_USEC once; without NOTIFY_SOCKET every call is a
no-op returning False. `ready()`, `status(text)`, `stopping()` and `watchdog()` send
READY=1, STATUS=..., STOPPING=1 and WATCHDOG=1. `watchdog()` is rate-limited to a quarter of
WATCHDOG_USEC (or once a second without it), so calling it every cycle costs nothing; the engine
calls it from inside the scheduling loop, so a hung cycle stops the pings and systemd restarts it.
"""

from __future__ import annotations

import os
import socket
import time


def notify(state: str, path: str | None = None) -> bool:
    """Send one notification; False if there is no NOTIFY_SOCKET or sending failed."""
    path = path if path is not None else os.environ.get("NOTIFY_SOCKET", "")
    if not path:
        return False
    address = "\0" + path[1:] if path.startswith("@") else path
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(state.encode("utf-8"))
        return True
    except OSError:
        return False


class Notifier:
    def __init__(self, path: str | None = None) -> None:
        self.path = path if path is not None else os.environ.get("NOTIFY_SOCKET", "")
        usec = os.environ.get("WATCHDOG_USEC", "")
        try:
            self.watchdog_interval = int(usec) / 4e6 if usec else 1.0
        except ValueError:
            self.watchdog_interval = 1.0
        self._last_watchdog = 0.0

    @property
    def enabled(self) -> bool:
        return bool(self.path)

    def send(self, state: str) -> bool:
        return notify(state, self.path) if self.path else False

    def ready(self, status: str = "") -> bool:
        return self.send("READY=1" + (f"\nSTATUS={status}" if status else ""))

    def status(self, text: str) -> bool:
        return self.send(f"STATUS={text}")

    def stopping(self) -> bool:
        return self.send("STOPPING=1")

    def watchdog(self) -> bool:
        if not self.path:
            return False
        now = time.monotonic()
        if now - self._last_watchdog < self.watchdog_interval:
            return False
        self._last_watchdog = now
        return self.send("WATCHDOG=1")
