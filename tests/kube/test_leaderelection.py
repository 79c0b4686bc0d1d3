"""kube.leaderelection against a fake API server holding one Lease (resourceVersion, 409s):
client-go's record and rules, and the fence, on an injected clock (no sleeps)."""

from __future__ import annotations

import httpx
import orjson
import pytest

from kube.leaderelection import Fenced, LeaderElector, LeaseConfig


class FakeLeases:
    """One Lease in default/sched with optimistic concurrency, as kube-apiserver keeps it."""

    def __init__(self) -> None:
        self.lease: dict | None = None
        self.rv = 0
        self.conflict_puts = 0
        self.down = False
        self.puts = 0

    def handler(self, req: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("partitioned")
        if req.method == "GET":
            return httpx.Response(404, json={"kind": "Status", "code": 404}) if self.lease is None \
                else httpx.Response(200, json=self.lease)
        body = orjson.loads(req.content)
        if req.method == "POST":
            if self.lease is not None:
                return httpx.Response(409, json={"kind": "Status", "code": 409, "reason": "AlreadyExists"})
            return self._store(body)
        assert req.method == "PUT"
        self.puts += 1
        if self.conflict_puts or body["metadata"].get("resourceVersion") != str(self.rv):
            self.conflict_puts = max(0, self.conflict_puts - 1)
            return httpx.Response(409, json={"kind": "Status", "code": 409, "reason": "Conflict"})
        return self._store(body)

    def _store(self, body: dict) -> httpx.Response:
        self.rv += 1
        body["metadata"]["resourceVersion"] = str(self.rv)
        self.lease = body
        return httpx.Response(200, json=body)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _elector(api: FakeLeases, clock: Clock, identity: str) -> LeaderElector:
    client = httpx.AsyncClient(base_url="http://api", transport=httpx.MockTransport(api.handler))
    cfg = LeaseConfig("default", "sched", identity, lease_duration=15, renew_deadline=10, retry_period=2)
    return LeaderElector(client, cfg, clock=clock, wall=lambda: 1_700_000_000 + clock.now)


async def test_first_candidate_creates_the_lease_and_the_other_waits_a_lease_duration():
    api, clock = FakeLeases(), Clock()
    a, b = _elector(api, clock, "a"), _elector(api, clock, "b")
    assert await a.try_acquire_or_renew(5)
    a.leading = True
    spec = api.lease["spec"]
    assert spec["holderIdentity"] == "a" and spec["leaseTransitions"] == 0
    assert spec["leaseDurationSeconds"] == 15 and spec["acquireTime"] == spec["renewTime"]
    assert not await b.try_acquire_or_renew(5)          # held, and just seen
    clock.now += 14.9
    assert not await b.try_acquire_or_renew(5)          # not changed for 14.9 s: still held
    clock.now += 0.2
    assert await b.try_acquire_or_renew(5)              # 15.1 s by b's own clock: taken over
    spec = api.lease["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    assert spec["acquireTime"] == spec["renewTime"]
    assert not a.may_act()                              # a missed its renew deadline long ago
    with pytest.raises(Fenced):
        a.fence()


async def test_renewals_keep_the_standby_out_and_keep_the_acquire_time():
    api, clock = FakeLeases(), Clock()
    a, b = _elector(api, clock, "a"), _elector(api, clock, "b")
    assert await a.try_acquire_or_renew(5)
    a.leading = True
    acquired = api.lease["spec"]["acquireTime"]
    for _ in range(20):                                 # 40 s of renewals every 2 s
        clock.now += 2
        assert await a.try_acquire_or_renew(5)
        assert not await b.try_acquire_or_renew(5)
        a.fence()                                       # renewed 2 s ago: may write
    spec = api.lease["spec"]
    assert spec["holderIdentity"] == "a" and spec["acquireTime"] == acquired
    assert spec["leaseTransitions"] == 0 and spec["renewTime"] != acquired


async def test_a_409_loses_the_round_and_the_next_round_rereads():
    api, clock = FakeLeases(), Clock()
    a = _elector(api, clock, "a")
    assert await a.try_acquire_or_renew(5)
    a.leading = True
    api.conflict_puts = 1
    clock.now += 2
    assert await a.try_acquire_or_renew(5)              # the fast path's 409: GET, then PUT
    assert a.conflicts == 1
    api.conflict_puts = 2
    clock.now += 2
    assert not await a.try_acquire_or_renew(5)          # both PUTs refused: this round lost
    assert a.conflicts == 3 and a.may_act()             # still within the renew deadline
    assert await a.try_acquire_or_renew(5)
    assert api.lease["spec"]["holderIdentity"] == "a"


async def test_of_two_standbys_after_an_expiry_one_takes_the_lease():
    api, clock = FakeLeases(), Clock()
    a, b, c = _elector(api, clock, "a"), _elector(api, clock, "b"), _elector(api, clock, "c")
    assert await a.try_acquire_or_renew(5)
    assert not await b.try_acquire_or_renew(5) and not await c.try_acquire_or_renew(5)
    clock.now += 16                                     # a is gone: its lease expires
    assert [await b.try_acquire_or_renew(5), await c.try_acquire_or_renew(5)] == [True, False]
    assert api.lease["spec"]["holderIdentity"] == "b" and api.lease["spec"]["leaseTransitions"] == 1


async def test_a_leader_cut_off_is_fenced_at_the_renew_deadline_before_the_lease_expires():
    api, clock = FakeLeases(), Clock()
    a, b = _elector(api, clock, "a"), _elector(api, clock, "b")
    assert await a.try_acquire_or_renew(5)
    a.leading = True
    assert not await b.try_acquire_or_renew(5)
    api.down = True                                     # a's renewals fail from now on
    for _ in range(4):
        clock.now += 2
        assert not await a.try_acquire_or_renew(5)
        a.fence()                                       # 8 s since the last renewal: still leads
    clock.now += 2.01                                   # 10.01 s: past the renew deadline
    assert not a.may_act()
    api.down = False
    assert not a.may_act()                              # once fenced, always fenced
    assert not await b.try_acquire_or_renew(5)          # and the Lease is not yet b's (15 s)
    clock.now += 5
    assert await b.try_acquire_or_renew(5)


async def test_release_empties_the_holder_for_a_quick_takeover():
    api, clock = FakeLeases(), Clock()
    a, b = _elector(api, clock, "a"), _elector(api, clock, "b")
    assert await a.try_acquire_or_renew(5)
    a.leading = True
    assert not await b.try_acquire_or_renew(5)
    await a.release()
    assert api.lease["spec"]["holderIdentity"] == "" and api.lease["spec"]["leaseDurationSeconds"] == 1
    assert not a.may_act()
    assert await b.try_acquire_or_renew(5)              # no holder: taken at once
    assert api.lease["spec"]["leaseTransitions"] == 1


async def test_release_after_a_renewal_it_never_saw_answered_still_gives_the_lease_up():
    """The stop cancels a renewal in flight after the server applied it: the elector's version is
    old, its release PUT a 409. It reads the Lease again and, still the holder, releases it at
    the current version (else the standby waited out the whole lease: the CI's failure of
    test_a_leader_stopped_cleanly_releases_the_lease under load)."""
    api, clock = FakeLeases(), Clock()
    a, b = _elector(api, clock, "a"), _elector(api, clock, "b")
    assert await a.try_acquire_or_renew(5)
    a.leading = True
    api.lease["metadata"]["resourceVersion"] = str(api.rv + 1)   # a renewal applied, unseen by `a`
    api.rv += 1
    await a.release()
    assert api.lease["spec"]["holderIdentity"] == ""
    assert await b.try_acquire_or_renew(5)                      # no holder: taken at once


async def test_release_leaves_a_lease_another_holds_alone():
    api, clock = FakeLeases(), Clock()
    a = _elector(api, clock, "a")
    assert await a.try_acquire_or_renew(5)
    a.leading = True
    api.lease["spec"]["holderIdentity"] = "b"                   # taken over meanwhile
    api.rv += 1
    api.lease["metadata"]["resourceVersion"] = str(api.rv)
    await a.release()
    assert api.lease["spec"]["holderIdentity"] == "b"


@pytest.mark.parametrize("timings, message", [
    ((10, 10, 2), "lease duration 10s must be more than the renew deadline (10s)"),
    ((15, 2, 2), "renew deadline 2s must be more than 1.2 x retry period (2s)"),
    ((15, 10, 0), "retry period 0s: must be more than 0"),
])
def test_the_timings_contract_is_checked_where_the_config_is_built(timings, message):
    with pytest.raises(ValueError) as info:
        LeaseConfig("default", "sched", "a", *timings)
    assert str(info.value) == message


async def test_run_leads_renews_and_raises_at_the_renew_deadline(autojump_clock):
    """The loop on trio's virtual clock: elected at once, renewed every retry period, and
    `LeadershipLost` exactly at the renew deadline once the API is gone."""
    import trio

    from kube.leaderelection import LeadershipLost

    api = FakeLeases()
    client = httpx.AsyncClient(base_url="http://api", transport=httpx.MockTransport(api.handler))
    cfg = LeaseConfig("default", "sched", "a", lease_duration=15, renew_deadline=10, retry_period=2)
    elector = LeaderElector(client, cfg, clock=trio.current_time, wall=lambda: 1_700_000_000.0)
    lost_at = []

    async def lead() -> None:
        with pytest.raises(LeadershipLost):
            await elector.run()
        lost_at.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(lead)
        await elector.elected.wait()
        start = trio.current_time()
        await trio.sleep(9)
        assert elector.renewals == 5 and elector.may_act()     # at 0, 2, 4, 6, 8 s
        api.down = True
        last = elector.last_renew
        await trio.sleep(30)
    assert lost_at == [pytest.approx(last + 10)] and last == pytest.approx(start + 8)
    assert not elector.may_act()
