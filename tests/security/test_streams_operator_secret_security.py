"""The cr-operator fails closed: an attacker who deletes a job's token Secret (`JOB-token`) and gets
the operator restarted must not find its API open. Without the Secret the operator binds nothing
(no answer to anyone) and says so on its ConsistentRegionOperator (`WaitingForSecret`, what the
controller's repair answers); once a Secret exists again it serves, to its token holders only.

A real sim-cluster holds the Job, its ConsistentRegion, ConsistentRegionOperator and Secret; the
real operator (`operator_process.JobRegions`, its REST listener on 127.0.0.1) runs in the test.
Fails without the wait in `JobRegions.wait_token` (the operator served without authentication)."""

from __future__ import annotations

import socket
import uuid

import httpx
import orjson
import pytest
import trio

from streams import crds, kubecalls as kube, objects, peobjects
from streams.croobjects import WAITING_FOR_SECRET
from streams.jobspec import read_job
from streams.model import ConsistentRegionSpec
from streams.operator_process import JobRegions

ATTACKS = [
    ("PUT", "/api/consistentregion/region/0/reset", orjson.dumps({"request": {"force": "true"}})),
    ("PUT", "/api/consistentregion/region/0/pe/0/checkpoint", b"1"),
    ("GET", "/api/consistentregion/region/0/state", b""),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def make_job(api: httpx.AsyncClient, name: str) -> dict:
    job = await kube.create(api, {"apiVersion": "streams.ibm.com/v1", "kind": "Job",
                                  "metadata": {"name": name, "namespace": "default"},
                                  "spec": {"bundle": {"name": "a.sab", "file": {"path": "a.sab"}}}})
    spec = read_job(job)
    region = ConsistentRegionSpec(0, "periodic", period=3600.0, start_operators=("op0",), operators=("op0",))
    await kube.create(api, objects.consistent_region_object(spec, job, region, [0]))
    await kube.create(api, objects.region_operator_object(spec, job, 1))
    return job


async def attacked(url: str) -> list[object]:
    """What each unauthenticated request got: a status code, or "no answer"."""
    out: list[object] = []
    async with httpx.AsyncClient(base_url=url, timeout=5) as attacker:
        for method, path, body in ATTACKS:
            try:
                out.append((await attacker.request(method, path, content=body)).status_code)
            except httpx.TransportError:
                out.append("no answer")
    return out


async def test_without_its_secret_the_operator_serves_nothing_then_only_token_holders(api_only_sim):
    name = f"j-{uuid.uuid4().hex[:6]}"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=api_only_sim) as api:
        await crds.install(api)
        job = await make_job(api, name)
        owner = objects.owner_ref(job)
        await kube.create(api, peobjects.token_secret("default", name, peobjects.new_token(), owner))

        # the attacker deletes the Secret; the operator (re)starts without it
        assert await kube.delete(api, "Secret", "default", peobjects.token_secret_name(name))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: JobRegions(api, "default", name).run(f"127.0.0.1:{port}"))
            with trio.fail_after(30):
                while ((await kube.get(api, "ConsistentRegionOperator", "default", name)).get("status") or {}) \
                        .get("phase") != WAITING_FOR_SECRET:
                    await trio.sleep(0.05)
            assert await attacked(url) == ["no answer"] * len(ATTACKS)

            # the Secret made again (what the controller's repair does): served, to its holders only
            token = peobjects.new_token()
            await kube.create(api, peobjects.token_secret("default", name, token, owner))
            auth = {"Authorization": f"Bearer {token}"}
            async with httpx.AsyncClient(base_url=url, timeout=5) as pe:
                with trio.fail_after(30):
                    while True:
                        try:
                            state = await pe.get("/api/consistentregion/region/0/state", headers=auth)
                            break
                        except httpx.TransportError:
                            await trio.sleep(0.1)
            assert state.status_code == 200
            assert await attacked(url) == [401] * len(ATTACKS)
            cro = await kube.get(api, "ConsistentRegionOperator", "default", name)
            assert cro["status"]["phase"] == "Running" and "message" not in cro["status"]
            nursery.cancel_scope.cancel()
