"""A PE simulator: plays the PEs of a job's consistent regions against the operator's REST API.

What a Streams PE runtime does for consistent regions, reduced to the protocol: it learns of
notifications by UDP datagram (`listen="udp"`, one socket per PE on 127.0.0.1, whose addresses the
operator is given) or by polling `GET /pe/{peId}` (`listen="poll"`), or both (`poll_also`: UDP,
and a slow poll for what a PE missed while its socket was not yet bound, as the runtime's
K8SConsistentRegionThread polls beside its UDP listener), and answers
- triggerDrain "seqId=N"   -> PUT .../pe/{pe}/checkpoint with body N (or first a
  /blockingcheckpoint, then the full checkpoint once resumeSubmission says pendCkpt=1),
- triggerReset "seqId=N;resetAttempt=M" -> PUT .../pe/{pe}/reset {"progress": {"seqId", "resetAttempt"}},
- in an operator-driven region, the PE running its trigger operator (`triggers`) starts a drain
  every `trigger_period`: PUT /region/{r}/drain {"request": {"seqId", "operator"}} with the seqId the
  last resumeSubmission named (a 409 naming the `expected` one corrects it); once accepted it
  checkpoints and sends the drain marker downstream (`forward`, the data connections: the marker
  punctuation of a real runtime); every PE of the region checkpoints on the first marker of a
  seqId (`marker`) and forwards it,
and records every notification it saw with the time it saw it (`seen`), for tests and the bench.
A PE in `failing` stays silent (its region's drain or reset then times out), as a stuck PE would.

Used by the end-to-end tests over the real API listener, by `bench/regions_bench.py`, and (wired to
Kubernetes by the caller) by `ykshm pe-sim`. httpx under trio, or `RawHttp` (`raw=True`: what a PE
pod uses, it neither imports httpx nor builds its TLS context, ~0.1 s CPU per process); every task
in the `run` nursery.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING

import orjson
import trio

if TYPE_CHECKING:   # imported when used: a raw PE (`ykshm pe-sim` in a pod) never pays for httpx
    import httpx

log = logging.getLogger("ykshm.pe-sim")

BASE = "/api/consistentregion"


@dataclasses.dataclass(frozen=True, slots=True)
class Seen:
    """One notification as a PE saw it; `at` is trio.current_time()."""

    at: float
    pe: int
    region: int
    type: str
    message: str


def parse_message(message: str) -> dict[str, int]:
    """"seqId=3;retId=1;pendCkpt=0" -> {"seqId": 3, "retId": 1, "pendCkpt": 0}."""
    out = {}
    for part in message.split(";"):
        key, _, value = part.partition("=")
        if key and value.lstrip("-").isdigit():
            out[key] = int(value)
    return out


class RawHttp:
    """A minimal HTTP/1.1 keep-alive client, one connection per PE, for the benchmark: a real PE
    runtime (C++, libcurl) costs next to nothing per request, httpx under trio costs milliseconds on
    a loaded machine, which would measure the client instead of the operator. Content-Length
    bodies only (what the operator's API sends); same `put`/`get` shape as httpx's answers."""

    def __init__(self, base_url: str, token: bytes | None = None, local_address: str | None = None) -> None:
        """`local_address`: the source address of its connections (a PE pod's own, as a pod in
        a cluster sends from: what the controller and operator know a job's PE pod by)."""
        self.local_address = local_address
        self.auth = b"Authorization: Bearer " + token + b"\r\n" if token else b""
        host_port = base_url.split("://", 1)[1].split("/", 1)[0]
        host, _, port = host_port.rpartition(":")
        self.host, self.port = host, int(port)
        self._streams: dict[int, trio.SocketStream] = {}
        self._buffers: dict[int, bytes] = {}
        self._locks: dict[int, trio.Lock] = {}

    async def request(self, pe: int, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        """One request at a time per PE connection (a trigger's drain and a notification's answer
        may come at once). Any failure drops that connection (the next request opens a new one)
        and is raised (OSError, trio.BrokenResourceError, ValueError)."""
        lock = self._locks.setdefault(pe, trio.Lock())
        try:        # uncontended (nearly always): no extra checkpoint, which with 100 PEs
            lock.acquire_nowait()   # answering at once put a scheduling round on each answer
        except trio.WouldBlock:
            await lock.acquire()
        try:
            return await self._request(pe, method, path, body)
        except BaseException:
            stream = self._streams.pop(pe, None)
            self._buffers.pop(pe, None)
            if stream is not None:
                await trio.aclose_forcefully(stream)
            raise
        finally:
            lock.release()

    async def _request(self, pe: int, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        stream = self._streams.get(pe)
        if stream is None:
            stream = self._streams[pe] = await trio.open_tcp_stream(self.host, self.port,
                                                                    local_address=self.local_address)
            self._buffers[pe] = b""
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n"
                f"Content-Length: {len(body)}\r\n").encode("ascii") + self.auth + b"\r\n"
        await stream.send_all(head + body)
        buf = self._buffers[pe]
        while b"\r\n\r\n" not in buf:
            buf += await self._receive(stream)
        head_bytes, _, buf = buf.partition(b"\r\n\r\n")
        lines = head_bytes.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(buf) < length:
            buf += await self._receive(stream)
        self._buffers[pe] = buf[length:]
        return status, buf[:length]

    @staticmethod
    async def _receive(stream: trio.SocketStream) -> bytes:
        data = await stream.receive_some(65536)
        if not data:
            raise ConnectionError("the operator closed the connection")
        return data

    async def aclose(self) -> None:
        for stream in self._streams.values():
            await stream.aclose()


def _httpx_client(connections: int) -> httpx.AsyncClient:
    import httpx

    return httpx.AsyncClient(limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
                             timeout=30.0)


class PeSimulator:
    """The PEs of a job's regions ({region: PEs}); `run` until cancelled. Each PE has one UDP
    socket (or one poll loop on GET /pe/{peId}) for all its regions, as a real PE has one
    listener. `failing` (PE ids) may be changed while running."""

    def __init__(self, base_url: str, regions: Mapping[int, Iterable[int]], *, listen: str = "udp",
                 poll_interval: float = 0.05, blocking: bool = False,
                 failing: Iterable[int] = (), client: httpx.AsyncClient | None = None,
                 raw: bool = False, token: bytes | None = None,
                 bind: tuple[str, int] = ("127.0.0.1", 0),
                 triggers: Mapping[int, Mapping[int, str]] | None = None, trigger_period: float = 0.3,
                 forward: Callable[[int, int, int], Awaitable[None]] | None = None,
                 poll_also: float | None = None,
                 ready: Callable[[int], Awaitable[None]] | None = None,
                 keep_seen: int | None = None) -> None:
        if listen not in ("udp", "poll"):
            raise ValueError(f"listen must be udp or poll, not {listen!r}")
        self.base_url = base_url.rstrip("/")
        self.regions = {r: tuple(pes) for r, pes in regions.items()}
        self.pes = tuple(sorted({pe for pes in self.regions.values() for pe in pes}))
        self.listen = listen
        self.poll_interval = poll_interval
        self.blocking = blocking
        self.failing = set(failing)
        self.raw = raw
        """Use RawHttp instead of httpx (the benchmark)."""
        self.token = token
        """The job's token, sent as `Authorization: Bearer` (the operator requires it)."""
        self.bind = bind
        """Where each PE's UDP socket binds (a PE pod: its pod IP and port 10001)."""
        self._raw: RawHttp | None = None
        self.seen: list[Seen] = []
        self.keep_seen = keep_seen
        """At most about twice this many notifications stay in `seen` (a long-running PE pod);
        None keeps all (tests and the bench read the whole history)."""
        self._dropped = 0           # notifications dropped from the front of `seen`
        self.errors: list[tuple[int, str, int, str]] = []
        """(pe, path, HTTP status, body) of every report the operator refused."""
        self.changed = trio.Event()
        self._client = client
        self.triggers = {pe: dict(regions) for pe, regions in (triggers or {}).items()}
        """PE -> {operator-driven region: the trigger operator it runs}."""
        self.trigger_period = trigger_period
        self.poll_also = poll_also
        self.ready = ready
        """Awaited before a trigger's drain request: the PE's connections are up (pepod)."""
        self.forward = forward
        """Sends a drain marker (pe, region, seqId) on the PE's data connections (pepod)."""
        self._active: httpx.AsyncClient | None = None     # the client of the `run` going on (None: raw)
        self._heard: dict[int, float] = {}                 # PE -> when its UDP socket last got a datagram
        self._running = False
        self._next_seq: dict[tuple[int, int], int] = {}
        self._marked: dict[tuple[int, int], int] = {}
        self._sockets: dict[int, trio.socket.SocketType] = {}
        self._last: dict[tuple[int, int], tuple[str, str]] = {}
        self._drained_seq: dict[tuple[int, int], int] = {}

    def addresses(self) -> dict[int, tuple[str, int]]:
        """PE id -> its UDP address (after `open_sockets`): what the operator's AddressBook returns."""
        return {pe: sock.getsockname() for pe, sock in self._sockets.items()}

    async def open_sockets(self) -> None:
        for pe in self.pes:
            sock = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            await sock.bind(self.bind)
            self._sockets[pe] = sock

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        owned = self._client is None and not self.raw
        client = self._client if not owned else _httpx_client(len(self.pes))
        if self.raw:
            self._raw = RawHttp(self.base_url, self.token, self.bind[0])   # from its own address
        try:
            if self.listen == "udp" and not self._sockets:
                await self.open_sockets()
            self._active, self._running = client, True
            async with trio.open_nursery() as nursery:
                for pe in self.pes:
                    listener = self._listen_udp if self.listen == "udp" else self._poll
                    nursery.start_soon(listener, client, pe)
                    if self.listen == "udp" and self.poll_also:
                        nursery.start_soon(self._poll, client, pe, self.poll_also)
                for pe, regions in sorted(self.triggers.items()):
                    for region, operator in sorted(regions.items()):
                        nursery.start_soon(self._trigger, client, pe, region, operator)
                task_status.started(self)
        finally:
            self._active, self._running = None, False
            for sock in self._sockets.values():
                sock.close()
            self._sockets.clear()        # a later `run` binds again
            if owned and client is not None:
                await client.aclose()
            if self._raw is not None:
                await self._raw.aclose()

    async def _listen_udp(self, client: httpx.AsyncClient, pe: int) -> None:
        sock = self._sockets[pe]
        while True:
            data = await sock.recv(65536)
            self._heard[pe] = trio.current_time()
            try:
                doc = orjson.loads(data)
                notes = [(int(r), n["type"], n["message"]) for r, n in doc.items()]
            except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError):
                continue  # not a notification
            for region, kind, message in notes:
                if pe in self.regions.get(region, ()):
                    await self._on(client, pe, region, kind, message)

    async def _request(self, client: httpx.AsyncClient, pe: int, method: str, path: str,
                       body: bytes = b"") -> tuple[int, bytes]:
        if self._raw is not None:
            return await self._raw.request(pe, method, path, body)
        headers = {"Authorization": f"Bearer {self.token.decode()}"} if self.token else None
        r = await client.request(method, self.base_url + path, content=body, headers=headers)
        return r.status_code, r.content

    async def _poll(self, client: httpx.AsyncClient, pe: int, interval: float | None = None) -> None:
        """Poll GET /pe/{pe}: every `poll_interval` (listen="poll"), or beside UDP (`interval`, the
        `poll_also` period) once at start and then only after `interval` without a datagram: a PE
        that missed a notification hears nothing more until it answers (the region waits for it),
        while one whose datagrams arrive would only add a request per period to every drain's
        critical path (100 PEs: +40 % of the PEs' CPU per round, and the connection's lock)."""
        path = f"{BASE}/pe/{pe}"
        first = True
        while True:
            if not (first or interval is None or
                    trio.current_time() - self._heard.get(pe, float("-inf")) >= interval):
                await trio.sleep(interval)
                continue
            first = False
            status, body = await self._request(client, pe, "GET", path)
            if status == 200:
                for region, note in sorted(orjson.loads(body).items()):
                    region = int(region)
                    if pe in self.regions.get(region, ()) and \
                            (note["type"], note["message"]) != self._last.get((pe, region)):
                        await self._on(client, pe, region, note["type"], note["message"])
            await trio.sleep(interval or self.poll_interval)

    async def _on(self, client: httpx.AsyncClient, pe: int, region: int, kind: str,
                  message: str) -> None:
        self._last[(pe, region)] = (kind, message)
        self.seen.append(Seen(trio.current_time(), pe, region, kind, message))
        if self.keep_seen is not None and len(self.seen) >= 2 * self.keep_seen:
            drop = len(self.seen) - self.keep_seen
            del self.seen[:drop]
            self._dropped += drop
        self.changed.set()
        self.changed = trio.Event()
        if pe in self.failing:
            return
        values = parse_message(message)
        prefix = f"{BASE}/region/{region}/pe/{pe}"
        if kind == "resumeSubmission" and "seqId" in values:
            self._next_seq[(pe, region)] = values["seqId"]   # the next drain's seqId (a trigger's)
        if kind == "triggerDrain":
            seq = values["seqId"]
            if self.blocking:
                self._drained_seq[(pe, region)] = seq
                await self._put(client, pe, f"{prefix}/blockingcheckpoint", content=str(seq).encode())
            else:
                await self._put(client, pe, f"{prefix}/checkpoint", content=str(seq).encode())
        elif kind == "resumeSubmission" and values.get("pendCkpt") == 1 and \
                (pe, region) in self._drained_seq:
            seq = self._drained_seq.pop((pe, region))
            await self._put(client, pe, f"{prefix}/checkpoint", content=str(seq).encode())
        elif kind == "triggerReset":
            body = {"progress": {"seqId": str(values["seqId"]),
                                 "resetAttempt": str(values["resetAttempt"])}}
            await self._put(client, pe, f"{prefix}/reset", content=orjson.dumps(body))

    async def _trigger(self, client: httpx.AsyncClient, pe: int, region: int, operator: str) -> None:
        """The trigger operator of an operator-driven region: request a drain every period."""
        path = f"{BASE}/region/{region}/drain"
        while True:
            await trio.sleep(self.trigger_period)
            if pe in self.failing:
                continue
            if self.ready is not None:
                await self.ready(pe)           # a marker sent before the connections are up is lost
            seq = self._next_seq.get((pe, region), 1)
            body = orjson.dumps({"request": {"seqId": str(seq), "operator": operator}})
            status, answer = await self._request(client, pe, "PUT", path, body)
            if status < 300:
                await self.marker(pe, region, seq)
                continue
            try:
                expected = orjson.loads(answer).get("expected")
            except (orjson.JSONDecodeError, AttributeError):
                expected = None
            if isinstance(expected, int) and expected != seq:
                self._next_seq[(pe, region)] = expected      # the drain the region waits for
                log.debug("pe-sim: PE %s region %s drains seqId %s next", pe, region, expected)

    async def marker(self, pe: int, region: int, seq: int) -> None:
        """A drain marker of `seq` reached `pe`: the first one of that seqId checkpoints (a PE with
        several inputs sees one per input) and goes on downstream."""
        if pe not in self.regions.get(region, ()) or self._marked.get((pe, region), 0) >= seq \
                or not self._running:
            return
        self._marked[(pe, region)] = seq
        if pe not in self.failing:
            await self._put(self._active, pe, f"{BASE}/region/{region}/pe/{pe}/checkpoint", str(seq).encode())
        if self.forward is not None:
            await self.forward(pe, region, seq)

    async def _put(self, client: httpx.AsyncClient, pe: int, path: str, content: bytes) -> None:
        status, body = await self._request(client, pe, "PUT", path, content)
        if status >= 300:
            text = body.decode("utf-8", "replace")
            self.errors.append((pe, path, status, text))
            log.info("pe-sim: PE %s: %s answered %s %s", pe, path, status, text)

    async def wait_for(self, kind: str, message: str | None = None, pes: Iterable[int] | None = None,
                       region: int | None = None) -> float:
        """Until every PE (of `pes`, default all of the region's or the job's) has seen a
        notification of this kind (and message) in `region` (default any); the time the last of
        them saw it."""
        if pes is None:
            pes = self.regions[region] if region is not None else self.pes
        want = set(pes)
        times: dict[int, float] = {}
        scanned = 0  # `seen` only grows: each wake-up reads what is new (the bench runs for
        while True:  # thousands of notifications; rescanning them all per wake-up cost ms)
            seen = self.seen
            for i in range(max(scanned - self._dropped, 0), len(seen)):
                s = seen[i]
                if s.type == kind and (message is None or s.message == message) and s.pe in want \
                        and (region is None or s.region == region):
                    times[s.pe] = s.at
            scanned = self._dropped + len(seen)
            if len(times) == len(want):
                return max(times.values())
            await self.changed.wait()
