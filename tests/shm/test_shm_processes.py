"""Writers and readers in separate processes: locking, instance changes, read-only readers,
SIGKILLed readers, and a concurrent stress run that must never accept a torn record."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from shm import RingBusyError, RingNotFoundError, RingReader, RingWriter, segment_paths
from shm.errors import RingFormatError


def spawn(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.kill()
    p.communicate(timeout=10)


def wait_line(p: subprocess.Popen, want: str) -> None:
    line = p.stdout.readline()
    assert line.strip() == want, (line, p.stderr.read() if p.poll() is not None else "")


HOLD_WRITER = """
    import sys, time
    from shm import RingWriter
    w = RingWriter.create(sys.argv[1], 50, 4)
    for i in range(5):
        w.publish(2, 1, 203, "held")
    print("ready", flush=True)
    time.sleep(60)
"""


def test_second_writer_refused_with_pid(ring_name):
    p = spawn(HOLD_WRITER, ring_name)
    try:
        wait_line(p, "ready")
        with pytest.raises(RingBusyError, match=f"pid {p.pid}") as info:
            RingWriter.create(ring_name, 10)
        assert info.value.pid == p.pid
        with pytest.raises(RingBusyError):
            RingWriter.open_existing(ring_name)
        r = RingReader.attach(ring_name)
        assert r.writer_alive() and r.writer_pid == p.pid
        assert r.bounds() == (0, 4)
        # the writer dies without cleaning up: the next create replaces its instance
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        assert not r.writer_alive()
        assert not r.instance_changed()
        w = RingWriter.create(ring_name, 10)
        try:
            assert r.instance_changed()
            assert w.instance_uuid != r.instance_uuid
            w.publish(2, 1, 203, "new")
            r2 = RingReader.attach(ring_name)
            assert r2.instance_uuid == w.instance_uuid and r2.bounds() == (0, 0)
            assert r.bounds() == (0, 4)        # the old mapping is still readable
            assert r.stats().superseded
            r2.close()
        finally:
            w.close()
        r.close()
    finally:
        stop(p)


def test_same_process_second_writer_refused(make_ring, ring_name):
    w, r = make_ring(10)
    with pytest.raises(RingBusyError, match=str(os.getpid())):
        RingWriter.create(ring_name, 10)
    assert not r.instance_changed()


def test_open_existing_keeps_instance(make_ring, ring_name):
    w, r = make_ring(10)
    w.publish(2, 1, 203, "a")
    w.close()
    w2 = RingWriter.open_existing(ring_name)
    try:
        assert w2.instance_uuid == r.instance_uuid
        assert w2.publish(2, 1, 204, "a") == 1
        assert not r.instance_changed() and r.writer_alive()
        assert r.stats().writers_attached == 2
    finally:
        w2.close()
    with pytest.raises(RingNotFoundError):
        RingWriter.open_existing(ring_name + "-missing")


def test_open_existing_refuses_a_torn_ring(make_ring, ring_name):
    w, r = make_ring(10)
    w.publish(2, 1, 203, "a")
    w._view.records[1].seq = 3          # what a writer killed inside publish(1) leaves behind
    w.close()
    with pytest.raises(RingFormatError, match="mid-write"):
        RingWriter.open_existing(ring_name)
    assert r.read_range(0, 5)[0].object_id == "a"


def test_unlink_is_seen_as_instance_change(make_ring, ring_name):
    w, r = make_ring(10)
    w.unlink()
    assert r.instance_changed()
    with pytest.raises(RingNotFoundError):
        RingReader.attach(ring_name)


def test_segment_files_mode_and_format(make_ring, ring_name):
    make_ring(10)
    paths = segment_paths(ring_name)
    for p in (paths.events, paths.requests):
        assert os.stat(p).st_mode & 0o777 == 0o600
    assert not [f for f in os.listdir("/dev/shm") if f.startswith(ring_name) and ".tmp-" in f]
    bogus = f"/dev/shm/{ring_name}-bogus.events"
    # our own file, mode 0600 (a wider mode is refused before the format is looked at)
    with open(os.open(bogus, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
        f.write(b"x" * 8192)
    with pytest.raises(RingFormatError):
        RingReader.attach(ring_name + "-bogus")


def test_group_mode_0640(ring_name):
    import grp

    group = grp.getgrgid(os.getgid()).gr_name
    w = RingWriter.create(ring_name, 10, 2, group=group)
    try:
        st = os.stat(segment_paths(ring_name).events)
        assert st.st_mode & 0o777 == 0o640 and st.st_gid == os.getgid()
    finally:
        w.close()
        w.unlink()


def test_reader_is_read_only(make_ring):
    from shm._ringext import ffi

    w, r = make_ring(10)
    w.publish(2, 1, 203, "a")
    mm = r._ev.mm
    with pytest.raises(TypeError):
        mm[0:1] = b"x"
    with pytest.raises((TypeError, BufferError)):
        ffi.from_buffer(mm, require_writable=True)
    # even a store through the C view faults: the mapping is PROT_READ
    p = spawn("""
        import sys
        from shm import RingReader
        r = RingReader.attach(sys.argv[1])
        print("ready", flush=True)
        r._hdr.superseded = 1
        print("wrote", flush=True)
    """, r.name)
    try:
        wait_line(p, "ready")
        assert p.wait(10) == -signal.SIGSEGV
    finally:
        stop(p)
    assert not r.instance_changed() and r.stats().superseded is False
    assert r.verify() == []


def test_sigkilled_reader_leaves_ring_intact(make_ring, ring_name):
    w, r = make_ring(32)
    for i in range(40):
        w.publish(2, 2, 200, f"app-{i % 3}", f"r{i}")
    p = spawn("""
        import sys
        from shm import RingReader
        r = RingReader.attach(sys.argv[1])
        c = r.cursor(0)
        print("ready", flush=True)
        while True:
            c.poll(); r.read_range_json(r.bounds()[0], 1000); r.stats()
            c = r.cursor(r.bounds()[0])
    """, ring_name)
    try:
        wait_line(p, "ready")
        for i in range(40, 2000):
            w.publish(2, 2, 200, f"app-{i % 3}", f"r{i}")
        p.send_signal(signal.SIGKILL)
        p.wait(10)
    finally:
        stop(p)
    assert os.path.exists(segment_paths(ring_name).events)
    assert r.bounds() == (2000 - 32, 1999)
    assert [e.reference_id for e in r.read_recent(2)] == ["r1998", "r1999"]
    assert r.verify() == []
    assert w.publish(1, 0, 0) == 2000


STRESS_WRITER = """
    import sys, time, uuid
    from shm import RingWriter
    w = RingWriter.create(sys.argv[1], int(sys.argv[2]), 4)
    print("ready", flush=True)
    deadline = time.monotonic() + float(sys.argv[3])
    i = 0
    while time.monotonic() < deadline:
        for _ in range(200):
            ref = str(uuid.UUID(int=i)) if i % 2 else f"r{i}"
            assert w.publish(2, 2, i % 500, f"o{i % 97}", ref, f"m{i}" * (i % 4),
                             {"n": i, "pods": 1} if i % 3 else None, i + 1) == i
            i += 1
    print(i, flush=True)
    w.close()
"""


def check(e) -> bool:
    i = e.id
    ref = str(uuid.UUID(int=i)) if i % 2 else f"r{i}"
    return (e.change_detail == i % 500 and e.object_id == f"o{i % 97}" and e.reference_id == ref
            and e.message == f"m{i}" * (i % 4) and e.timestamp_nano == i + 1
            and e.resource == ({"n": i, "pods": 1} if i % 3 else None))


def test_concurrent_writer_and_readers_never_torn(ring_name):
    import orjson

    from shm.record import _from_rendered

    p = spawn(STRESS_WRITER, ring_name, "64", "2.5")
    try:
        wait_line(p, "ready")
        r = RingReader.attach(ring_name)
        c = r.cursor(0)
        checked = bad = followed = 0   # followed: ids the cursor returned or reported lost

        def poll(max_events: int):
            nonlocal checked, bad, followed
            b = c.poll(max_events)
            checked += len(b.events)
            bad += sum(not check(e) for e in b.events)
            followed += len(b.events) + (b.lost[1] - b.lost[0] + 1 if b.lost else 0)
            return b

        deadline = time.monotonic() + 2.4
        while time.monotonic() < deadline:
            poll(50)
            bounds = r.bounds()
            if bounds:
                data, n = r.read_range_json(bounds[0], 64)
                if n:
                    for d in orjson.loads(data):
                        checked += 1
                        bad += not check(_from_rendered(d))
        total = int(p.stdout.readline())
        # after the writer stopped, the cursor catches up: every id was read or reported lost
        while True:
            b = poll(1000)
            if not b.events and not b.lost:
                break
        assert c.next_id == total and followed == total
        assert bad == 0 and checked > 1000
        assert r.verify() == []
        r.close()
    finally:
        stop(p)


def test_wait_for_wake_sleeps_without_the_gil_until_the_writer_wakes(make_ring):
    """A reader's FUTEX_WAIT (ykr_wait in the cffi module) times out when nothing happens,
    returns at the writer's wake, and lets other Python threads run meanwhile."""
    import threading

    w, r = make_ring(16)
    seen = r.wake_seq()
    t0 = time.monotonic()
    assert r.wait_for_wake(seen, 0.2) is False
    assert 0.15 <= time.monotonic() - t0 < 5
    ticks = []
    stop = threading.Event()

    def count() -> None:   # runs only while the waiting thread does not hold the GIL
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    def wake_soon() -> None:
        time.sleep(0.3)
        w.publish(2, 1, 0, object_id="a")
        w.wake()

    threads = [threading.Thread(target=count), threading.Thread(target=wake_soon)]
    for t in threads:
        t.start()
    t0 = time.monotonic()
    woke = r.wait_for_wake(seen, 30)
    waited = time.monotonic() - t0
    stop.set()
    for t in threads:
        t.join()
    assert woke is True and waited < 10 and r.wake_seq() != seen
    assert len(ticks) > 20
