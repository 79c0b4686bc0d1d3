"""The name service's answers (streams/nameservice.py) are OpenStreams' controller's: what a PE's
runtime reads (status codes, `text/plain` job names, Service port maps, `canonicalName`), on a
real sim-cluster's Services, through the real endpoint on 127.0.0.1. The caller holds the job's
token (who may ask is tests/security/test_streams_nameservice_auth.py)."""

from __future__ import annotations

import pytest
import httpx
import trio

from tests.simcluster.test_simcluster import start_cluster, stop_cluster
from streams import crds, jobids, kubecalls as kube, peobjects
from streams.bundleserver import BundleServer, serve


@pytest.fixture
def sim():
    proc, url = start_cluster("--nodes", "1", "--no-process-pods")
    try:
        yield url
    finally:
        stop_cluster(proc)


async def served(api: httpx.AsyncClient, tmp_path, jobs: list[dict], pes: set[tuple[str, int]], nursery):
    server = BundleServer(api, bundle_dir=str(tmp_path), cache_dir=str(tmp_path / "c"),
                          pe_launch=lambda _ns, name, pe: 1 if (name, pe) in pes else None, jobs=lambda: jobs)
    host, port = await nursery.start(serve, server, "127.0.0.1:0")
    return f"http://{host}:{port}"


async def test_openstreams_answers_for_names_endpoints_and_subscriptions(sim, tmp_path):
    async with httpx.AsyncClient(base_url=sim) as api, trio.open_nursery() as nursery:
        await crds.install(api)
        made = await kube.create(api, {"apiVersion": "streams.ibm.com/v1", "kind": "Job",
                                       "metadata": {"name": "app", "namespace": "default"},
                                       "spec": {"bundle": {"name": "a.sab", "file": {"path": "a.sab"}}}})
        made = await kube.put_status(api, made, {"phase": "Submitted", "jobId": 4})
        owner = {"apiVersion": "streams.ibm.com/v1", "kind": "Job", "name": "app", "uid": made["metadata"]["uid"]}
        token = peobjects.new_token()
        await kube.create(api, peobjects.token_secret("default", "app", token, owner))
        for index, inputs in ((0, 0), (1, 2)):
            await kube.create(api, peobjects.pe_service("default", "app", index, inputs, owner))
        jobs = [made]
        base = await served(api, tmp_path, jobs, {("app", 0), ("app", 1), ("app", 2)}, nursery)
        auth = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=base + "/api", headers=auth) as pe:
            got = await pe.get("/state/default/by-id/4/name")
            assert (got.status_code, got.text, got.headers["content-type"]) == (200, "app", "text/plain")
            assert jobids.job_named_by(jobs, "default", 4) == "app"

            # the peer's Service ports by name, as the API server holds them
            got = await pe.get("/endpoints/default/app/pe/1")
            assert got.status_code == 200
            ports = got.json()
            assert set(ports) == {"sys-0", "sys-1", "sys-metrics", "sys-notifications", "sys-consistentregion"}
            assert (ports["sys-1"]["port"], ports["sys-1"]["protocol"]) == (10001, "TCP")
            assert ports["sys-notifications"]["protocol"] == "UDP"
            # no such PE, or a PE without its Service: Jersey's NotFoundException
            for path in ("/endpoints/default/app/pe/9", "/endpoints/default/app/pe/2"):
                got = await pe.get(path)
                assert (got.status_code, got.text) == (404, "HTTP 404 Not Found"), path

            # a user endpoint: registered (204), found by name, registered again by its PE (a
            # relaunch: 204), refused under another port or from another PE, removed
            feed = "/endpoints/default/app/pe/0/endpoint/feed"
            assert (await pe.get("/endpoints/default/app/endpoint/feed")).status_code == 404
            body = {"canonicalName": "pod", "port": 20001, "protocol": "TCP"}
            assert (await pe.put(feed, json=body)).status_code == 204
            got = await pe.get("/endpoints/default/app/endpoint/feed")
            assert got.json() == {"canonicalName": "app-0.default", "port": 20001, "protocol": "TCP"}
            service = await kube.get(api, "Service", "default", "app-0")
            assert {"name": "usr-feed", "port": 20001, "protocol": "TCP"}.items() <= \
                next(p for p in service["spec"]["ports"] if p["name"] == "usr-feed").items()
            assert (await pe.put(feed, json=body)).status_code == 204
            for path, again in ((feed, {**body, "port": 20002}),
                                ("/endpoints/default/app/pe/1/endpoint/feed", body)):
                got = await pe.put(path, json=again)
                assert (got.status_code, got.text) == (400, "Port name already exists")
            # bad requests say what is wrong, and change nothing
            for path, bad in ((feed, b"{"), (feed, b'{"port": 0}'), (feed, b'{"port": 1, "protocol": "ICMP"}'),
                              ("/endpoints/default/app/pe/0/endpoint/much-too-long", b'{"port": 20003}')):
                got = await pe.put(path, content=bad)
                assert got.status_code == 400 and got.text, (path, bad)
            got = await pe.put("/endpoints/default/app/pe/0/endpoint/metrics", json={"port": 9696})
            assert (got.status_code, got.text) == (400, "port 9696/TCP is sys-metrics's")
            assert (await pe.delete(feed)).status_code == 204
            got = await pe.delete(feed)
            assert (got.status_code, got.text) == (400, "Port name not found")
            assert (await pe.get("/endpoints/default/app/endpoint/feed")).status_code == 404
            assert [p["name"] for p in (await kube.get(api, "Service", "default", "app-0"))["spec"]["ports"]] == \
                ["sys-metrics", "sys-notifications", "sys-consistentregion"]

            # subscriptions: no broker, so no PE has a board entry (404); its sub-paths likewise
            for path in ("/subscriptions/default/app/pe/0", "/subscriptions/default/app/pe/0/import/0/filter"):
                got = await pe.get(path)
                assert (got.status_code, got.text) == (404, "HTTP 404 Not Found"), path
            assert (await pe.post("/endpoints/default/app/pe/0")).status_code == 405
            assert (await pe.get("/state/default/by-id/x/name")).status_code == 404

            # the job deleted while its token lingers: OpenStreams' unknown job, 400 with no body
            jobs.clear()
            got = await pe.get("/endpoints/default/app/pe/0")
            assert (got.status_code, got.text) == (400, "")
            assert (await pe.get("/state/default/by-id/4/name")).status_code == 401
        nursery.cancel_scope.cancel()


async def test_an_api_server_that_does_not_answer_is_a_503_naming_it(tmp_path):
    """No traceback and no hang for the PE: the name service says the API did not answer."""
    async with httpx.AsyncClient(base_url="http://127.0.0.1:9") as api:    # nothing listens there
        server = BundleServer(api, bundle_dir=str(tmp_path), cache_dir=str(tmp_path / "c"),
                              jobs=lambda: [{"metadata": {"name": "app", "namespace": "default"},
                                             "status": {"jobId": 0}}])
        for path in ("/api/state/default/by-id/0/name", "/api/endpoints/default/app/pe/0"):
            code, body, _ = await server.answer({"type": "http", "method": "GET", "path": path,
                                                 "headers": [(b"authorization", b"Bearer t")],
                                                 "client": ("127.0.0.1", 5)})
            assert code == 503 and b"the Kubernetes API did not answer" in body, path
