"""Container output of process pods and the `pods/{name}/log` sub-resource (`kubectl logs`).

Each run of a container writes stdout and stderr, interleaved as a container runtime does, to
`logs/CONTAINER-RESTARTCOUNT.log` in the pod's directory; the kubelet keeps the current and the
previous run. `GET .../pods/NAME/log` takes `container` (needed when the pod has several), `previous`,
`tailLines`, `limitBytes` and
`follow` (a chunked stream that ends when that run of the container ends). Errors are the
apiserver's 400s: `a container name must be specified for pod P, choose one of: [a b]`,
`container X is not valid for pod P`, `previous terminated container "c" in pod "p" not found`,
`container "c" in pod "p" is waiting to start: ContainerCreating`. A simulated container's log is empty.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import trio

from .errors import BadRequest
from .httpserver import Request, Response, StreamResponse

Obj = dict[str, Any]
TEXT = "text/plain"
TAIL_BYTES = 2048  # kubelet's FallbackToLogsOnError: at most 80 lines, 2048 bytes
TAIL_LINES = 80


class LogSource(Protocol):
    """What the kubelet knows of a pod's container runs (ProcPods implements it)."""

    def knows(self, uid: str, container: str) -> bool:
        """Whether that container of that pod runs as a process here."""

    def log_file(self, uid: str, container: str, previous: bool) -> tuple[Path | None, bool]:
        """(the run's log file or None, whether that run is still going)."""


def log_path(logs_dir: Path, container: str, run: int) -> Path:
    return logs_dir / f"{container}-{run}.log"


def tail(path: Path, lines: int = TAIL_LINES, limit: int = TAIL_BYTES) -> str:
    """The last `lines` lines, at most `limit` bytes (a failed container's message)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    return "\n".join(text.rstrip("\n").split("\n")[-lines:]) + ("\n" if text else "")


def _pick_container(pod: Obj, req: Request) -> str:
    name = pod["metadata"]["name"]
    names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    wanted = req.param("container")
    if not wanted:
        if len(names) != 1:
            raise BadRequest(f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]")
        return str(names[0])
    if wanted not in names:
        raise BadRequest(f"container {wanted} is not valid for pod {name}")
    return wanted


def _int(req: Request, key: str) -> int | None:
    raw = req.param(key)
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"invalid value for {key}: {raw!r} is not an integer") from None
    if value < 0 or (key == "limitBytes" and value == 0):
        raise BadRequest(f"invalid value for {key}: {raw!r} must be {'> 0' if key == 'limitBytes' else '>= 0'}")
    return value


def _shape(data: bytes, tail_lines: int | None, limit: int | None) -> bytes:
    if tail_lines is not None:
        lines = data.splitlines(keepends=True)
        data = b"".join(lines[-tail_lines:]) if tail_lines else b""
    return data[:limit] if limit is not None else data


def respond(source: LogSource | None, pod: Obj, req: Request) -> Response | StreamResponse:
    """GET pods/NAME/log for `pod`."""
    container = _pick_container(pod, req)
    previous = req.param("previous").lower() in ("1", "true")
    tail_lines, limit = _int(req, "tailLines"), _int(req, "limitBytes")
    path, live = source.log_file(pod["metadata"]["uid"], container, previous) if source else (None, False)
    if path is None:
        _no_log(source, pod, container, previous)
        return Response(200, b"", TEXT)
    data = _shape(path.read_bytes() if path.exists() else b"", tail_lines, limit)
    if not (live and req.param("follow").lower() in ("1", "true")):
        return Response(200, data, TEXT)
    return StreamResponse(200, _follower(source, pod["metadata"]["uid"], container, path, data), TEXT)


def _no_log(source: LogSource | None, pod: Obj, container: str, previous: bool) -> None:
    """A process container without that log: the apiserver's 400; a simulated one: an empty log."""
    uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
    if source is None or not source.knows(uid, container):
        return
    if previous:
        raise BadRequest(f'previous terminated container "{container}" in pod "{name}" not found')
    reason = "ContainerCreating"
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == container:
            reason = ((cs.get("state") or {}).get("waiting") or {}).get("reason") or reason
    raise BadRequest(f'container "{container}" in pod "{name}" is waiting to start: {reason}')


def _follower(source: LogSource, uid: str, container: str, path: Path,
              first: bytes) -> Callable[[Callable[[bytes], Awaitable[None]]], Awaitable[None]]:
    async def writer(send: Callable[[bytes], Awaitable[None]]) -> None:
        if first:
            await send(first)
        offset = path.stat().st_size if path.exists() else 0
        while True:
            chunk = _read_from(path, offset)
            if chunk:
                offset += len(chunk)
                await send(chunk)
                continue
            current, live = source.log_file(uid, container, False)
            if current != path or not live:
                rest = _read_from(path, offset)
                if rest:
                    await send(rest)
                return
            await trio.sleep(0.1)

    return writer


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(65536)
    except OSError:
        return b""
