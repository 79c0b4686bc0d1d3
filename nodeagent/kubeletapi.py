"""The kubelet's HTTPS endpoint, for what kube-apiserver forwards to a node: container logs.

`kubectl logs POD` asks kube-apiserver, which connects to the node's `status.daemonEndpoints
.kubeletEndpoint.Port` at its InternalIP (the agent reports no Hostname address, which the
apiserver would try first) and GETs `/containerLogs/NS/POD/CONTAINER` with `follow`, `previous`,
`tailLines`, `limitBytes`. This server answers that path from the process pods' log files
(`simcluster.podlogs`, the same code as sim-cluster's pods/log) and 404 for anything else.

HTTPS with a serving certificate of its own CA (made in the pods directory; kube-apiserver runs
without `--kubelet-certificate-authority` and does not check it). It asks no client certificate:
the real-plane run gives kube-apiserver no kubelet client certificate, and the address exists
only inside the run's network namespace. Every node of the agent shares it (one host, one port).
"""

from __future__ import annotations

from typing import Any

from simcluster import podlogs
from simcluster.errors import ApiError
from simcluster.httpserver import Request, Response, StreamResponse

Obj = dict[str, Any]


class KubeletApi:
    def __init__(self, mirror: Any, source: podlogs.LogSource) -> None:
        self.mirror = mirror
        self.source = source

    async def handle(self, req: Request) -> Response | StreamResponse:
        parts = req.path.strip("/").split("/")
        if req.method != "GET" or len(parts) != 4 or parts[0] != "containerLogs":
            return Response(404, b"404 page not found\n", "text/plain")
        _, ns, name, container = parts
        pod = self.mirror.get("pods", ns, name)
        if pod is None:
            return Response(404, f'pod "{name}" not found on this node\n'.encode(), "text/plain")
        req.query = {**req.query, "container": [container]}
        try:
            return podlogs.respond(self.source, pod, req)
        except ApiError as exc:
            return Response(exc.code, f"{exc.message}\n".encode(), "text/plain")
