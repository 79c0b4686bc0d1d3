"""Harness of the export tests: real redis-servers (bench.redis_server), rings, `ykshm export`
subprocesses stopped by pid, and the comparison "stream == ring, id for id"."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import redis

from export.keys import Keys, parse_stream_id
from tools.harness import wait_for as harness_wait_for

ROOT = Path(__file__).resolve().parents[2]


def wait_for(ok, timeout: float = 20.0, what: str = "condition"):
    return harness_wait_for(ok, timeout, what, interval=0.02)


class ExportProcess:
    """A running `ykshm export`; `stop()` (SIGTERM) or `kill()` (SIGKILL) by pid."""

    def __init__(self, name: str, url: str | None, *extra: str,
                 env: dict[str, str] | None = None) -> None:
        """url None: none on the command line (the exporter reads $YKSHM_REDIS_URL)."""
        self.name = name
        self.log_path = f"/tmp/ykshm-export-test-{name}-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tools.cli", "export", *(("--redis", url) if url else ()),
             "--name", name, "--nice", "0", *extra],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=self._log, env={**os.environ, **(env or {})})

    def log(self) -> str:
        return Path(self.log_path).read_text(errors="replace")

    def _end(self, sig: int) -> int:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
        try:
            return self.proc.wait(10)
        finally:
            self._log.close()

    def stop(self) -> int:
        return self._end(signal.SIGTERM)

    def kill(self) -> int:
        return self._end(signal.SIGKILL)


def stream_entries(client: redis.Redis, name: str) -> list[tuple[tuple[int, int], dict]]:
    """Every entry of the instance's stream: ((generation, event id), fields)."""
    key = Keys.for_instance(name).events
    out, start = [], "-"
    while True:
        batch = client.xrange(key, min=start, count=5000)
        if not batch:
            return out
        for sid, fields in batch:
            out.append((parse_stream_id(sid), fields))
        last = parse_stream_id(batch[-1][0])
        start = f"{last[0]}-{last[1] + 1}"


def ring_json(reader) -> dict[int, bytes]:
    """id -> the JSON bytes the ring renders for that event (every retained event)."""
    bounds = reader.bounds()
    if bounds is None:
        return {}
    got = reader.cursor(bounds[0]).poll_json(bounds[1] - bounds[0] + 1)
    lines = got.lines.split(b"\n")[:-1]
    return {orjson.loads(line)["id"]: line for line in lines}


def events_of(entries, generation: int) -> dict[int, bytes]:
    return {sid[1]: fields[b"j"] for sid, fields in entries if sid[0] == generation and b"j" in fields}
