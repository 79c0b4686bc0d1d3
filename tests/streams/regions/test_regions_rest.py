"""The REST API over real hypercorn on 127.0.0.1: the PE runtime's bodies, every refusal with its
status and JSON reason, and the region unharmed after all of them."""

from __future__ import annotations

from contextlib import asynccontextmanager

import httpx
import orjson
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.regions.fsm import Region, RegionSpec
from streams.regions.vocabulary import Timeout, TimerKind
from streams.regions.health import Health
from streams.regions.operator import RegionOperator
from streams.regions.rest import BASE, RegionApi, serve

PES = (1, 2, 3)


class Store:
    def __init__(self) -> None:
        self.status: dict[int, dict] = {}

    async def write(self, index: int, doc: dict) -> None:
        self.status[index] = doc


async def healthy(index: int) -> Health:
    return Health(True)


def periodic() -> Region:
    return Region(RegionSpec(0, trigger="periodic", period=3600.0, drain_timeout=3600.0,
                             reset_timeout=3600.0, max_attempts=3, pes=frozenset(PES)))


def driven() -> Region:
    return Region(RegionSpec(1, trigger="operatorDriven", drain_timeout=3600.0, pes=frozenset(PES),
                             start_operators={"Beacon": True, "Other": True},
                             trigger_operators={"Beacon": True, "Other": False}))


@asynccontextmanager
async def running(*regions):
    store = Store()
    async with trio.open_nursery() as nursery:
        op = RegionOperator("ns/job", regions, status_writer=store.write, health_source=healthy)
        url = await nursery.start(serve, op)
        assert url.startswith("http://127.0.0.1:")
        await trio.testing.wait_all_tasks_blocked()
        async with httpx.AsyncClient(base_url=url) as client:
            yield op, client, store
        nursery.cancel_scope.cancel()


def drain_period(op: RegionOperator, index: int = 0) -> None:
    op.post(index, Timeout(TimerKind.DRAIN_PERIOD, op.region(index).timer_seq))


async def settle():
    await trio.testing.wait_all_tasks_blocked()


async def test_a_drain_round_with_the_pe_runtime_bodies():
    async with running(periodic()) as (op, client, store):
        r = await client.get(BASE + "/pe/1")
        assert r.status_code == 404 and r.json()["reason"] == "notFound"
        drain_period(op)
        await settle()
        r = await client.get(BASE + "/pe/1")
        assert r.status_code == 200
        assert r.json() == {"0": {"type": "triggerDrain", "message": "seqId=1"}}
        r = await client.get(BASE + "/pe/2/region/0")
        assert r.json() == {"type": "triggerDrain", "message": "seqId=1"}
        assert (await client.get(BASE + "/pe/2/region/5")).status_code == 404
        for pe in PES:
            r = await client.put(f"{BASE}/region/0/pe/{pe}/checkpoint", content=b"1")
            assert r.status_code == 204, r.text
        assert store.status[0]["lastCompletedSeqID"] == 1  # visible before the answer
        r = await client.get(BASE + "/pe/3")
        assert r.json() == {"0": {"type": "resumeSubmission", "message": "seqId=2;retId=0;pendCkpt=0"}}
        values = {f: (await client.get(f"{BASE}/region/0/{f}")).json() for f in (
            "state", "lastcompletedseqid", "trigger", "period", "draintimeout", "resettimeout",
            "maxconsecutiveresetattempts")}
        assert values == {"state": "PROCESSING", "lastcompletedseqid": 1, "trigger": "periodic",
                          "period": 3600.0, "draintimeout": 3600.0, "resettimeout": 3600.0,
                          "maxconsecutiveresetattempts": 3}
        r = await client.get("/metrics")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        assert 'last_completed_drain_seq_id{job="ns/job",region="0"} 1.0' in r.text


async def test_blocking_checkpoints_then_reset_with_string_and_number_bodies():
    async with running(periodic()) as (op, client, store):
        drain_period(op)
        await settle()
        for pe in PES:
            r = await client.put(f"{BASE}/region/0/pe/{pe}/blockingcheckpoint", content=b" 1\n")
            assert r.status_code == 204, r.text
        assert (await client.get(BASE + "/pe/1/region/0")).json()["message"] == \
            "seqId=2;retId=0;pendCkpt=1"
        r = await client.put(BASE + "/region/0/reset", json={"request": {"force": "false"}})
        assert r.status_code == 204
        assert (await client.get(BASE + "/pe/1/region/0")).json() == {
            "type": "triggerReset", "message": "seqId=0;resetAttempt=0"}
        r = await client.put(BASE + "/region/0/pe/1/reset",
                             json={"progress": {"seqId": "0", "resetAttempt": "0"}})
        assert r.status_code == 204
        r = await client.put(BASE + "/region/0/pe/2/reset",
                             json={"progress": {"seqId": 0, "resetAttempt": 0}})
        assert r.status_code == 204
        r = await client.put(BASE + "/region/0/pe/3/reset",
                             content=b'{"progress":{"seqId":"0","resetAttempt":"0"}}')
        assert r.status_code == 204
        assert store.status[0]["state"] == "PROCESSING"
        r = await client.put(BASE + "/region/0/reset", json={"request": {"force": True}})
        assert r.status_code == 204 and store.status[0]["currentMaxResetAttempts"] == 1 + 3


async def test_an_operator_driven_drain():
    async with running(driven()) as (op, client, store):
        body = {"request": {"seqId": "1", "operator": "Beacon"}}
        r = await client.put(BASE + "/region/1/drain", json=body)
        assert r.status_code == 204 and store.status[1]["state"] == "DRAINING"
        r = await client.put(BASE + "/region/1/drain", json=body)
        assert r.status_code == 409 and r.json()["reason"] == "notExpected"
        for pe in PES:
            assert (await client.put(f"{BASE}/region/1/pe/{pe}/checkpoint", content=b"1")).status_code == 204
        assert (await client.get(BASE + "/region/1/state")).json() == "PROCESSING"


REFUSALS = [
    # (method, path, body, status, reason, a word the message names)
    ("PUT", "/region/0/pe/1/checkpoint", b"abc", 400, "invalidRequest", "seqId"),
    ("PUT", "/region/0/pe/1/checkpoint", b"", 400, "invalidRequest", "seqId"),
    ("PUT", "/region/0/pe/one/checkpoint", b"1", 400, "invalidRequest", "peId"),
    ("PUT", "/region/x/pe/1/checkpoint", b"1", 400, "invalidRequest", "regionId"),
    ("PUT", "/region/99999999999999999999/pe/1/checkpoint", b"1", 400, "invalidRequest", "range"),
    ("PUT", "/region/0/pe/1/checkpoint", b"9223372036854775808", 400, "invalidRequest", "range"),
    ("PUT", "/region/0/pe/1/checkpoint", b"2", 409, "sequenceMismatch", "seqId 1"),
    ("PUT", "/region/0/pe/1/checkpoint", b"1", 409, "duplicateReport", "already"),
    ("PUT", "/region/0/pe/99/checkpoint", b"1", 404, "unknownPE", "99"),
    ("PUT", "/region/7/pe/1/checkpoint", b"1", 404, "unknownRegion", "7"),
    ("PUT", "/region/0/pe/2/reset", b"{}", 400, "invalidRequest", "progress"),
    ("PUT", "/region/0/pe/2/reset", b"not json", 400, "invalidRequest", "progress"),
    ("PUT", "/region/0/pe/2/reset", b'{"progress":{"seqId":"0"}}', 400, "invalidRequest",
     "progress.resetAttempt"),
    ("PUT", "/region/0/pe/2/reset", b'{"progress":{"seqId":"0","resetAttempt":"0"}}', 409,
     "notExpected", "DRAINING"),
    ("PUT", "/region/0/drain", b'{"request":{"seqId":"1"}}', 400, "invalidRequest",
     "request.operator"),
    ("PUT", "/region/0/drain", b'{"request":{"seqId":"1","operator":"Nobody"}}', 404,
     "unknownOperator", "Nobody"),
    ("PUT", "/region/1/drain", b'{"request":{"seqId":"1","operator":"Other"}}', 409,
     "notExpected", "does not trigger"),
    ("PUT", "/region/1/drain", b'{"request":{"seqId":"9","operator":"Beacon"}}', 409,
     "sequenceMismatch", "9"),
    ("PUT", "/region/0/reset", b'{"request":{"force":"maybe"}}', 400, "invalidRequest",
     "request.force"),
    ("PUT", "/region/0/reset", b'[]', 400, "invalidRequest", "request"),
    ("GET", "/region/0/colour", b"", 404, "notFound", "colour"),
    ("GET", "/nowhere", b"", 404, "notFound", "nowhere"),
    ("DELETE", "/region/0/drain", b"", 405, "methodNotAllowed", "DELETE"),
    ("PUT", "/region/0/pe/1/checkpoint", b"1" * 70000, 413, "payloadTooLarge", "65536"),
]


async def test_every_refusal_names_why_and_leaves_the_regions_unharmed():
    async with running(periodic(), driven()) as (op, client, store):
        drain_period(op)
        await settle()
        r = await client.put(BASE + "/region/0/pe/1/checkpoint", content=b"1")
        assert r.status_code == 204
        before = {i: dict(doc) for i, doc in store.status.items()}
        for method, path, body, status, reason, word in REFUSALS:
            r = await client.request(method, BASE + path, content=body)
            assert r.status_code == status, (path, body, r.text)
            doc = r.json()
            assert doc["status_code"] == status and doc["reason"] == reason, (path, doc)
            assert word in doc["message"], (word, doc)
            assert r.headers["content-type"] == "application/json"
            if status == 405:
                assert r.headers["allow"] == "PUT"
        assert store.status == before
        for pe in (2, 3):
            assert (await client.put(f"{BASE}/region/0/pe/{pe}/checkpoint", content=b"1")).status_code == 204
        assert (await client.get(BASE + "/region/0/state")).json() == "PROCESSING"


@pytest.mark.parametrize("body", [b'"1"', b"1"])
async def test_a_quoted_sequence_id_is_taken_too(body):
    async with running(periodic()) as (op, client, store):
        drain_period(op)
        await settle()
        r = await client.put(BASE + "/region/0/pe/1/checkpoint", content=body)
        assert r.status_code == 204


# -- fuzz: whatever a client sends, a JSON answer from the documented set, never a 500 ---------------

PATHS = st.one_of(
    st.sampled_from(["/region/0/pe/1/checkpoint", "/region/0/pe/2/blockingcheckpoint",
                     "/region/0/pe/3/reset", "/region/0/drain", "/region/0/reset",
                     "/region/1/drain", "/pe/1", "/pe/1/region/0", "/region/0/state"]),
    st.builds(lambda a, b: f"/region/{a}/pe/{b}/checkpoint",
              st.sampled_from(["0", "-1", "x", "99999999999999999999", "%20", ""]),
              st.sampled_from(["1", "0", "abc", "1e3", "٣"])))
BODIES = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([b"1", b"-5", b'"1"', b"null", b"[]", b"{}", b'{"progress":[]}',
                     b'{"progress":{"seqId":null,"resetAttempt":"0"}}',
                     b'{"progress":{"seqId":true,"resetAttempt":"0"}}',
                     b'{"progress":{"seqId":"0","resetAttempt":"0"}}',
                     b'{"request":{"seqId":"1","operator":5}}',
                     b'{"request":{"seqId":"1","operator":"Beacon"}}',
                     b'{"request":{"force":1}}', b'{"request":{"force":"TRUE"}}']),
    st.dictionaries(st.sampled_from(["progress", "request"]), st.dictionaries(
        st.sampled_from(["seqId", "resetAttempt", "operator", "force"]),
        st.one_of(st.text(max_size=5), st.integers(-2, 3), st.booleans(), st.none())), max_size=2
    ).map(orjson.dumps))


async def call(app, method, path, body):
    sent = []
    received = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        return received.pop(0) if received else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": BASE + path, "headers": [],
             "query_string": b""}
    await app(scope, receive, send)
    return sent[0]["status"], sent[1]["body"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(requests=st.lists(st.tuples(st.sampled_from(["GET", "PUT", "POST"]), PATHS, BODIES),
                         min_size=1, max_size=6))
async def test_fuzz_only_documented_answers(requests):
    store = Store()
    op = RegionOperator("ns/job", [periodic(), driven()], status_writer=store.write,
                        health_source=healthy)
    app = RegionApi(op)
    async with trio.open_nursery() as nursery:
        await nursery.start(op.run)
        await trio.testing.wait_all_tasks_blocked()
        drain_period(op)
        await trio.testing.wait_all_tasks_blocked()
        for method, path, body in requests:
            status, answer = await call(app, method, path, body)
            assert status in (200, 204, 400, 404, 405, 409), (method, path, body, answer)
            if status >= 400:
                doc = orjson.loads(answer)
                assert doc["status_code"] == status and doc["reason"] and doc["message"]
        # the region still works: a full round completes
        region = op.region(0)
        if region.state.name == "DRAINING":
            for pe in PES:
                await call(app, "PUT", f"/region/0/pe/{pe}/checkpoint", str(region.current_seq).encode())
            assert region.state.name == "PROCESSING"
        nursery.cancel_scope.cancel()
