"""A real HTTPS server for the bundle-fetch tests (run as a subprocess, stopped by pid).

    python https_server.py CERT_CHAIN_PEM KEY_PEM DIRECTORY

Prints its port, then serves on 127.0.0.1:
  GET /files/NAME                        DIRECTORY/NAME, or 404
  GET /repos/U/R/contents/NAME           as GitHub's API v3: 415 unless `Accept:
                                         application/vnd.github.v3.raw`; 401 unless `Authorization:
                                         token T` where T is DIRECTORY/.token (when that file exists)
"""

from __future__ import annotations

import http.server
import pathlib
import re
import ssl
import sys


def main() -> None:
    cert, key, directory = sys.argv[1:4]
    root = pathlib.Path(directory)

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def send(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def serve_file(self, name: str) -> None:
            path = root / name
            if "/" in name or not path.is_file():
                self.send(404, b"not found")
            else:
                self.send(200, path.read_bytes())

        def do_GET(self) -> None:
            if self.path.startswith("/files/"):
                self.serve_file(self.path[len("/files/"):])
                return
            match = re.fullmatch(r"/repos/[^/]+/[^/]+/contents/(.+)", self.path)
            if not match:
                self.send(404, b"not found")
                return
            if self.headers.get("Accept") != "application/vnd.github.v3.raw":
                self.send(415, b"raw only")
                return
            token = root / ".token"
            if token.exists() and self.headers.get("Authorization") != f"token {token.read_text()}":
                self.send(401, b"bad credentials")
                return
            self.serve_file(match.group(1))

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
