"""A small forward proxy for the fetch tests: `CONNECT host:port` (a tunnel) and absolute-URI
requests (`GET http://host:port/path`), to 127.0.0.0/8 targets only (anything else: 502, never a
connection). Listens on 127.0.0.1:0, prints its port; appends each request line to LOG/requests
and every byte a client sends to LOG/bytes. Usage: proxy_server.py LOG_DIR"""

from __future__ import annotations

import ipaddress
import pathlib
import socket
import socketserver
import sys
import threading
from urllib.parse import urlsplit


def loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host) in ipaddress.ip_network("127.0.0.0/8")
    except ValueError:
        return False


def main() -> None:
    log = pathlib.Path(sys.argv[1])
    lock = threading.Lock()

    def record(name: str, data: bytes) -> None:
        with lock, open(log / name, "ab") as f:
            f.write(data)

    def pipe(src: socket.socket, dst: socket.socket, seen: bool) -> None:
        try:
            while data := src.recv(65536):
                if seen:
                    record("bytes", data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                chunk = self.connection.recv(1)
                if not chunk:
                    return
                head += chunk
            record("bytes", head)
            line, *headers = head.decode("latin-1").split("\r\n")
            record("requests", line.encode() + b"\n")
            method, target, _ = line.split(" ", 2)
            if method == "CONNECT":
                host, _, port = target.rpartition(":")
                rest = b""
            else:
                parts = urlsplit(target)
                host, port = parts.hostname or "", str(parts.port or 80)
                kept = [h for h in headers if h and not h.lower().startswith(("proxy-", "connection"))]
                path = parts.path + (f"?{parts.query}" if parts.query else "")
                rest = "\r\n".join([f"{method} {path} HTTP/1.1", *kept, "Connection: close", "", ""]).encode()
            if not loopback(host):
                self.connection.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                return
            upstream = socket.create_connection((host, int(port)))
            if method == "CONNECT":
                self.connection.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                upstream.sendall(rest)
            back = threading.Thread(target=pipe, args=(upstream, self.connection, False), daemon=True)
            back.start()
            pipe(self.connection, upstream, True)
            back.join()
            upstream.close()

    socketserver.ThreadingTCPServer.daemon_threads = True
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler) as server:
        print(server.server_address[1], flush=True)
        server.serve_forever()


if __name__ == "__main__":
    main()
