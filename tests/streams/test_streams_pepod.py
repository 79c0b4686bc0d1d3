"""`ykshm pe-sim` as a PE pod's process: what it reads from the pod (AADL ports, regions, token)
and the one line it exits with when the pod does not give it what a PE needs."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from streams import pepod
from streams.adl import parse_adl
from streams.jobspec import read_job
from streams.submission import prepare
from streams_adl import pipeline


def pod_root(tmp_path, index=1, aadl=None, doc=None):
    job = {"apiVersion": "streams.ibm.com/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ns"},
           "spec": {"bundle": {"name": "a.sab", "file": {"path": "a.sab"}}, "fusion": {"manual": 3}}}
    prepared = prepare(parse_adl(pipeline(6)), read_job(job), nodes=3)
    pe_dir = tmp_path / "etc" / "config" / "pe"
    pe_dir.mkdir(parents=True)
    (pe_dir / "aadl.xml").write_bytes(aadl if aadl is not None else prepared.aadls[index])
    (pe_dir / "pe.json").write_bytes(orjson.dumps(doc if doc is not None else {**prepared.docs[index],
                                                                               "consistentRegions": [0]}))
    token_dir = tmp_path / "etc" / "config" / "token"
    token_dir.mkdir(parents=True)
    (token_dir / "token").write_text("tok\n")
    return {"YKSHM_ROOT": str(tmp_path), "STREAMS_INSTANCE_ID": "ns", "STREAMS_JOB_NAME": "j",
            "STREAMS_PE_ID": str(index), "STREAMS_BUNDLE_URL": "http://streams-api.ns:10000/api/bundles/ns/j",
            "POD_IP": "127.0.0.1"}


def test_a_middle_pe_reads_its_ports_peers_regions_and_token(tmp_path):
    cfg = pepod.read_config(pod_root(tmp_path))
    assert (cfg.namespace, cfg.job, cfg.pe, cfg.token, cfg.regions) == ("ns", "j", 1, b"tok", (0,))
    # op2,op3 in PE 1: fed by PE 0 on its input port 0, feeding PE 2's input port 0
    assert cfg.inputs == (0,)
    assert cfg.expected == frozenset({"0.0>0"})
    assert cfg.outputs == ((0, 2, 0),)


@pytest.mark.parametrize("break_it, words", [
    (lambda env, root: env.pop("STREAMS_PE_ID"), "STREAMS_PE_ID is not set"),
    (lambda env, root: (root / "etc/config/pe/aadl.xml").write_text("<x/>"), "not augmentedPE"),
    (lambda env, root: (root / "etc/config/pe/aadl.xml").write_text("<!DOCTYPE x [<!ENTITY a 'b'>]><x>&a;</x>"),
     "not readable"),
    (lambda env, root: (root / "etc/config/token/token").unlink(), "/etc/config/token/token"),
    (lambda env, root: (root / "etc/config/pe/pe.json").write_text("[1]"), "pe.json"),
])
def test_a_pod_without_what_a_pe_needs_exits_with_one_line(tmp_path, break_it, words):
    env = pod_root(tmp_path)
    break_it(env, tmp_path)
    proc = subprocess.run([sys.executable, "-m", "tools.cli", "pe-sim", "/usr/local/streams/system/impl/bin/"
                           "streams-k8s-bootstrap"], env={"PATH": "/usr/bin:/bin", **env},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ykshm pe-sim: error: ") and words in lines[0]


def test_the_pes_requests_survive_a_controller_that_drops_the_connection():
    """The PE's raw keep-alive client: a connection the controller closed (a restart, an idle
    timeout) is dropped and the next request opens a new one; the token goes with each request;
    a URL that is not plain http is refused, not sent in clear to a TLS port."""
    import functools

    import trio

    seen: list[bytes] = []

    async def handle(stream: trio.SocketStream) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            head += await stream.receive_some(4096)
        seen.append(head)
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await stream.aclose()                       # one answer per connection, then gone

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            (listener,) = await nursery.start(functools.partial(trio.serve_tcp, handle, 0, host="127.0.0.1"))
            port = listener.socket.getsockname()[1]
            cfg = pepod.read_config(pod_root_env)
            client = pepod.Controller(cfg)
            url = f"http://127.0.0.1:{port}/api/state/x"
            assert await client.request("GET", url) == (200, b"ok")
            with pytest.raises(pepod.HTTP_ERRORS):
                await client.request("GET", url)    # the server closed it: this one fails ...
            assert await client.request("PUT", url, b'"Full"') == (200, b"ok")   # ... the next reconnects
            with pytest.raises(ValueError, match="only http"):
                await client.request("GET", f"https://127.0.0.1:{port}/x")
            await client.aclose()
            nursery.cancel_scope.cancel()

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        pod_root_env = pod_root(Path(tmp))
        trio.run(main)
    assert len(seen) == 2 and all(b"Authorization: Bearer tok\r\n" in h for h in seen)
    assert seen[1].startswith(b"PUT /api/state/x HTTP/1.1\r\n")


def test_a_peer_lookup_that_hangs_is_given_up_and_the_next_one_connects(tmp_path):
    """A lookup made before the peer's pod was ready may sit in the node resolver's 5 s timeout;
    the PE gives it up after CONNECT_TIMEOUT and looks again, asking for IPv4 only as the
    runtime does, so it connects as soon as the name resolves, not seconds later."""
    import functools
    import socket

    import trio

    asked: list[tuple[str, int]] = []

    class Resolver(trio.abc.HostnameResolver):
        async def getaddrinfo(self, host, port, family=0, type=0, proto=0, flags=0):
            asked.append((host.decode() if isinstance(host, bytes) else host, family))
            if len(asked) == 1:
                await trio.sleep_forever()         # the first query is lost
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

        async def getnameinfo(self, sockaddr, flags):
            raise NotImplementedError

    cfg = pepod.read_config(pod_root(tmp_path, index=1))
    (out,) = cfg.outputs
    port = pepod.peobjects.PE_BASE_PORT + out[2]
    got: list[bytes] = []

    async def main() -> None:
        trio.socket.set_custom_hostname_resolver(Resolver())
        conn = pepod.Connectivity(cfg, client=None)

        async def handle(stream: trio.SocketStream) -> None:
            got.append(await stream.receive_some(256))
            nursery.cancel_scope.cancel()

        async with trio.open_nursery() as nursery:
            await nursery.start(functools.partial(trio.serve_tcp, handle, port, host="127.0.0.1"))
            began = trio.current_time()
            nursery.start_soon(pepod._connect_output, cfg, conn, out)
            with trio.fail_after(pepod.CONNECT_TIMEOUT + 3):
                await trio.sleep_forever()
        assert trio.current_time() - began < pepod.CONNECT_TIMEOUT + 1.5

    trio.run(main)
    assert got == [f"1.{out[0]}>{out[2]}\n".encode()]
    assert asked == [(f"j-{out[1]}.ns", socket.AF_INET)] * 2
