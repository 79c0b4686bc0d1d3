"""Every server on common/http1 reads one normalised path for routing and for its checks (N1).

The security review's reproduction: `//api/consistentregion/region/0/reset` skipped the
cr-operator's token (a prefix test saw a path outside the API) while the router, which strips
slashes, sent it to the reset handler: 204, and the region reset. Here each protected route of each
server is asked, without its credential, through every spelling of its path an attacker can
try: `//`, `///`, a `//` inside, a trailing `/`, `/./`, `/../`, `%2E`, `%2F`. Each answer is a
refusal (400, 401, 403 or 404) and nothing is applied. The requests are written on a raw socket:
an HTTP client would tidy the path before sending it.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import orjson
import pytest
import trio

from shim_k8s.admission.review import Webhook
from streams import appgen, crds, kubecalls as kube, peobjects
from streams.bundleserver import BundleServer, serve as serve_bundles
from streams.regions.fsm import Region, RegionSpec, RegionState
from streams.regions.operator import RegionOperator
from streams.regions.rest import serve as serve_operator
from tests.security.test_streams_bundle_auth import job
from tests.security.test_streams_operator_auth import TOKEN, _healthy, _nowhere

REFUSED = {400, 401, 403, 404}


def spellings(path: str) -> list[str]:
    """The ways of writing `path` (it starts with `/x/y/...`) that a prefix test may read
    differently from a router."""
    head, _, rest = path[1:].partition("/")
    return [
        "/" + path, "//" + path, path + "/", path + "//",
        f"/{head}//{rest}", f"/./{head}/{rest}", f"/{head}/./{rest}",
        f"/nothing/../{head}/{rest}", f"/{head}/{rest}/x/..", f"/%2e/{head}/{rest}",
        f"/{head}/%2E%2e/{head}/{rest}", f"/{head}%2F{rest}", f"%2F{head}/{rest}",
    ]


async def raw_request(url: str, method: str, path: str, body: bytes = b"",
                      headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """One request with `path` sent byte for byte; (status, body)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    head = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", f"Content-Length: {len(body)}",
            "Connection: close", *(f"{k}: {v}" for k, v in (headers or {}).items())]
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        await stream.send_all(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        answer = b""
        with trio.fail_after(10):
            while chunk := await stream.receive_some(65536):
                answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


OPERATOR_ROUTES = [
    ("PUT", "/api/consistentregion/region/0/reset", orjson.dumps({"request": {"force": "true"}})),
    ("PUT", "/api/consistentregion/region/0/drain", orjson.dumps({"request": {"seqId": "1"}})),
    ("PUT", "/api/consistentregion/region/0/pe/1/checkpoint", b"7"),
    ("PUT", "/api/consistentregion/region/0/pe/1/blockingcheckpoint", b"7"),
    ("PUT", "/api/consistentregion/region/0/pe/1/reset",
     orjson.dumps({"progress": {"seqId": "1", "resetAttempt": "0"}})),
    ("GET", "/api/consistentregion/pe/1", b""),
    ("GET", "/api/consistentregion/pe/1/region/0", b""),
    ("GET", "/api/consistentregion/region/0/state", b""),
    ("GET", "/api/consistentregion/region/0/lastcompletedseqid", b""),
]


@pytest.mark.parametrize("direct", [True, False])
async def test_the_operator_token_holds_for_every_spelling_of_every_route(direct):
    region = Region(RegionSpec(0, trigger="operatorDriven", period=0.0, drain_timeout=3600.0,
                               reset_timeout=3600.0, max_attempts=3, pes=frozenset((1, 2))))
    operator = RegionOperator("ns/job", [region], status_writer=_nowhere, health_source=_healthy)
    auth = {"Authorization": f"Bearer {TOKEN.decode()}"}
    async with trio.open_nursery() as nursery:
        url = await nursery.start(lambda task_status: serve_operator(
            operator, "127.0.0.1:0", direct=direct, token=TOKEN, task_status=task_status))
        with trio.fail_after(10):
            while (await raw_request(url, "GET", "/api/consistentregion/region/0/state",
                                     headers=auth))[1] != b'"PROCESSING"':
                await trio.sleep(0.02)
        for method, path, body in OPERATOR_ROUTES:
            for spelled in spellings(path):
                status, answer = await raw_request(url, method, spelled, body)
                assert status in REFUSED, (method, spelled, status, answer)
                assert b"PROCESSING" not in answer and b"resumeSubmission" not in answer
        assert region.state is RegionState.PROCESSING and region.last_completed_seq != 7
        # the same normalised path routes the token holder: `//` and a trailing `/` are the route
        assert (await raw_request(url, "GET", "//api/consistentregion/region/0/state/",
                                  headers=auth))[0] == 200
        status, answer = await raw_request(url, "GET", "/api/consistentregion/region/0/../0/state",
                                           headers=auth)
        assert status == 400 and orjson.loads(answer)["status_code"] == 400
        nursery.cancel_scope.cancel()


async def test_the_bundle_token_holds_for_every_spelling_of_every_route(api_only_sim, tmp_path: Path):
    sab = appgen.make_sab(appgen.pipeline_adl(operators=3))
    (tmp_path / "app.sab").write_bytes(sab)
    name = f"job-{uuid.uuid4().hex[:6]}"
    async with httpx.AsyncClient(base_url=api_only_sim) as api:
        await crds.install(api)
        made = await kube.create(api, job(name))
        token = peobjects.new_token()
        await kube.create(api, peobjects.token_secret("default", name, token, {
            "apiVersion": "streams.ibm.com/v1", "kind": "Job", "name": name, "uid": made["metadata"]["uid"]}))
        server = BundleServer(api, bundle_dir=str(tmp_path), cache_dir=str(tmp_path / "cache"),
                              pe_launch=lambda _ns, _name, pe: 1 if pe == 0 else None)
        async with trio.open_nursery() as nursery:
            host, port = await nursery.start(serve_bundles, server, "127.0.0.1:0")
            url = f"http://{host}:{port}"
            routes = [("GET", f"/api/bundles/default/{name}", b""),
                      ("PUT", f"/api/state/default/{name}/pe/0/connectivity", b'"Full"'),
                      ("GET", f"/api/state/default/{name}/connectivity", b"")]
            for method, path, body in routes:
                for spelled in spellings(path):
                    status, answer = await raw_request(url, method, spelled, body)
                    assert status in REFUSED, (method, spelled, status)
                    assert sab not in answer
            assert server.connectivity == {}
            mine = {"Authorization": f"Bearer {token}"}
            status, answer = await raw_request(url, "GET", f"//api/bundles/default/{name}/", headers=mine)
            assert status == 200 and answer == sab
            nursery.cancel_scope.cancel()


async def test_the_webhook_reads_the_same_normalised_path():
    """The admission webhook: a dot segment is a 400 (never a guess), `//mutate/` is /mutate."""
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    webhook = Webhook(cache=None, client=None)  # type: ignore[arg-type] # no request reaches them
    dot = b"a '.' or '..' path segment is not allowed\n"
    for path, status, text in (("/./mutate", 400, dot), ("/x/../mutate", 400, dot),
                               ("/mutate/.", 400, dot), ("//mutate/", 400, b"empty or invalid body\n"),
                               ("//health", 200, b"OK\r\n"), ("/health/x", 404, b"404 page not found\n")):
        sent.clear()
        await webhook({"type": "http", "method": "POST", "path": path, "headers": []}, receive, send)
        assert (sent[0]["status"], sent[1]["body"]) == (status, text), path


@pytest.fixture(scope="module")
def web():
    from webharness import WebServer, cleanup, unique_name
    name = unique_name()
    server = WebServer(name, workers=1)
    yield server
    server.stop()
    cleanup(name)


async def test_the_web_cross_origin_gate_holds_for_every_spelling(web):
    """The web's one state-changing route (validate-conf): a cross-origin POST is refused whatever
    the path's spelling, and a dot segment is YuniKorn's 400 body."""
    evil = {"Origin": "http://evil.example", "Content-Type": "text/plain"}
    for spelled in spellings("/ws/v1/validate-conf"):
        status, answer = await raw_request(web.url, "POST", spelled, b"partitions: []\n", evil)
        assert status in REFUSED, (spelled, status)
        assert b'"allowed"' not in answer
    status, answer = await raw_request(web.url, "POST", "/ws/v1/./validate-conf", b"{}")
    assert (status, orjson.loads(answer)["status_code"]) == (400, 400)
    assert (await raw_request(web.url, "POST", "//ws/v1/validate-conf/", b"{}"))[0] == 200
