"""A small HTTPS admission webhook for the sim-cluster tests, run as its own process:

    python tests/simcluster/webhook_server.py CERT_PEM KEY_PEM LOGFILE

Prints `listening PORT` on 127.0.0.1 once ready. Paths: `/mutate` adds the label `mutated=yes`
by JSONPatch; `/deny` refuses with message `no pods named NAME here` and `status.code` 403;
`/hang` never answers; `/garbage` answers text; `/allow` allows; `/wronguid` and `/nouid` mutate
as `/mutate` in an answer whose `response.uid` is another request's or absent (a webhook echoing a
cached uid). Every review it receives is
appended to LOGFILE as one JSON line (the tests read what sim-cluster sent).
"""

from __future__ import annotations

import base64
import json
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _answer(path: str, request: dict) -> dict | None:
    response: dict = {"uid": request["uid"], "allowed": True}
    if path == "/mutate":
        labels = ((request.get("object") or {}).get("metadata") or {}).get("labels")
        ops = [{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}] if labels is not None else \
            [{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}]
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
    if path in ("/wronguid", "/nouid"):
        response = {**_answer("/mutate", request)["response"], "uid": "not-" + request["uid"]}
        if path == "/nouid":
            del response["uid"]
    elif path == "/deny":
        response["allowed"] = False
        response["status"] = {"code": 403, "reason": "Forbidden", "message": f"no pods named {request['name']} here"}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


class Handler(BaseHTTPRequestHandler):
    log_path = ""

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        review = json.loads(body)
        path = self.path.split("?", 1)[0]
        with open(self.log_path, "a") as log:
            log.write(json.dumps({"path": path, "query": self.path.partition("?")[2], "review": review}) + "\n")
        if path == "/hang":
            time.sleep(3600)
            return
        out = b"this is not json" if path == "/garbage" else json.dumps(_answer(path, review["request"])).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


def main() -> None:
    cert, key, log = sys.argv[1:4]
    Handler.log_path = log
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print(f"listening {server.server_address[1]}", flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    main()
