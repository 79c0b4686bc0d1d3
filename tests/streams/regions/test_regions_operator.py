"""The operator core in-process: fakes for the status store and the health source, trio's
MockClock for timers (a drain that must not happen yet is proved absent, not slept for)."""

from __future__ import annotations

import socket

import orjson
import pytest
import trio
import trio.testing

from streams.regions import errors
from streams.regions.fsm import Region, RegionSpec
from streams.regions.vocabulary import Checkpoint, ResetDone, ResetRequest
from streams.regions.health import Health
from streams.regions.operator import LINGER_GAP, RegionOperator

PES = (1, 2, 3)


class FakeStore:
    """The status writer: keeps the last status per region; `hold()` makes writes wait."""

    def __init__(self) -> None:
        self.status: dict[int, dict] = {}
        self.writes = 0
        self.gate: trio.Event | None = None

    def hold(self) -> None:
        self.gate = trio.Event()

    def release(self) -> None:
        assert self.gate is not None
        self.gate.set()
        self.gate = None

    async def write(self, index: int, doc: dict) -> None:
        if self.gate is not None:
            await self.gate.wait()
        self.status[index] = doc
        self.writes += 1


class FakeHealth:
    def __init__(self) -> None:
        self.value = Health(True)

    async def __call__(self, index: int) -> Health:
        return self.value


def make_spec(**kw) -> RegionSpec:
    base = dict(index=0, trigger="periodic", period=5.0, drain_timeout=10.0, reset_timeout=10.0,
                max_attempts=2, pes=frozenset(PES))
    base.update(kw)
    return RegionSpec(**base)


def board_of(op: RegionOperator, pe: int = 1):
    note = op.board.get(pe, 0)
    return None if note is None else (note.type, note.message)


async def start(nursery, store, health, regions, **kw) -> RegionOperator:
    op = RegionOperator("ns/job", regions, status_writer=store.write, health_source=health,
                        clock_ms=lambda: trio.current_time() * 1000.0, **kw)
    await nursery.start(op.run)
    await trio.testing.wait_all_tasks_blocked()
    return op


async def checkpoint_all(op, seq, pes=PES):
    for pe in pes:
        await op.submit(0, Checkpoint(pe, seq))


async def test_periodic_drains_fire_on_the_period_and_not_before(autojump_clock):
    store, health = FakeStore(), FakeHealth()
    async with trio.open_nursery() as nursery:
        op = await start(nursery, store, health, [Region(make_spec())])
        assert store.status[0]["state"] == "PROCESSING"
        t0 = trio.current_time()
        await trio.sleep(4.9)
        assert board_of(op) is None and op.region(0).state.name == "PROCESSING"
        await trio.sleep(0.2)
        assert [board_of(op, pe) for pe in PES] == [("triggerDrain", "seqId=1")] * 3
        assert store.status[0]["state"] == "DRAINING"
        await trio.sleep(1.0)
        await checkpoint_all(op, 1)
        assert board_of(op) == ("resumeSubmission", "seqId=2;retId=0;pendCkpt=0")
        assert store.status[0]["lastCompletedSeqID"] == 1
        # the next period counts from the end of the drain (t0 + 6.1), not from its start
        await trio.sleep_until(t0 + 11.0)
        assert board_of(op)[0] == "resumeSubmission"
        await trio.sleep_until(t0 + 11.2)
        assert board_of(op) == ("triggerDrain", "seqId=2")
        metrics = op.metrics.render().decode()
        assert 'last_completed_drain_seq_id{job="ns/job",region="0"} 1.0' in metrics
        assert 'average_drain_time_milliseconds{job="ns/job",region="0"} 1100.0' in metrics
        assert 'state{job="ns/job",region="0"} 3.0' in metrics
        nursery.cancel_scope.cancel()


async def test_drain_timeout_resets_until_max_attempts_then_nothing_more(autojump_clock):
    store, health = FakeStore(), FakeHealth()
    async with trio.open_nursery() as nursery:
        op = await start(nursery, store, health, [Region(make_spec())])
        await trio.sleep(5.1)
        assert board_of(op) == ("triggerDrain", "seqId=1")
        await trio.sleep(10.0)  # the drain timeout
        assert board_of(op) == ("triggerReset", "seqId=0;resetAttempt=0")
        await trio.sleep(10.0)  # the reset timeout
        assert board_of(op) == ("triggerReset", "seqId=0;resetAttempt=1")
        await trio.sleep(10.0)
        assert board_of(op) == ("resetFailed", "seqId=0")
        assert store.status[0]["state"] == "MAXIMUM_RESET_ATTEMPTS_REACHED"
        writes = store.writes
        await trio.sleep(1000.0)
        assert store.writes == writes  # no timer is left armed
        # a forced reset asks the health source, then resets
        await op.submit(0, ResetRequest(force=True))
        assert board_of(op) == ("triggerReset", "seqId=0;resetAttempt=2")
        for pe in PES:
            await op.submit(0, ResetDone(pe, 0, 2))
        assert board_of(op) == ("resumeSubmission", "seqId=2;retId=0;pendCkpt=0")
        nursery.cancel_scope.cancel()


async def test_a_completed_drain_cancels_its_timeout(autojump_clock):
    store, health = FakeStore(), FakeHealth()
    async with trio.open_nursery() as nursery:
        op = await start(nursery, store, health, [Region(make_spec(period=100.0))])
        await trio.sleep(100.1)
        await checkpoint_all(op, 1)
        await trio.sleep(50.0)  # well past the drain timeout of 10 s
        assert board_of(op) == ("resumeSubmission", "seqId=2;retId=0;pendCkpt=0")
        assert op.region(0).reset_attempt == 0
        nursery.cancel_scope.cancel()


async def test_notifications_wait_until_the_status_is_visible(autojump_clock):
    store, health = FakeStore(), FakeHealth()
    async with trio.open_nursery() as nursery:
        op = await start(nursery, store, health, [Region(make_spec())])
        await trio.sleep(5.1)
        await checkpoint_all(op, 1, pes=(1, 2))
        store.hold()
        answered = trio.Event()

        async def last_checkpoint():
            await op.submit(0, Checkpoint(3, 1))
            answered.set()

        nursery.start_soon(last_checkpoint)
        await trio.testing.wait_all_tasks_blocked()
        assert board_of(op) == ("triggerDrain", "seqId=1")  # not yet visible: no resume
        assert not answered.is_set()
        # an event behind it waits too
        refused = []

        async def duplicate():
            try:
                await op.submit(0, Checkpoint(3, 1))
            except errors.RegionError as exc:
                refused.append(exc)

        nursery.start_soon(duplicate)
        await trio.testing.wait_all_tasks_blocked()
        assert refused == []
        store.release()
        await trio.testing.wait_all_tasks_blocked()
        assert answered.is_set() and board_of(op)[0] == "resumeSubmission"
        assert len(refused) == 1 and isinstance(refused[0], errors.NotExpected)
        nursery.cancel_scope.cancel()


async def test_refused_reports_answer_the_caller_and_the_region_goes_on(autojump_clock):
    store, health = FakeStore(), FakeHealth()
    async with trio.open_nursery() as nursery:
        op = await start(nursery, store, health, [Region(make_spec())])
        await trio.sleep(5.1)
        writes = store.writes
        with pytest.raises(errors.SequenceMismatch):
            await op.submit(0, Checkpoint(1, 7))
        with pytest.raises(errors.UnknownPE):
            await op.submit(0, Checkpoint(42, 1))
        with pytest.raises(errors.UnknownRegion):
            await op.submit(5, Checkpoint(1, 1))
        assert store.writes == writes
        await checkpoint_all(op, 1)
        assert board_of(op)[0] == "resumeSubmission"
        nursery.cancel_scope.cancel()


async def test_unhealthy_clears_the_board_and_recovery_resets(autojump_clock):
    store, health = FakeStore(), FakeHealth()
    async with trio.open_nursery() as nursery:
        op = await start(nursery, store, health, [Region(make_spec())])
        await trio.sleep(5.1)
        health.value = Health(False)
        op.recheck_all([0])
        await trio.testing.wait_all_tasks_blocked()
        assert board_of(op) is None and store.status[0]["state"] == "UNHEALTHY"
        await trio.sleep(100.0)  # no timer fires while unhealthy
        assert store.status[0]["state"] == "UNHEALTHY"
        health.value = Health(None)  # a pod is missing: unknown, ignored
        op.recheck_all([0])
        await trio.testing.wait_all_tasks_blocked()
        assert store.status[0]["state"] == "UNHEALTHY"
        health.value = Health(True)
        op.recheck_all([0])
        await trio.testing.wait_all_tasks_blocked()
        assert board_of(op) == ("triggerReset", "seqId=0;resetAttempt=0")
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("where", ["DRAINING", "CHECKPOINT_PENDING", "RESETTING"])
async def test_operator_restart_forces_a_reset_and_keeps_sequence_ids(autojump_clock, where):
    store, health = FakeStore(), FakeHealth()
    spec = make_spec()
    async with trio.open_nursery() as nursery:
        op = await start(nursery, store, health, [Region(spec)])
        await trio.sleep(5.1)
        await checkpoint_all(op, 1)  # lastCompleted 1
        await trio.sleep(5.1)
        if where == "CHECKPOINT_PENDING":
            for pe in PES:
                await op.submit(0, Checkpoint(pe, 2, blocking=True))
        elif where == "RESETTING":
            await op.submit(0, ResetRequest())
        nursery.cancel_scope.cancel()
    assert store.status[0]["state"] == where
    before = store.status[0]
    async with trio.open_nursery() as nursery:
        region = Region.from_status(spec, before)
        op = await start(nursery, store, health, [region], restarted=True)
        assert region.state.name == "RESETTING"
        last = before["lastCompletedSeqID"]
        attempt = region.reset_attempt - 1
        assert board_of(op) == ("triggerReset", f"seqId={last};resetAttempt={attempt}")
        for pe in PES:
            await op.submit(0, ResetDone(pe, last, attempt))
        assert store.status[0]["state"] == "PROCESSING"
        assert store.status[0]["lastCompletedSeqID"] == last >= 1
        assert store.status[0]["currentSeqID"] > before["currentSeqID"] - 1
        nursery.cancel_scope.cancel()


async def test_restart_status_is_written_before_any_event():
    store = FakeStore()
    order = []

    async def health(index):
        order.append(("health", store.status.get(index, {}).get("state")))
        return Health(None)

    region = Region.from_status(make_spec(), {"state": "PROCESSING", "isRegionHealthy": True,
                                              "isHealthyFirstTime": True})
    async with trio.open_nursery() as nursery:
        await start(nursery, store, health, [region], restarted=True)
        assert order == [("health", "STARTED")]
        assert store.status[0]["isRegionHealthy"] is False
        nursery.cancel_scope.cancel()


async def test_notifications_go_out_as_udp_datagrams():
    receivers = {}
    for pe in PES:
        sock = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        await sock.bind(("127.0.0.1", 0))
        receivers[pe] = sock
    addresses = {pe: s.getsockname() for pe, s in receivers.items() if pe != 3}
    store, health = FakeStore(), FakeHealth()
    try:
        async with trio.open_nursery() as nursery:
            op = await start(nursery, store, health, [Region(make_spec(period=0.05))],
                             addresses=addresses.get)
            with trio.fail_after(5):
                for pe in (1, 2):
                    data = await receivers[pe].recv(2048)
                    assert orjson.loads(data) == {"0": {"type": "triggerDrain", "message": "seqId=1"}}
            await checkpoint_all(op, 1)
            with trio.fail_after(5):
                data = await receivers[1].recv(2048)
            assert orjson.loads(data)["0"]["type"] == "resumeSubmission"
            assert board_of(op, 3)[0] == "resumeSubmission"  # PE 3 has no address: it polls
            nursery.cancel_scope.cancel()
    finally:
        for sock in receivers.values():
            sock.close()


@pytest.mark.parametrize("coalesce,extra_writes", [(True, 1), (False, 2)])
async def test_events_queued_behind_a_write_share_the_next_one(autojump_clock, coalesce,
                                                                 extra_writes):
    store, health = FakeStore(), FakeHealth()
    async with trio.open_nursery() as nursery:
        op = await start(nursery, store, health, [Region(make_spec())], coalesce=coalesce)
        await trio.sleep(5.1)
        store.hold()
        answered = []

        async def report(pe):
            await op.submit(0, Checkpoint(pe, 1))
            answered.append(pe)

        nursery.start_soon(report, 1)
        await trio.testing.wait_all_tasks_blocked()  # PE 1's write is in flight
        nursery.start_soon(report, 2)
        nursery.start_soon(report, 3)
        await trio.testing.wait_all_tasks_blocked()
        writes = store.writes
        gate = store.gate
        store.gate = None
        gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(answered) == [1, 2, 3]
        assert store.writes == writes + 1 + extra_writes
        assert store.status[0]["state"] == "PROCESSING"
        assert board_of(op) == ("resumeSubmission", "seqId=2;retId=0;pendCkpt=0")
        nursery.cancel_scope.cancel()


async def test_a_notification_then_unhealthy_in_one_batch_leaves_the_board_clear(autojump_clock):
    store, health = FakeStore(), FakeHealth()
    async with trio.open_nursery() as nursery:
        op = await start(nursery, store, health, [Region(make_spec())])
        await trio.sleep(5.1)
        await checkpoint_all(op, 1, pes=(1, 2))
        store.hold()
        op.post(0, Checkpoint(3, 1))  # taken alone: its write is held
        await trio.testing.wait_all_tasks_blocked()
        op.post(0, ResetRequest())  # -> RESETTING, triggerReset ...
        health.value = Health(False)
        op.recheck_all([0])  # ... -> UNHEALTHY, board cleared: both in the next batch
        writes = store.writes
        gate = store.gate
        store.gate = None
        gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert store.writes == writes + 2
        assert store.status[0]["state"] == "UNHEALTHY"
        assert board_of(op) is None  # triggerReset posted after the write, then cleared in order
        nursery.cancel_scope.cancel()


async def test_a_status_writer_that_fails_ends_the_operator(autojump_clock):
    class Broken(Exception):
        pass

    async def write(index, doc):
        raise Broken("apiserver gone")

    op = RegionOperator("ns/job", [Region(make_spec())], status_writer=write,
                        health_source=FakeHealth(), clock_ms=lambda: 0.0)
    with pytest.raises(BaseExceptionGroup) as info:
        async with trio.open_nursery() as nursery:
            await nursery.start(op.run)
            await trio.sleep(1000)
    assert info.group_contains(Broken)


async def test_members_follow_a_width_change_while_draining(autojump_clock):
    # a parallel region inside the consistent region scaled up, then down, each time mid-drain:
    # new PEs get the drain under way and are known (no 404 unknownPE), PEs that left are not
    # waited for, and checkpoints keep completing with increasing sequence ids
    store, health = FakeStore(), FakeHealth()
    completed = []
    async with trio.open_nursery() as nursery:
        op = await start(nursery, store, health, [Region(make_spec())])
        await trio.sleep(5.1)
        await checkpoint_all(op, 1)
        completed.append(store.status[0]["lastCompletedSeqID"])
        await trio.sleep(5.2)
        assert board_of(op) == ("triggerDrain", "seqId=2")
        op.set_members(0, {1, 2, 3, 4})
        await trio.testing.wait_all_tasks_blocked()
        assert board_of(op, 4) == ("triggerDrain", "seqId=2")
        await checkpoint_all(op, 2, pes=(1, 2, 3))
        assert store.status[0]["lastCompletedSeqID"] == 1          # PE 4 is waited for
        await op.submit(0, Checkpoint(4, 2))
        completed.append(store.status[0]["lastCompletedSeqID"])
        await trio.sleep(5.2)
        assert board_of(op) == ("triggerDrain", "seqId=3")
        await op.submit(0, Checkpoint(3, 3))
        op.set_members(0, {1, 2})
        await trio.testing.wait_all_tasks_blocked()
        await checkpoint_all(op, 3, pes=(1, 2))
        completed.append(store.status[0]["lastCompletedSeqID"])
        with pytest.raises(errors.UnknownPE):
            await op.submit(0, Checkpoint(4, 4))
        nursery.cancel_scope.cancel()
    assert completed == [1, 2, 3]


async def test_reports_that_come_together_and_a_straggler_share_one_write(autojump_clock):
    """Group commit: a batch of several reports waits LINGER_GAP for the rest of the round, so
    the PE that reports just after it does not wait for a write of the others' progress."""
    store, health = FakeStore(), FakeHealth()
    async with trio.open_nursery() as nursery:
        op = await start(nursery, store, health, [Region(make_spec())])
        await trio.sleep(5.1)
        assert store.status[0]["state"] == "DRAINING"
        writes, answered = store.writes, {}

        async def report(pe):
            await op.submit(0, Checkpoint(pe, 1))
            answered[pe] = trio.current_time()

        nursery.start_soon(report, 1)
        nursery.start_soon(report, 2)       # queued together: one batch of two reports
        await trio.sleep(LINGER_GAP / 2)
        sent_last = trio.current_time()
        await report(3)                     # the straggler, within the gap
        await trio.testing.wait_all_tasks_blocked()
        assert store.writes == writes + 1   # the round's one write, PROCESSING
        assert store.status[0]["state"] == "PROCESSING"
        assert sorted(answered) == [1, 2, 3] and answered[3] == sent_last
        nursery.cancel_scope.cancel()


async def test_a_report_alone_is_answered_without_waiting(autojump_clock):
    """A PE that reports alone (the others report after its answer, e.g. a pipeline) pays no
    group-commit wait: its progress is written and answered at once."""
    store, health = FakeStore(), FakeHealth()
    async with trio.open_nursery() as nursery:
        op = await start(nursery, store, health, [Region(make_spec())])
        await trio.sleep(5.1)
        writes, sent = store.writes, trio.current_time()
        await op.submit(0, Checkpoint(1, 1))
        assert trio.current_time() == sent and store.writes == writes + 1
        assert store.status[0]["state"] == "DRAINING"
        nursery.cancel_scope.cancel()


async def test_a_narrowing_after_the_remaining_pes_checkpointed_completes_the_drain(autojump_clock):
    """Review probe P4: the region's PEs 1 and 2 have checkpointed, PE 3 has not, and PE 3
    leaves (a width change): the drain completes at once, not at its timeout with a reset."""
    store, health = FakeStore(), FakeHealth()
    async with trio.open_nursery() as nursery:
        op = await start(nursery, store, health, [Region(make_spec())])
        await trio.sleep(5.1)
        assert store.status[0]["state"] == "DRAINING"
        await op.submit(0, Checkpoint(1, 1))
        await op.submit(0, Checkpoint(2, 1))
        op.set_members(0, {1, 2})
        await trio.testing.wait_all_tasks_blocked()
        assert store.status[0]["state"] == "PROCESSING" and store.status[0]["lastCompletedSeqID"] == 1
        assert sorted(store.status[0]["peToCompletion"]) == ["1", "2"]
        nursery.cancel_scope.cancel()
