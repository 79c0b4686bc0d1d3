"""A real HTTPS server that authenticates as a kube-apiserver does, for the credential tests
(run as a subprocess, stopped by pid).

    python apiserver_https.py CERT_CHAIN_PEM KEY_PEM DIRECTORY [CLIENT_CA_PEM]

Prints its port, then answers every GET or POST on 127.0.0.1: 200 with an empty list when the
request carries `Authorization: Bearer T` for a T listed in DIRECTORY/tokens (read on every
request, so a test rotates or revokes tokens by rewriting it) or a client certificate signed by
CLIENT_CA_PEM; otherwise 401 with kube-apiserver's Status. Each request appends one line to
DIRECTORY/log: `token T`, `cert CN` or `none`, then the status code.
"""

from __future__ import annotations

import http.server
import json
import pathlib
import ssl
import sys


def main() -> None:
    cert, key, directory = sys.argv[1:4]
    client_ca = sys.argv[4] if len(sys.argv) > 4 else ""
    root = pathlib.Path(directory)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def who(self) -> tuple[str, bool]:
            peer = self.connection.getpeercert() if client_ca else None
            if peer:
                cn = dict(x[0] for x in peer["subject"]).get("commonName", "")
                return f"cert {cn}", True
            auth = self.headers.get("Authorization") or ""
            if auth.startswith("Bearer "):
                token = auth[len("Bearer "):]
                tokens = (root / "tokens").read_text().split() if (root / "tokens").exists() else []
                return f"token {token}", token in tokens
            return "none", False

        def answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            who, ok = self.who()
            if ok:
                code, body = 200, {"kind": "PodList", "apiVersion": "v1",
                                   "metadata": {"resourceVersion": "1"}, "items": []}
            else:
                code, body = 401, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                   "status": "Failure", "message": "Unauthorized",
                                   "reason": "Unauthorized", "code": 401}
            with open(root / "log", "a") as f:
                f.write(f"{who} {code}\n")
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = answer

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    if client_ca:
        context.load_verify_locations(client_ca)
        context.verify_mode = ssl.CERT_OPTIONAL
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
