"""Startup, liveness and readiness probes of a process container, as the kubelet runs them.

A probe waits `initialDelaySeconds`, then checks every `periodSeconds` (default 10) with a
`timeoutSeconds` budget (1): `httpGet` (status 200-399 passes; `host` defaults to the pod IP, `port`
a number or a named containerPort, `scheme` HTTP or HTTPS without certificate verification as the
kubelet does, `httpHeaders`, User-Agent `kube-probe/1.32`), `tcpSocket` (a connection passes) or
`exec` (exit 0 passes; the command must be `ykshm ...`, run with the container's environment, or
one of the few commands sim-cluster answers itself without running anything: `true`, `false`,
`cat PATH`, `test -e|-f|-d PATH` (`/bin/` or `/usr/bin/` before them too), PATH a container path
looked up under the pod's `YKSHM_ROOT`; so Streams' `/bin/true` liveness probe works).
`successThreshold` consecutive passes (1) or `failureThreshold` consecutive failures (3) change the
result; each failure is reported to `on_fail` (the kubelet's `Unhealthy` event), each change to
`on_result`. Liveness and readiness start once the startup probe (if any) passed.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from . import procimages
from .sandbox import PodIdentity

Obj = dict[str, Any]
KINDS = ("startupProbe", "livenessProbe", "readinessProbe")
LABEL = {"startupProbe": "Startup", "livenessProbe": "Liveness", "readinessProbe": "Readiness"}


@dataclass
class Target:
    """Where a container's probes go and how an exec probe runs."""

    pod_ip: str
    ports: dict[str, int]
    env: dict[str, str]
    cwd: str
    identity: PodIdentity | None = None  # an exec probe runs as the pod (`sandbox`)


def _port(value: Any, target: Target) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if value in target.ports:
        return target.ports[value]
    raise ValueError(f"port {value!r} not found")


async def _http(spec: Obj, target: Target) -> str | None:
    host = spec.get("host") or target.pod_ip
    port = _port(spec.get("port"), target)
    scheme = str(spec.get("scheme") or "HTTP").lower()
    path = spec.get("path") or "/"
    url = f"{scheme}://{host}:{port}{path}"
    try:
        stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
    except OSError as exc:
        return f'Get "{url}": dial tcp {host}:{port}: connect: {exc.strerror or exc}'
    async with stream:
        if scheme == "https":
            ctx = ssl.create_default_context()
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            stream = trio.SSLStream(stream, ctx, server_hostname=host)
        headers = {"Host": f"{host}:{port}", "User-Agent": "kube-probe/1.32", "Accept": "*/*",
                   "Connection": "close"}
        headers.update({h.get("name"): h.get("value") for h in spec.get("httpHeaders") or [] if h.get("name")})
        head = f"GET {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        await stream.send_all(head.encode())
        first = b""
        while b"\r\n" not in first and len(first) < 4096:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            first += chunk
    parts = first.split(b"\r\n", 1)[0].split()
    code = int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else 0
    return None if 200 <= code < 400 else f"HTTP probe failed with statuscode: {code}"


async def _tcp(spec: Obj, target: Target) -> str | None:
    host = spec.get("host") or target.pod_ip
    port = _port(spec.get("port"), target)
    try:
        stream = await trio.open_tcp_stream(host, port)
    except OSError as exc:
        return f"dial tcp {host}:{port}: connect: {exc.strerror or exc}"
    await stream.aclose()
    return None


def _container_file(path: str, target: Target) -> Path | None:
    if not path.startswith("/") or ".." in path.split("/"):
        return None
    return Path(target.env.get("YKSHM_ROOT", "/nonexistent")) / path.lstrip("/")


def builtin(words: list[str], target: Target) -> str | None | bool:
    """The commands answered without a process: None passes, a string fails, False: not one of them."""
    name = words[0].removeprefix("/usr").removeprefix("/bin/") if words else ""
    if name == "true" and len(words) == 1:
        return None
    if name == "false" and len(words) == 1:
        return f"command {words!r} exited with 1"
    tests = {"-e": Path.exists, "-f": Path.is_file, "-d": Path.is_dir}
    if name == "cat" and len(words) == 2 or name == "test" and len(words) == 3 and words[1] in tests:
        path = _container_file(words[-1], target)
        check = Path.is_file if name == "cat" else tests[words[1]]
        if path is not None and check(path):
            return None
        return f"command {words!r} exited with 1: {words[-1]}: No such file or directory"
    return False


async def _exec(spec: Obj, target: Target) -> str | None:
    words = [str(w) for w in spec.get("command") or []]
    answered = builtin(words, target)
    if answered is not False:
        return answered
    try:
        argv = procimages.resolve(words)
    except procimages.RefusedCommand as exc:
        return str(exc)
    who = target.identity.popen_options() if target.identity else {}
    done = await trio.run_process(argv, env=target.env, cwd=target.cwd, check=False, capture_stdout=True,
                                  capture_stderr=True, **who)
    if done.returncode == 0:
        return None
    out = (done.stdout + done.stderr).decode("utf-8", "replace").strip()
    return f"command {words!r} exited with {done.returncode}: {out[-512:]}"


async def check(probe: Obj, target: Target) -> str | None:
    """One probe: None when it passes, else why it failed (the kubelet's wording where it has one)."""
    timeout = float(probe.get("timeoutSeconds") or 1)
    try:
        with trio.fail_after(timeout):
            if "httpGet" in probe:
                return await _http(probe["httpGet"] or {}, target)
            if "tcpSocket" in probe:
                return await _tcp(probe["tcpSocket"] or {}, target)
            if "exec" in probe:
                return await _exec(probe["exec"] or {}, target)
            return "probe has no handler sim-cluster supports (httpGet, tcpSocket, exec)"
    except trio.TooSlowError:
        return f"probe timed out after {timeout:g}s"
    except (OSError, ValueError, trio.BrokenResourceError, ssl.SSLError) as exc:
        return str(exc) or type(exc).__name__


async def run(kind: str, probe: Obj, target: Target, on_result: Callable[[bool], None],
              on_fail: Callable[[str], None], *, gate: trio.Event | None = None) -> None:
    """Probe until a liveness/startup failure (or the caller's nursery cancels it)."""
    if gate is not None:
        await gate.wait()
    await trio.sleep(float(probe.get("initialDelaySeconds") or 0))
    period = float(probe.get("periodSeconds") or 10)
    need_ok = int(probe.get("successThreshold") or 1)
    need_fail = int(probe.get("failureThreshold") or 3)
    oks = fails = 0
    result: bool | None = None
    while True:
        why = await check(probe, target)
        if why is None:
            oks, fails = oks + 1, 0
            if oks >= need_ok and result is not True:
                result = True
                on_result(True)
        else:
            oks, fails = 0, fails + 1
            on_fail(f"{LABEL[kind]} probe failed: {why}")
            if fails >= need_fail and result is not False:
                result = False
                on_result(False)
                if kind != "readinessProbe":
                    return
        await trio.sleep(period)
