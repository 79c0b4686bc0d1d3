"""The controller's bundle endpoint plays against an attacker: a PE's bundle (the job's code) is
given only to a caller holding that job's token (Secret `JOB-token`, mounted into its PE pods).

A real sim-cluster holds the Job and its Secret; the real endpoint (`streams.bundleserver`) listens
on 127.0.0.1. Each request below fails without the token check."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
import trio

from streams import appgen, crds, kubecalls as kube, peobjects
from streams.bundleserver import BundleServer, serve


def job(name: str) -> dict:
    return {"apiVersion": "streams.ibm.com/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"bundle": {"name": "app.sab", "file": {"path": "app.sab"}}}}


async def test_the_bundle_needs_this_jobs_token(api_only_sim, tmp_path: Path):
    sab = appgen.make_sab(appgen.pipeline_adl(operators=3))
    (tmp_path / "app.sab").write_bytes(sab)
    names = [f"job-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    tokens = {}
    async with httpx.AsyncClient(base_url=api_only_sim) as api:
        await crds.install(api)
        for name in names:
            made = await kube.create(api, job(name))
            tokens[name] = peobjects.new_token()
            await kube.create(api, peobjects.token_secret("default", name, tokens[name],
                                                          {"apiVersion": "streams.ibm.com/v1", "kind": "Job",
                                                           "name": name, "uid": made["metadata"]["uid"]}))
        launches = {(names[0], 0): 2}     # the victim's PE 0, at its second launch
        server = BundleServer(api, bundle_dir=str(tmp_path), cache_dir=str(tmp_path / "cache"),
                              pe_launch=lambda _ns, name, pe: launches.get((name, pe)))
        async with trio.open_nursery() as nursery:
            host, port = await nursery.start(serve, server, "127.0.0.1:0")
            async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as pe:
                victim, other = names
                url = f"/api/bundles/default/{victim}"

                async def get(headers=None):
                    return await pe.get(url, headers=headers or {})

                # no credential, a wrong one, another scheme, another job's token: 401, no bundle
                for headers in (None, {"Authorization": "Bearer nope"},
                                {"Authorization": f"Basic {tokens[victim]}"},
                                {"Authorization": f"Bearer {tokens[other]}"}):
                    resp = await get(headers)
                    assert resp.status_code == 401, headers
                    body = resp.json()
                    assert (body["kind"], body["reason"], body["code"]) == ("Status", "Unauthorized", 401)
                    assert sab not in resp.content
                # a job that does not exist answers the same as a wrong token (nothing to probe)
                resp = await pe.get("/api/bundles/default/nojob",
                                    headers={"Authorization": f"Bearer {tokens[victim]}"})
                assert resp.status_code == 401
                # the job's own token: the bundle, byte for byte
                resp = await get({"Authorization": f"Bearer {tokens[victim]}"})
                assert resp.status_code == 200 and resp.content == sab
                # writes are not served at all
                resp = await pe.put(url, content=b"x", headers={"Authorization": f"Bearer {tokens[victim]}"})
                assert resp.status_code == 405
                # connectivity: another job's PE cannot report for (or read) this job's PEs
                state = f"/api/state/default/{victim}/pe/0/connectivity"
                for headers in ({}, {"Authorization": f"Bearer {tokens[other]}"}):
                    assert (await pe.put(state, content=b'"Full"', headers=headers)).status_code == 401
                    assert (await pe.get(f"/api/state/default/{victim}/connectivity",
                                         headers=headers)).status_code == 401
                mine = {"Authorization": f"Bearer {tokens[victim]}"}
                assert (await pe.get(f"/api/state/default/{victim}/connectivity", headers=mine)).json() == {}
                assert (await pe.put(state, content=b'"Sideways"', headers=mine)).status_code == 400
                assert (await pe.put(state, content=b'"Full"', headers=mine)).status_code == 204
                got = (await pe.get(f"/api/state/default/{victim}/connectivity", headers=mine)).json()
                assert got["0"]["connectivity"] == "Full" and got["0"]["launch"] == 2
                # a report of a PE the job does not have is refused and kept nowhere
                ghost = f"/api/state/default/{victim}/pe/99999999/connectivity"
                assert (await pe.put(ghost, content=b'"Full"', headers=mine)).status_code == 404
                assert set((await pe.get(f"/api/state/default/{victim}/connectivity", headers=mine)).json()) == {"0"}
            nursery.cancel_scope.cancel()
