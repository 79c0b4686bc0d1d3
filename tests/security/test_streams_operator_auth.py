"""The cr-operator's REST API plays against an attacker: only a holder of the job's token (the
Secret `JOB-token` its PE pods mount) may read notifications or report, drain or reset a region.

The real API (`regions.rest.serve`, the listener's direct path and hypercorn behind it) listens on
127.0.0.1 with a token; each unauthenticated or wrongly authenticated request is answered 401 and
changes nothing. Fails without the check in `RegionApi.call`."""

from __future__ import annotations

import httpx
import orjson
import pytest
import trio

from streams.regions.fsm import Region, RegionSpec, RegionState
from streams.regions.health import Health
from streams.regions.operator import RegionOperator
from streams.regions.rest import serve

TOKEN = b"job-token-0123456789"
ATTACKS = [
    ("PUT", "/api/consistentregion/region/0/reset", orjson.dumps({"request": {"force": "true"}})),
    ("PUT", "/api/consistentregion/region/0/drain", orjson.dumps({"request": {"seqId": "1"}})),
    ("PUT", "/api/consistentregion/region/0/pe/1/checkpoint", b"1"),
    ("PUT", "/api/consistentregion/region/0/pe/1/reset",
     orjson.dumps({"progress": {"seqId": "1", "resetAttempt": "0"}})),
    ("GET", "/api/consistentregion/pe/1", b""),
    ("GET", "/api/consistentregion/region/0/state", b""),
]


async def _nowhere(index: int, doc: dict) -> None:
    pass


async def _healthy(index: int) -> Health:
    return Health(True)


@pytest.mark.parametrize("direct", [True, False])
async def test_unauthenticated_requests_are_refused_and_change_nothing(direct):
    region = Region(RegionSpec(0, trigger="operatorDriven", period=0.0, drain_timeout=3600.0,
                               reset_timeout=3600.0, max_attempts=3, pes=frozenset((1, 2))))
    operator = RegionOperator("ns/job", [region], status_writer=_nowhere, health_source=_healthy)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(lambda task_status: serve(operator, "127.0.0.1:0", direct=direct,
                                                            token=TOKEN, task_status=task_status))
        async with httpx.AsyncClient(base_url=url) as client:
            auth = {"Authorization": f"Bearer {TOKEN.decode()}"}
            with trio.fail_after(10):
                while orjson.loads((await client.get("/api/consistentregion/region/0/state",
                                                      headers=auth)).content) != "PROCESSING":
                    await trio.sleep(0.02)
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN.decode()}"},
                            {"Authorization": f"Bearer {TOKEN.decode()}x"}):
                for method, path, body in ATTACKS:
                    resp = await client.request(method, path, content=body, headers=headers)
                    assert resp.status_code == 401, (method, path, headers)
                    assert resp.json()["reason"] == "unauthorized"
                    assert resp.headers["www-authenticate"] == "Bearer"
            assert region.state is RegionState.PROCESSING        # no drain, no reset took place
            # the job's token: the same requests are served (a forced reset is taken)
            resp = await client.put(ATTACKS[0][1], content=ATTACKS[0][2], headers=auth)
            assert resp.status_code == 204
            assert region.state is RegionState.RESETTING
            # Prometheus scrapes /metrics without the token
            assert (await client.get("/metrics")).status_code == 200
        nursery.cancel_scope.cancel()
