"""`ykshm pe-sim` as a PE pod's process: what a Streams PE runtime does around its operators.

sim-cluster runs the Streams runtime image as `ykshm pe-sim BOOTSTRAP` (`--process-image`, what
`ykshm run` configures), with the pod's environment and volumes (`peobjects`). It then does, in the
runtime's order:

1. reads `STREAMS_INSTANCE_ID`, `STREAMS_JOB_NAME`, `STREAMS_PE_ID`, `STREAMS_BUNDLE_URL`, `POD_IP`,
   `/etc/config/pe/aadl.xml` (its PE input ports, and which PE input ports its output ports feed),
   `/etc/config/pe/pe.json` (its consistent regions, and the operator-driven ones whose trigger it
   runs) and `/etc/config/token/token`; any of them
   missing or malformed ends it with one line and exit 1 (the pod fails; the controller relaunches
   it by the restart policy);
2. touches `/tmp/live` (the liveness probe `cat /tmp/live`);
3. fetches its bundle as the runtime's bootstrap does, `HGET apps $STREAMS_SAB_NAME` (no password)
   from the controller's repository at `streams-api.NS:6379` (`repository`), else (a controller
   with `--repository off`: the Service has no such port) from the controller's bundle endpoint
   with the token; 30 tries 1 s apart, as the bootstrap; exit 1 if all fail; and checks it is a
   bundle;
4. listens on POD_IP:10000+I for each PE input port I and connects each output port's static
   connection to `JOB-P.NS:10000+I` (the peer's Service name), sending one line `P.O>I` that names
   the connection; reconnects when a peer goes away;
5. reports its connectivity (`Full` once every outgoing and every expected incoming connection is
   up, `Partial` before) to the controller, `PUT http://streams-api.NS:10000/api/state/NS/JOB/pe/N/connectivity`
   (OpenStreams' path carries no namespace; ours does);
6. in consistent regions: listens for the operator's UDP notifications on POD_IP:10001 and answers
   them through `streams-JOB-consistentregion-api.NS:10000/api/consistentregion` with the token
   (`regions.pesim`): checkpoints for drains, reset reports for resets. It also polls
   `GET .../pe/N` every POLL_ALSO seconds, as the runtime does: the controller counts a PE `Full`
   once its peers' pods run, so a relaunched PE's region may reset before this process has bound
   its UDP socket, and the poll finds the triggerReset it missed. In an operator-driven region the PE running the
   trigger operator requests the drains, and the drain marker travels the data connections as a
   line `drain R N` after the connection's name: each PE of region R checkpoints N on the first
   marker and passes it on (the marker punctuation of a real runtime).

Paths under `/` are read below `$YKSHM_ROOT` (sim-cluster's pod root), as sim-cluster maps them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
from collections.abc import Mapping
from typing import Any
from pathlib import Path

import defusedxml.ElementTree as DET
import orjson
import trio

from . import croobjects, peobjects
from .regions.pesim import RawHttp

log = logging.getLogger("ykshm.pe-sim")

AUG = "{http://www.ibm.com/xmlns/prod/streams/application/augmented}"
FETCH_TRIES, FETCH_PAUSE, RECONNECT, REQUEST_TIMEOUT = 30, 1.0, 0.2, 10.0
CONNECT_TIMEOUT = 1.0    # resolving and connecting to a peer (`open_peer`)
# what a request to the controller or the operator may raise: the address is not up yet, the
# connection broke, the answer was not HTTP, or it took longer than REQUEST_TIMEOUT
HTTP_ERRORS = (OSError, trio.BrokenResourceError, trio.TooSlowError, ValueError, IndexError)
TRIGGER_PERIOD = 0.5     # an operator-driven region's drains, requested by its trigger's PE
POLL_ALSO = 1.0          # the notification poll beside UDP (a relaunched PE's missed reset)
KEEP_SEEN = 1000         # notifications a PE pod remembers (it runs for the life of the job)


class PeConfigError(Exception):
    """The pod does not give what a PE needs (the message names it)."""


@dataclasses.dataclass(frozen=True)
class PeConfig:
    namespace: str
    job: str
    pe: int
    pod_ip: str
    root: str
    bundle_url: str
    token: bytes
    inputs: tuple[int, ...]                        # PE input port ids
    expected: frozenset[str]                       # incoming connections "P.O>I"
    outputs: tuple[tuple[int, int, int], ...]      # (own output port, peer PE, peer input port)
    regions: tuple[int, ...]
    triggers: tuple[tuple[int, str], ...] = ()     # (operator-driven region, its trigger operator here)
    sab_name: str = ""                             # STREAMS_SAB_NAME: the bundle's field in the repository

    def path(self, absolute: str) -> Path:
        return Path(self.root + absolute)


def _env(env: Mapping[str, str], name: str) -> str:
    value = env.get(name)
    if not value:
        raise PeConfigError(f"{name} is not set (not started as a PE pod?)")
    return value


def _read(root: str, absolute: str) -> bytes:
    try:
        return Path(root + absolute).read_bytes()
    except OSError as exc:
        raise PeConfigError(f"{absolute}: {exc.strerror}") from None


def ports_of(aadl: bytes) -> tuple[tuple[int, ...], frozenset[str], tuple[tuple[int, int, int], ...]]:
    """(input port ids, incoming connection names, outgoing (port, peer PE, peer input port))."""
    try:
        root = DET.fromstring(aadl, forbid_dtd=True)
    except Exception as exc:  # noqa: BLE001 - any parse failure is a bad AADL
        raise PeConfigError(f"aadl.xml is not readable: {exc}") from None
    if root.tag != AUG + "augmentedPE":
        raise PeConfigError(f"aadl.xml: root is {root.tag!r}, not augmentedPE")
    inputs, expected, outputs = [], set(), []
    try:
        for port in root.iterfind(f"{AUG}inputPorts/{AUG}inputPort"):
            iport = int(port.get("id"))
            inputs.append(iport)
            for conn in port.iterfind(f"{AUG}staticConnections/{AUG}staticConnection"):
                expected.add(f"{int(conn.get('peId'))}.{int(conn.get('oportId'))}>{iport}")
        for port in root.iterfind(f"{AUG}outputPorts/{AUG}outputPort"):
            oport = int(port.get("id"))
            for conn in port.iterfind(f"{AUG}staticConnections/{AUG}staticConnection"):
                outputs.append((oport, int(conn.get("peId")), int(conn.get("iportId"))))
    except (TypeError, ValueError) as exc:
        raise PeConfigError(f"aadl.xml: a port or connection id is not a number: {exc}") from None
    return tuple(inputs), frozenset(expected), tuple(outputs)


def read_config(env: Mapping[str, str]) -> PeConfig:
    root = env.get("YKSHM_ROOT", "")
    namespace, job = _env(env, "STREAMS_INSTANCE_ID"), _env(env, "STREAMS_JOB_NAME")
    try:
        pe = int(_env(env, "STREAMS_PE_ID"))
    except ValueError:
        raise PeConfigError(f"STREAMS_PE_ID={env['STREAMS_PE_ID']!r} is not a number") from None
    inputs, expected, outputs = ports_of(_read(root, "/etc/config/pe/" + "aadl.xml"))
    try:
        doc = orjson.loads(_read(root, "/etc/config/pe/pe.json"))
        regions = tuple(int(r) for r in doc.get("consistentRegions") or ())
        triggers = tuple(sorted((int(r), str(op)) for r, op in (doc.get("triggers") or {}).items()))
    except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
        raise PeConfigError("/etc/config/pe/pe.json is not the PE's document") from None
    token = _read(root, f"{peobjects.TOKEN_DIR}/{peobjects.TOKEN_KEY}").strip()
    return PeConfig(namespace, job, pe, _env(env, "POD_IP"), root, _env(env, "STREAMS_BUNDLE_URL"), token,
                    inputs, expected, outputs, regions, triggers, env.get("STREAMS_SAB_NAME") or "")


class Controller:
    """The PE's requests to its controller (`streams-api`: the bundle, connectivity reports) on one
    keep-alive connection per host, as the runtime's libcurl would: no httpx in a PE pod, whose
    start-up (100 processes at once) is the job's time to connected."""

    def __init__(self, cfg: PeConfig) -> None:
        self.token = cfg.token
        self.pod_ip = cfg.pod_ip or None          # its requests come from the pod's own address
        self.hosts: dict[str, RawHttp] = {}       # "host:port" -> its connection

    async def request(self, method: str, url: str, body: bytes = b"") -> tuple[int, bytes]:
        """`url` is plain http (what `peobjects` writes); ValueError for another scheme."""
        scheme, _, rest = url.partition("://")
        if scheme != "http":
            raise ValueError(f"{url}: only http:// is spoken here")
        host, _, path = rest.partition("/")
        http = self.hosts.get(host)
        if http is None:
            http = self.hosts[host] = RawHttp(f"http://{host}", self.token, self.pod_ip)
        with trio.fail_after(REQUEST_TIMEOUT):
            return await http.request(0, method, "/" + path, body)

    async def aclose(self) -> None:
        for http in self.hosts.values():
            await http.aclose()


class Connectivity:
    """Which of the PE's connections are up; reports each change to the controller."""

    def __init__(self, cfg: PeConfig, client: Controller) -> None:
        self.cfg, self.client = cfg, client
        self.incoming: set[str] = set()
        self.outgoing: set[tuple[int, int, int]] = set()
        self.streams: dict[tuple[int, int, int], trio.SocketStream] = {}   # the live outgoing ones
        self.changed = trio.Event()
        self.sim: Any = None                       # the regions' PeSimulator, when in a region
        self.sending = trio.Lock()

    async def forward(self, pe: int, region: int, seq: int) -> None:
        """Send a drain marker on every live outgoing connection (the region's operators downstream)."""
        async with self.sending:
            for stream in list(self.streams.values()):
                try:
                    await stream.send_all(f"drain {region} {seq}\n".encode())
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass                           # the connection loop reconnects

    async def wait_full(self, _pe: int = 0) -> None:
        """Until every connection is up (a trigger sends its markers only then, as a runtime's
        operators submit nothing before the PE's connections are made): woken by each change."""
        while self.state != "Full":
            await self.changed.wait()

    async def on_line(self, line: bytes) -> None:
        """A line after a connection's name: a drain marker for this PE's regions."""
        kind, _, rest = line.partition(b" ")
        region, _, seq = rest.partition(b" ")
        if kind == b"drain" and region.isdigit() and seq.isdigit() and self.sim is not None:
            await self.sim.marker(self.cfg.pe, int(region), int(seq))

    @property
    def state(self) -> str:
        full = self.incoming >= self.cfg.expected and len(self.outgoing) == len(set(self.cfg.outputs))
        return "Full" if full else ("Partial" if self.incoming or self.outgoing else "None")

    def touch(self) -> None:
        self.changed.set()

    async def report(self) -> None:
        cfg = self.cfg
        url = (f"http://{peobjects.API_SERVICE}.{cfg.namespace}:{peobjects.API_PORT}/api/state/"
               f"{cfg.namespace}/{cfg.job}/pe/{cfg.pe}/connectivity")
        last = None
        while True:
            state = self.state
            if state != last:
                try:
                    status, body = await self.client.request("PUT", url, orjson.dumps(state))
                    if status < 300:
                        last = state
                        log.info("PE %s connectivity %s", cfg.pe, state)
                    else:
                        log.warning("PE %s: connectivity %s refused: %s %s", cfg.pe, state,
                                    status, body[:200].decode("utf-8", "replace"))
                        await trio.sleep(RECONNECT * 5)
                        continue
                except HTTP_ERRORS as exc:
                    log.info("PE %s: connectivity not reported: %s", cfg.pe, exc)
                    await trio.sleep(RECONNECT)
                    continue
            await self.changed.wait()
            self.changed = trio.Event()


async def repository_hget(cfg: PeConfig) -> bytes | None:
    """`redis-cli -h streams-api.NS --raw HGET apps NAME`, as the runtime's bootstrap runs it: one
    RESP command, no AUTH (the repository's anonymous reader), from the pod's address. None when
    the field is absent; OSError / ValueError when there is no repository or it refuses."""
    name = cfg.sab_name.encode()
    command = b"".join([b"*3\r\n", *(b"$%d\r\n%s\r\n" % (len(w), w) for w in (b"HGET", b"apps", name))])
    with trio.fail_after(REQUEST_TIMEOUT):
        infos = await trio.socket.getaddrinfo(f"{peobjects.API_SERVICE}.{cfg.namespace}", peobjects.REPOSITORY_PORT,
                                              family=socket.AF_INET, type=socket.SOCK_STREAM)
        async with await trio.open_tcp_stream(infos[0][4][0], peobjects.REPOSITORY_PORT,
                                              local_address=cfg.pod_ip or None) as stream:
            await stream.send_all(command)
            buffer = b""
            while b"\r\n" not in buffer:
                buffer += await _more(stream)
            head, _, buffer = buffer.partition(b"\r\n")
            if head == b"$-1":
                return None
            if not head.startswith(b"$"):
                raise ValueError(f"the repository answered {head[:200].decode('utf-8', 'replace')}")
            size = int(head[1:])
            while len(buffer) < size + 2:
                buffer += await _more(stream)
            return buffer[:size]


async def _more(stream: trio.SocketStream) -> bytes:
    chunk = await stream.receive_some(1 << 20)
    if not chunk:
        raise ValueError("the repository closed the connection")
    return chunk


async def _from_repository(cfg: PeConfig, attempt: int) -> bytes | None:
    """The bundle from the repository, or None (not there, or no repository: the HTTP endpoint)."""
    if not cfg.sab_name:
        return None
    try:
        body = await repository_hget(cfg)
    except HTTP_ERRORS as exc:
        log.info("bundle fetch %d: repository: %s", attempt + 1, exc)
        return None
    if body is None:
        log.info("bundle fetch %d: repository: no field %s in apps", attempt + 1, cfg.sab_name)
    return body


async def fetch_bundle(cfg: PeConfig, client: Controller) -> bytes:
    from .bundle import read_bundle
    from .errors import BundleError

    for attempt in range(FETCH_TRIES):
        body = await _from_repository(cfg, attempt)
        if body is not None:
            try:
                read_bundle(body)
            except BundleError as exc:
                raise PeConfigError(f"repository field {cfg.sab_name}: not a bundle: {exc}") from None
            log.info("PE %s: bundle %s from the repository %s.%s:%d", cfg.pe, cfg.sab_name,
                     peobjects.API_SERVICE, cfg.namespace, peobjects.REPOSITORY_PORT)
            return body
        try:
            status, body = await client.request("GET", cfg.bundle_url)
            if status == 200:
                read_bundle(body)
                return body
            log.info("bundle fetch %d: %s %s", attempt + 1, status, body[:200].decode("utf-8", "replace"))
        except HTTP_ERRORS as exc:
            log.info("bundle fetch %d: %s", attempt + 1, exc)
        except BundleError as exc:
            raise PeConfigError(f"{cfg.bundle_url}: not a bundle: {exc}") from None
        await trio.sleep(FETCH_PAUSE)
    raise PeConfigError(f"{cfg.bundle_url}: no bundle after {FETCH_TRIES} tries")


async def _serve_input(cfg: PeConfig, conn: Connectivity, iport: int, *,
                       task_status=trio.TASK_STATUS_IGNORED) -> None:
    async def handle(stream: trio.SocketStream) -> None:
        name = None
        try:
            buf = b""
            while b"\n" not in buf and len(buf) < 256:
                data = await stream.receive_some(256)
                if not data:
                    return
                buf += data
            first, _, buf = buf.partition(b"\n")
            name = first.decode("ascii", "replace")
            if name in cfg.expected:
                conn.incoming.add(name)
                conn.touch()
            while True:                            # tuples would flow here; markers do
                while b"\n" in buf:
                    line, _, buf = buf.partition(b"\n")
                    await conn.on_line(line)
                data = await stream.receive_some(65536)
                if not data:
                    break
                buf = (buf + data)[-4096:]
        except trio.BrokenResourceError:
            pass
        finally:
            if name in conn.incoming:
                conn.incoming.discard(name)
                conn.touch()

    await trio.serve_tcp(handle, peobjects.PE_BASE_PORT + iport, host=cfg.pod_ip, task_status=task_status)


async def open_peer(host: str, port: int) -> trio.SocketStream:
    """Resolve `host` as the runtime does (getaddrinfo, AF_INET: one A query, no AAAA) and
    connect, within CONNECT_TIMEOUT. A peer's name resolves once its pod is ready; a lookup
    made before that goes past the cluster's names to the node's resolver, which can take its
    5 s timeout (a loaded resolver drops queries), so a lookup that takes longer is given up
    and made again, and the next one finds the name (a runtime's connect timeout, in effect)."""
    with trio.fail_after(CONNECT_TIMEOUT):
        infos = await trio.socket.getaddrinfo(host, port, family=socket.AF_INET, type=socket.SOCK_STREAM)
        return await trio.open_tcp_stream(infos[0][4][0], port)


async def _connect_output(cfg: PeConfig, conn: Connectivity, out: tuple[int, int, int]) -> None:
    oport, peer, iport = out
    host = f"{cfg.job}-{peer}.{cfg.namespace}"
    while True:
        try:
            stream = await open_peer(host, peobjects.PE_BASE_PORT + iport)
        except (OSError, trio.TooSlowError):
            await trio.sleep(RECONNECT)
            continue
        try:
            async with conn.sending:
                await stream.send_all(f"{cfg.pe}.{oport}>{iport}\n".encode())
            conn.outgoing.add(out)
            conn.streams[out] = stream
            conn.touch()
            while await stream.receive_some(65536):
                pass
        except trio.BrokenResourceError:
            pass
        finally:
            conn.streams.pop(out, None)
            conn.outgoing.discard(out)
            conn.touch()
            await stream.aclose()
        await trio.sleep(RECONNECT)


def region_simulator(cfg: PeConfig, conn: Connectivity) -> Any:
    """The PE's part of its consistent regions (`regions.pesim`), markers over `conn`."""
    from .regions.pesim import PeSimulator

    base = croobjects.api_url(cfg.namespace, cfg.job).removesuffix(croobjects.BASE_PATH)
    # raw: one keep-alive connection and a hand-written request per report, as a runtime's
    # libcurl costs; httpx under trio costs milliseconds a request on a loaded machine
    return PeSimulator(base, {r: (cfg.pe,) for r in cfg.regions}, token=cfg.token,
                       bind=(cfg.pod_ip, peobjects.CR_PORT), raw=True,
                       triggers={cfg.pe: dict(cfg.triggers)}, forward=conn.forward,
                       trigger_period=TRIGGER_PERIOD, poll_also=POLL_ALSO, ready=conn.wait_full,
                       keep_seen=KEEP_SEEN)


async def _regions(cfg: PeConfig, sim: Any) -> None:
    """Answer the operator's notifications; when the operator is away (not up yet, restarting),
    start again shortly (on a fresh connection)."""
    while True:
        try:
            await sim.run()
        except* HTTP_ERRORS as group:
            log.info("PE %s: the operator is not answering (%s); again shortly", cfg.pe, group.exceptions[0])
        await trio.sleep(RECONNECT)


def touch_live(cfg: PeConfig) -> None:
    live = cfg.path(peobjects.LIVE_FILE)
    live.parent.mkdir(parents=True, exist_ok=True)
    live.touch()


async def run_pe(cfg: PeConfig) -> None:
    """Everything a PE does, until cancelled (or a PeConfigError)."""
    touch_live(cfg)
    client = Controller(cfg)
    try:
        await fetch_bundle(cfg, client)
        log.info("PE %s of %s/%s: bundle fetched; %d inputs, %d outgoing connections, regions %s",
                 cfg.pe, cfg.namespace, cfg.job, len(cfg.inputs), len(cfg.outputs), list(cfg.regions))
        conn = Connectivity(cfg, client)
        if cfg.regions:
            conn.sim = region_simulator(cfg, conn)
            await conn.sim.open_sockets()          # before any report: healthy means it can hear
        async with trio.open_nursery() as nursery:
            for iport in cfg.inputs:
                await nursery.start(_serve_input, cfg, conn, iport)
            for out in sorted(set(cfg.outputs)):
                nursery.start_soon(_connect_output, cfg, conn, out)
            nursery.start_soon(conn.report)
            if conn.sim is not None:
                nursery.start_soon(_regions, cfg, conn.sim)
    finally:
        await client.aclose()


def main(env: Mapping[str, str] | None = None) -> None:
    trio.run(run_pe, read_config(os.environ if env is None else env))
