"""The state snapshot: double-buffered, never torn under a concurrent writer process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from shm import (RingBusyError, RingNotFoundError, SnapshotReader, SnapshotTooLargeError,
                 SnapshotWriter, segment_paths)


def test_publish_and_read(ring_name):
    with pytest.raises(RingNotFoundError):
        SnapshotReader.attach(ring_name)
    w = SnapshotWriter.create(ring_name, 1 << 16)
    try:
        r = SnapshotReader.attach(ring_name)
        assert r.read() is None and r.read_raw() is None
        w.publish({"engine": {"pid": 1}, "partitions": []})
        assert r.read() == {"engine": {"pid": 1}, "partitions": []}
        t = r.published_nano()
        assert abs(t - time.time_ns()) < 10 ** 10
        w.publish({"x": "y" * 1000})
        assert r.read_raw() == b'{"x":"' + b"y" * 1000 + b'"}'
        with pytest.raises(SnapshotTooLargeError):
            w.publish({"x": "y" * (1 << 16)})
        assert r.read() == {"x": "y" * 1000}
        assert os.stat(segment_paths(ring_name).state).st_mode & 0o777 == 0o600
        with pytest.raises(RingBusyError):
            SnapshotWriter.create(ring_name, 1 << 16)
        r.close()
    finally:
        w.close()
        w.unlink()


WRITER = """
    import sys, time
    from shm import SnapshotWriter
    w = SnapshotWriter.create(sys.argv[1], 1 << 20)
    print("ready", flush=True)
    k = 0
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        k += 1
        w.publish({"k": k, "items": [k] * (k % 300), "pad": "z" * (k % 5000)})
    print(k, flush=True)
    w.close()
"""


def test_never_torn_under_concurrent_writer(ring_name):
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(WRITER), ring_name],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        r = SnapshotReader.attach(ring_name)
        reads = 0
        last = 0
        deadline = time.monotonic() + 1.4
        while time.monotonic() < deadline:
            doc = r.read()
            if doc is None:
                continue
            k = doc["k"]
            assert doc["items"] == [k] * (k % 300) and doc["pad"] == "z" * (k % 5000)
            assert k >= last
            last = k
            reads += 1
        assert reads > 100
        total = int(p.stdout.readline())
        assert r.read()["k"] == total
        r.close()
    finally:
        if p.poll() is None:
            p.kill()
        p.communicate(timeout=10)


def _mapping_rss_kb(path: str) -> int:
    """This process's resident KiB of the mapping of `path` (smaps)."""
    rss, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            if line[0] in "0123456789abcdef" and "-" in line.split()[0]:
                inside = line.rstrip().endswith(path)
            elif inside and line.startswith("Rss:"):
                rss += int(line.split()[1])
    return rss


def test_the_segment_holds_what_was_written_not_its_whole_size(ring_name):
    """The defaults size NAME.state at ~103 MiB for 10,000 retained applications; a state of a few
    MiB must cost a few MiB, twice (both halves), in /dev/shm and in the engine's RSS — not the
    file's size, as when it was allocated and its mapping populated up front."""
    size = 64 << 20
    w = SnapshotWriter.create(ring_name, size)
    path = segment_paths(ring_name).state
    try:
        doc = {"x": "y" * (1 << 20)}
        for _ in range(4):            # both halves written, twice
            w.publish(doc)
        allocated = os.stat(path).st_blocks * 512
        assert allocated < 4 << 20, allocated            # 2 x 1 MiB + header + first pages
        assert _mapping_rss_kb(path) < 4 << 10
        r = SnapshotReader.attach(ring_name)
        assert r.read() == doc
        r.close()
    finally:
        w.close()
        w.unlink()


NO_ROOM = """
    import os, sys
    from shm import SnapshotReader, SnapshotTooLargeError, SnapshotWriter
    os.system("mount -t tmpfs -o size=2m none " + sys.argv[1])
    os.environ["YKSHM_SHM_DIR"] = sys.argv[1]
    w = SnapshotWriter.create("nr", 32 << 20)          # larger than the tmpfs: sized, not allocated
    w.publish({"x": "small"})
    try:
        w.publish({"x": "y" * (4 << 20)})             # the tmpfs has 2 MiB
    except SnapshotTooLargeError as exc:
        print("refused:", exc)
    r = SnapshotReader.attach("nr")
    print("still:", r.read())
"""


def test_a_full_dev_shm_refuses_a_document_instead_of_killing_the_engine(tmp_path):
    """Writing into a page that tmpfs cannot allocate is a SIGBUS; each document's range is
    allocated before it is copied, so a full /dev/shm is an error the publisher handles (it
    publishes the `unavailable` document) and the last document stays readable."""
    mnt = tmp_path / "shm"
    mnt.mkdir()
    done = subprocess.run(["unshare", "-rm", sys.executable, "-c", textwrap.dedent(NO_ROOM), str(mnt)],
                          capture_output=True, text=True, timeout=60,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert done.returncode == 0, done.stderr
    assert "refused: no room in " in done.stdout and "No space left on device" in done.stdout
    assert "still: {'x': 'small'}" in done.stdout
