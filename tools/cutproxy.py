"""A loopback TCP proxy whose connections a test can cut: a network partition of one process.

`CutProxy(target_port)` listens on 127.0.0.1 (an ephemeral port, `port`) and forwards each
connection to 127.0.0.1:target_port, one thread per direction. `cut()` partitions the client from
the server as a dropped link does: every upstream connection is closed (the API server sees its
client gone, its watches end), while the client's side stays open and silent, and so do new
connections, accepted and never answered: the client's requests hang until its own timeouts, as
across a real partition, rather than failing fast with a reset. `close()` stops the listener and
closes every socket (threads are daemons and end with their sockets).

`python -m tools.cutproxy HOST:PORT` runs one as a process (for a namespace a test cannot enter
with a thread: the real control plane's): it forwards 127.0.0.1 to HOST:PORT, prints its port,
cuts on SIGUSR1 and ends on SIGTERM.

Used by the active/standby tests and `ykshm bench failover`; nothing of it is a role's code.
"""

from __future__ import annotations

import signal
import socket
import sys
import threading


class CutProxy:
    def __init__(self, target_port: int, host: str = "127.0.0.1", target_host: str | None = None) -> None:
        self.target = (target_host or host, target_port)
        self._listener = socket.create_server((host, 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://{host}:{self.port}"
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._upstream: list[socket.socket] = []
        self.is_cut = False
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self.closed:
                    client.close()
                    return
                self._sockets.append(client)
                if self.is_cut:
                    continue            # held open, never answered
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets.append(upstream)
                self._upstream.append(upstream)
                if self.is_cut:
                    upstream.close()
                    continue
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data or self.is_cut:
                    break
                dst.sendall(data)
        except OSError:
            pass
        if not self.is_cut:             # a normal end: pass the close on
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        """Partition: upstream connections closed, the client's left open and silent."""
        with self._lock:
            self.is_cut = True
            upstream, self._upstream = self._upstream, []
        for s in upstream:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        with self._lock:
            self.closed = True
            sockets, self._sockets = self._sockets, []
        try:
            self._listener.shutdown(socket.SHUT_RDWR)   # wakes the accepting thread
        except OSError:
            pass
        self._listener.close()
        for s in sockets:       # shutdown first: it wakes a pump blocked in recv, close does not
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def main(argv: list[str] | None = None) -> int:
    host, _, port = (sys.argv[1:] if argv is None else argv)[0].rpartition(":")
    proxy = CutProxy(int(port), target_host=host.strip("[]"))
    signal.signal(signal.SIGUSR1, lambda *_: proxy.cut())
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(proxy.port, flush=True)
    try:
        while True:
            signal.pause()
    finally:
        proxy.close()


if __name__ == "__main__":
    sys.exit(main())
