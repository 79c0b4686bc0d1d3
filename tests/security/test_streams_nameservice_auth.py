"""The name service on `streams-api` (streams/nameservice.py) plays against an attacker: a job's
name by id, its PEs' endpoints and user endpoints are answered without a token only to the
job's own PE pods (by address), to anyone else only with the job's token.

A real sim-cluster holds the Jobs, Secrets and PE Services; the real endpoint listens on
127.0.0.1; the callers send from bound loopback addresses (127.x.y.z), each playing a pod. Which
address is whose PE pod is given here (`job_at`; streams/pepeers.py decides it in the controller
and has its own tests). Each 401 below fails without the check."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import trio

from streams import crds, kubecalls as kube, peobjects
from streams.bundleserver import BundleServer, serve

VICTIM_POD, OTHER_POD, ELSEWHERE_POD, STRANGER = "127.31.0.1", "127.31.0.2", "127.31.0.3", "127.31.0.9"


def job(name: str, namespace: str = "default") -> dict:
    return {"apiVersion": "streams.ibm.com/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"bundle": {"name": "app.sab", "file": {"path": "app.sab"}}}}


def owner(made: dict) -> dict:
    return {"apiVersion": "streams.ibm.com/v1", "kind": "Job", "name": made["metadata"]["name"],
            "uid": made["metadata"]["uid"]}


async def make_job(api: httpx.AsyncClient, name: str, job_id: int, namespace: str = "default") -> tuple[dict, str]:
    """A launched job: its status.jobId, its token Secret and two PE Services; (Job, token)."""
    made = await kube.create(api, job(name, namespace))
    assert made is not None
    made = await kube.put_status(api, made, {"phase": "Submitted", "jobId": job_id})
    token = peobjects.new_token()
    await kube.create(api, peobjects.token_secret(namespace, name, token, owner(made)))
    for index in (0, 1):
        await kube.create(api, peobjects.pe_service(namespace, name, index, 1, owner(made)))
    return made, token


async def test_the_name_service_answers_a_jobs_own_pe_pods_and_token_holders_only(api_only_sim, tmp_path: Path):
    victim, other = f"v-{uuid.uuid4().hex[:6]}", f"o-{uuid.uuid4().hex[:6]}"
    async with httpx.AsyncClient(base_url=api_only_sim) as api:
        await crds.install(api)
        await api.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace",
                                                   "metadata": {"name": "elsewhere"}})
        jobs = [(await make_job(api, victim, 7)), (await make_job(api, other, 8)),
                (await make_job(api, victim, 3, "elsewhere"))]
        tokens = {victim: jobs[0][1], other: jobs[1][1]}
        pods = {VICTIM_POD: ("default", victim), OTHER_POD: ("default", other),
                ELSEWHERE_POD: ("elsewhere", victim)}
        pes = {("default", victim, 0), ("default", victim, 1), ("default", other, 0), ("default", other, 1)}
        server = BundleServer(api, bundle_dir=str(tmp_path), cache_dir=str(tmp_path / "cache"),
                              pe_launch=lambda ns, name, pe: 1 if (ns, name, pe) in pes else None,
                              job_at=pods.get, jobs=lambda: [j for j, _ in jobs])
        async with trio.open_nursery() as nursery:
            host, port = await nursery.start(serve, server, "127.0.0.1:0")

            async def call(method: str, path: str, source: str, token: str | None = None,
                           body: bytes = b"") -> httpx.Response:
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                transport = httpx.AsyncHTTPTransport(local_address=source)
                async with httpx.AsyncClient(transport=transport, base_url=f"http://{host}:{port}") as client:
                    return await client.request(method, path, content=body, headers=headers)

            register = b'{"canonicalName": "pod", "port": 20001, "protocol": "TCP"}'
            runtime = [("GET", "/api/state/job/by-id/7/name"), ("GET", f"/api/endpoints/job/{victim}/pe/1"),
                       ("PUT", f"/api/endpoints/job/{victim}/pe/0/endpoint/feed"),
                       ("GET", f"/api/endpoints/job/{victim}/endpoint/feed"),
                       ("GET", f"/api/subscriptions/job/{victim}/pe/0")]
            named = [(m, p.replace("/job/", "/default/", 1)) for m, p in runtime]

            # another job's PE pod, a pod of the same job name in another namespace (its runtime
            # paths are its own job's), an address that is no PE pod, a wrong token, another
            # job's token: 401 on every route, and nothing registered
            for source, token, paths in ((OTHER_POD, None, runtime + named),
                                         (ELSEWHERE_POD, None, runtime[:1] + named),
                                         (STRANGER, None, runtime + named), (STRANGER, "nope", runtime + named),
                                         (STRANGER, tokens[other], runtime + named),
                                         (OTHER_POD, tokens[other], runtime + named)):
                for method, path in paths:
                    resp = await call(method, path, source, token, register if method == "PUT" else b"")
                    assert resp.status_code == 401, (source, token, method, path, resp.text)
                    assert resp.json()["reason"] == "Unauthorized"
            service = await kube.get(api, "Service", "default", f"{victim}-0")
            assert not any(p["name"].startswith("usr-") for p in service["spec"]["ports"])
            # an id no job holds is the same 401 (nothing to probe), even from a PE pod
            assert (await call("GET", "/api/state/job/by-id/9/name", VICTIM_POD)).status_code == 401
            # a PE pod of the same name elsewhere asks its own namespace: it gets its own job's id only
            assert (await call("GET", "/api/state/job/by-id/3/name", ELSEWHERE_POD)).text == victim
            assert (await call("GET", "/api/state/default/by-id/7/name", ELSEWHERE_POD)).status_code == 401

            # the job's own PE pod, no token: OpenStreams' answers
            got = await call("GET", "/api/state/job/by-id/7/name", VICTIM_POD)
            assert (got.status_code, got.text, got.headers["content-type"]) == (200, victim, "text/plain")
            got = await call("PUT", f"/api/endpoints/job/{victim}/pe/0/endpoint/feed", VICTIM_POD, body=register)
            assert got.status_code == 204, got.text
            # ... and the job's token from anywhere, on the path naming the namespace
            got = await call("GET", f"/api/endpoints/default/{victim}/endpoint/feed", STRANGER, tokens[victim])
            assert got.json() == {"canonicalName": f"{victim}-0.default", "port": 20001, "protocol": "TCP"}
            got = await call("GET", "/api/state/default/by-id/7/name", STRANGER, tokens[victim])
            assert got.text == victim
            # the other job's PE pod cannot remove the victim's endpoint either
            assert (await call("DELETE", f"/api/endpoints/job/{victim}/pe/0/endpoint/feed",
                               OTHER_POD)).status_code == 401
            assert (await call("DELETE", f"/api/endpoints/job/{victim}/pe/0/endpoint/feed",
                               VICTIM_POD)).status_code == 204
            nursery.cancel_scope.cancel()
