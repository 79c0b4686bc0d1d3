"""`ykshm bench web --tls`: the client side of TLS streams and the designs compared.

A stream client reads its socket itself (recvmsg keeps the kernel's receive timestamps), so TLS is
a memory-BIO engine it feeds (`TlsClient`); `TLS_DESIGNS` are the servers `bench web --tls` runs in
turn (plain, TLS on the direct path, TLS handed to hypercorn) and `tls_lines` prints them side by side.
"""

from __future__ import annotations


def client_context(tls_dir: str):
    import ssl

    return ssl.create_default_context(cafile=f"{tls_dir}/ca.crt")


class TlsClient:
    """A client-side TLS engine over a trio socket the caller reads itself (recvmsg keeps its
    kernel timestamps): `handshake`, `send`, and `feed(ciphertext) -> plaintext`."""

    def __init__(self, tls_dir: str) -> None:
        import ssl

        self._ssl = ssl
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = client_context(tls_dir).wrap_bio(self.incoming, self.outgoing,
                                                     server_hostname="127.0.0.1")

    async def handshake(self, sock) -> None:
        while True:
            try:
                self.obj.do_handshake()
                break
            except self._ssl.SSLWantReadError:
                await send_all(sock, self.outgoing.read())
                data = await sock.recv(65536)
                if not data:
                    raise OSError("closed during the TLS handshake")
                self.incoming.write(data)
        await send_all(sock, self.outgoing.read())

    async def send(self, sock, data: bytes) -> None:
        self.obj.write(data)
        await send_all(sock, self.outgoing.read())

    def feed(self, data: bytes) -> bytes:
        if not data:
            return b""
        self.incoming.write(data)
        out = []
        while True:
            try:
                out.append(self.obj.read(262144))
            except (self._ssl.SSLWantReadError, self._ssl.SSLZeroReturnError):
                return b"".join(out)


async def send_all(sock, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[await sock.send(view):]


TLS_DESIGNS = (("plain, direct path", False, ()), ("TLS, direct path", True, ()),
               ("TLS, handed to hypercorn", True, ("--hypercorn-only",)))


TLS_ROUNDS = 3


def tls_lines(results: dict, streams: int, rate: int) -> list[str]:
    """Plain and TLS stream figures side by side (same run, same clients, same rate)."""
    lines = [f"stream over TLS, {streams} clients at {rate} ev/s, {TLS_ROUNDS} rounds round-robin, "
             "median round by CPU (each design its own server; on a machine shared with other work "
             "compare rows of one run only):"]
    for label, r in results["tls"].items():
        lines.append(f"  {label:<26} p50 {r['stream_p50_ms']:6.2f} ms  p99 {r['stream_p99_ms']:7.2f} ms  "
                     f"web CPU {r['stream_cpu_us_per_event']:5.2f} us per delivered event  "
                     f"{r['stream_events_per_s']:,.0f} events/s delivered  (p99 of the rounds: "
                     f"{', '.join(f'{p:g}' for p in r['rounds_p99_ms'])} ms)")
    return lines
