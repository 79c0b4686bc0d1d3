"""The controller's bundle endpoint plays against an attacker: a PE's bundle (the job's code) is
given only to a caller holding that job's token (Secret `JOB-token`, mounted into its PE pods).

A real sim-cluster holds the Job and its Secret; the real endpoint (`streams.bundleserver`) listens
on 127.0.0.1. Each request below fails without the token check."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

import httpx
import pytest
import trio

from streams import appgen, bundleserver, crds, kubecalls as kube, peobjects
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


async def test_a_path_segment_cannot_steer_the_token_lookup_and_the_token_cache_is_bounded(api_only_sim, tmp_path):
    """Review N12: a Secret named like the job (`demo`, a bundle-source Secret with a token the
    attacker knows) must not stand in for `demo-token` through `demo%3F` (the decoded `?` cut the
    API path to `secrets/demo`), nor any `/`, `..`, `%2F`, `#` in a segment reach an API path; and
    requests naming made-up jobs must not grow the controller's memory."""
    sab = appgen.make_sab(appgen.pipeline_adl(operators=3))
    (tmp_path / "app.sab").write_bytes(sab)
    name = f"demo-{uuid.uuid4().hex[:6]}"
    async with httpx.AsyncClient(base_url=api_only_sim) as api:
        await crds.install(api)
        made = await kube.create(api, job(name))
        await kube.create(api, peobjects.token_secret("default", name, peobjects.new_token(),
                                                      {"apiVersion": "streams.ibm.com/v1", "kind": "Job",
                                                       "name": name, "uid": made["metadata"]["uid"]}))
        await kube.create(api, {"apiVersion": "v1", "kind": "Secret",
                                "metadata": {"name": name, "namespace": "default"},
                                "data": {"token": base64.b64encode(b"KNOWN-TO-ATTACKER").decode()}})
        server = BundleServer(api, bundle_dir=str(tmp_path), cache_dir=str(tmp_path / "cache"))
        async with trio.open_nursery() as nursery:
            host, port = await nursery.start(serve, server, "127.0.0.1:0")
            async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as pe:
                known = {"Authorization": "Bearer KNOWN-TO-ATTACKER"}
                assert (await pe.get(f"/api/bundles/default/{name}", headers=known)).status_code == 401
                for bad in (f"{name}%3F", f"{name}%23", f"{name}%3Fx=", f"..%2F{name}", "%2E%2E",
                            f"{name}%2Fx", f"{name}%252F"):
                    for path in (f"/api/bundles/default/{bad}", f"/api/state/default/{bad}/connectivity"):
                        resp = await pe.get(path, headers=known)
                        assert resp.status_code in (400, 404), (path, resp.status_code)
                        assert sab not in resp.content
                for bad_ns in ("default%3F", "Default", "a%2Fb", ".."):
                    resp = await pe.get(f"/api/bundles/{bad_ns}/{name}", headers=known)
                    assert resp.status_code in (400, 404) and sab not in resp.content
                # 2000 requests for made-up jobs: the token cache stays bounded (misses not kept)
                for i in range(2000):
                    assert (await pe.get(f"/api/bundles/default/ghost-{i}", headers=known)).status_code == 401
                assert len(server.tokens) <= bundleserver.TOKEN_CACHE_MAX
                assert not any(job.startswith("ghost-") for _, job in server.tokens)
            nursery.cancel_scope.cancel()


async def test_the_token_cache_keeps_at_most_its_bound_and_forgets_after_its_ttl(autojump_clock):
    """Many real jobs: the least recently used token goes first; a rotated token takes over after
    TOKEN_TTL (the cache never serves an old token longer)."""
    secrets = {}

    class Api:
        async def get(self, path):
            name = path.rsplit("/", 1)[1]
            value = secrets.get(name)
            if value is None:
                return httpx.Response(404, json={"kind": "Status", "code": 404},
                                      request=httpx.Request("GET", "http://x" + path))
            return httpx.Response(200, json={"data": {"token": base64.b64encode(value).decode()}},
                                  request=httpx.Request("GET", "http://x" + path))

    server = BundleServer(Api(), bundle_dir=".", cache_dir=".")   # type: ignore[arg-type]
    for i in range(bundleserver.TOKEN_CACHE_MAX + 50):
        secrets[f"j{i}-token"] = f"t{i}".encode()
        assert await server.token("default", f"j{i}") == f"t{i}".encode()
    assert len(server.tokens) == bundleserver.TOKEN_CACHE_MAX
    assert ("default", "j0") not in server.tokens
    last = f"j{bundleserver.TOKEN_CACHE_MAX + 49}"
    secrets[f"{last}-token"] = b"rotated"
    await trio.sleep(bundleserver.TOKEN_TTL + 0.1)
    assert await server.token("default", last) == b"rotated"
