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
