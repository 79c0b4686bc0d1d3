"""The supervisor of `ykshm run`: starts, watches, restarts and stops its children.

Start-up fails loudly and at once. Before the banner nothing is restarted: a child that exits
while the others come up ends the run with that child's own error line and exit 1 (a restart
loop against, say, a sim-cluster that refused its flags only hid the reason in the log for two
minutes). Every wait of the start-up goes through `check()`, which also notices Ctrl-C or
SIGTERM (the signal handler only sets `stopping`): the run then stops what it started and exits,
whichever step it was in.

After the banner a child that exits on its own is restarted with backoff (0.5 s doubling to 10 s,
reset after the child has stayed up 30 s), as hypercorn's `run.py` and systemd's
`Restart=on-failure` do.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import time
from pathlib import Path
from subprocess import DEVNULL, Popen

from common.backoff import Backoff
from common.cliutil import Failure

GRACE_SECONDS = 5.0


class StartInterrupted(Exception):
    """Ctrl-C or SIGTERM arrived before the banner: stop everything, no error line."""


@dataclasses.dataclass
class Child:
    """One supervised role: how to start it, its process, and its restart bookkeeping."""

    role: str
    argv: list[str]
    process: Popen | None = None
    started_at: float = 0.0
    backoff: Backoff = dataclasses.field(default_factory=lambda: Backoff(0.5, 10.0))
    restart_at: float = 0.0
    restarts: int = 0

    def start(self, log) -> None:
        """stderr (the role's log lines) into the log; stdout, where sim-cluster announces its port
        to a human running it by hand, is not a log line."""
        self.process = Popen(self.argv, stdin=DEVNULL, stdout=DEVNULL, stderr=log, start_new_session=True)
        self.started_at = time.monotonic()

    def exited(self) -> int | None:
        return None if self.process is None else self.process.poll()


def error_line(log_path: Path, since: int, role: str | None = None) -> str:
    """What `role` last said in the log written since offset `since`: its `ykshm ROLE: error:`
    line if there is one, else its last record, else (or with no role) the log's last line."""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(since)
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return "no output"
    lines = [line.strip() for line in lines if line.strip()]
    for wanted in ((f"ykshm {role}: error:", f" {role}[") if role else ()):
        for line in reversed(lines):
            if wanted in line:
                return line
    return lines[-1] if lines else "no output"


class Supervisor:
    """The children of one embedded instance and the log they share."""

    def __init__(self, children: list[Child], log_path: Path) -> None:
        self.children = children
        self.log = None
        self.log_path = log_path
        self.log_start = 0
        self.stopping = False

    def open_log(self, headline: str) -> None:
        """Append to the instance's log (kept across runs) after a line that says which run
        begins here; a failed start reads its children's lines from there on."""
        from common.runtimedir import open_private_append

        self.log = open(open_private_append(self.log_path), "ab", buffering=0)
        self.log.write(f"==== {headline} ====\n".encode())
        self.log_start = self.log.tell()

    def close_log(self) -> None:
        if self.log is not None:
            self.log.close()

    def check(self) -> None:
        """Raise if the start-up cannot go on: StartInterrupted on a signal, Failure (exit 1, the
        child's own error line) when a child has exited."""
        if self.stopping:
            raise StartInterrupted
        for child in self.children:
            code = child.exited()
            if code is not None:
                line = error_line(self.log_path, self.log_start, child.role)
                raise Failure(f"{child.role} exited with {code} during start: {line} "
                              f"(log: {self.log_path})")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
        self.check()

    def wait_tcp(self, port: int, deadline: float, what: str) -> None:
        """Until 127.0.0.1:port accepts a connection; Failure with the log's last line at the deadline."""
        while True:
            self.check()
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return
            except OSError:
                pass
            if time.monotonic() >= deadline:
                raise Failure(f"{what} did not listen on 127.0.0.1:{port} in time "
                              f"(last log line: {error_line(self.log_path, self.log_start)})")
            self.sleep(0.1)

    def start_all(self, first_up=lambda: None) -> None:
        """Start the first child (sim-cluster), run `first_up()` (it waits for the API through
        `check()`), then the rest: the roles that call the API at start then find it listening."""
        for i, child in enumerate(self.children):
            self.check()
            child.start(self.log)
            if i == 0:
                first_up()

    def tick(self) -> list[str]:
        """After the banner: restart children that exited on their own; what happened, for the log."""
        notes = []
        now = time.monotonic()
        for child in self.children:
            code = child.exited()
            if code is None:
                if now - child.started_at > 30.0:
                    child.backoff.reset()
                continue
            if child.restart_at == 0.0:
                delay = child.backoff.next()
                child.restart_at = now + delay
                notes.append(f"{child.role} exited with {code}; restarting in {delay:.1f} s")
            elif now >= child.restart_at:
                child.restart_at = 0.0
                child.restarts += 1
                child.start(self.log)
        return notes

    def stop_all(self) -> None:
        """SIGTERM to each child's process group in reverse start order, a grace period, SIGKILL."""
        for child in reversed(self.children):
            if child.process is not None and child.exited() is None:
                try:
                    os.killpg(child.process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + GRACE_SECONDS
        for child in reversed(self.children):
            if child.process is None:
                continue
            try:
                child.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001 - any failure to stop politely ends in SIGKILL
                try:
                    os.killpg(child.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                child.process.wait()
