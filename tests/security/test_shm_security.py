"""Shared memory as an attacker sees it: /dev/shm is writable by every local user.

Each test plants or forges what another local user could (a symlink, a segment of theirs, a
writable mode, a NAME.web of theirs, a forged request-slot length) and checks that ykshm refuses
it before mapping or writing it, with an error that names the file and the reason.  Files owned
by another user are made with os.chown to `nobody` (the tests run as root).
"""

from __future__ import annotations

import mmap
import os
import sys
from pathlib import Path

import httpx
import pytest

from shm import (
    RingReader,
    RingWriter,
    SnapshotReader,
    SnapshotWriter,
    UntrustedSegmentError,
    segment_paths,
)
from shm.segment import OWNER_ENV
from web.segment import SegmentError, WebSegment

NOBODY = 65534

@pytest.fixture
def forged(ring_name):
    """A ring NAME with one forged event and a live, heartbeating writer (this process)."""
    w = RingWriter.create(ring_name, 16, 4)
    w.publish(2, 1, 0, object_id="forged-app", message="forged")
    w.heartbeat()
    yield w
    w.close()


def _attach_refused(name: str, why: str) -> None:
    with pytest.raises(UntrustedSegmentError, match=why):
        RingReader.attach(name)


def test_symlinked_segment_is_not_followed(forged, ring_name):
    other = ring_name + "-link"
    paths, links = segment_paths(ring_name), segment_paths(other)
    snap = SnapshotWriter.create(ring_name, 64 << 10)
    try:
        os.symlink(paths.events, links.events)
        os.symlink(paths.state, links.state)
        _attach_refused(other, "symbolic link")
        with pytest.raises(UntrustedSegmentError, match="symbolic link"):
            SnapshotReader.attach(other)
        # a writer told to create `other` must not lock and supersede the ring the link names
        with pytest.raises(UntrustedSegmentError, match="not a regular file"):
            RingWriter.create(other, 16)
        with RingReader.attach(ring_name) as r:
            assert not r.instance_changed() and r.writer_alive()
    finally:
        snap.close()


def test_segment_of_another_user_is_refused(forged, ring_name, monkeypatch):
    """A forged ring (valid format, live writer pid, fresh heartbeat) owned by someone else."""
    paths = segment_paths(ring_name)
    os.chown(paths.events, NOBODY, -1)
    os.chown(paths.requests, NOBODY, -1)
    _attach_refused(ring_name, f"owned by uid {NOBODY}")
    monkeypatch.setenv(OWNER_ENV, str(NOBODY))  # an owner the operator names is trusted
    with RingReader.attach(ring_name) as r:
        assert r.read_recent(1)[0].object_id == "forged-app"


def test_forged_segment_is_not_served_by_the_web(forged, ring_name):
    """The web serves neither the forged events nor a "Healthy" from the forged writer."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "web"))
    from webharness import WebServer

    os.chown(segment_paths(ring_name).events, NOBODY, -1)
    server = WebServer(ring_name, workers=1)
    try:
        health = httpx.get(server.url + "/ws/v1/scheduler/healthcheck").json()
        assert health["Healthy"] is False
        assert f"owned by uid {NOBODY}" in str(health["HealthChecks"])
        batch = httpx.get(server.url + "/ws/v1/events/batch")
        assert batch.status_code == 503 and b"forged" not in batch.content
    finally:
        server.stop()


@pytest.mark.parametrize("mode,why", [(0o666, "lets the group or others write"),
                                      (0o620, "lets the group or others write"),
                                      (0o644, "wider than ykshm creates")])
def test_writable_or_world_readable_mode_is_refused(forged, ring_name, mode, why):
    paths = segment_paths(ring_name)
    os.chmod(paths.events, mode)
    _attach_refused(ring_name, why)
    os.chmod(paths.events, 0o640)  # what ykshm makes with --group: readable
    with RingReader.attach(ring_name) as r:
        assert r.read_recent(1)


def test_snapshot_of_another_user_is_refused(ring_name):
    snap = SnapshotWriter.create(ring_name, 64 << 10)
    try:
        snap.publish({"Healthy": True})
        os.chown(segment_paths(ring_name).state, NOBODY, -1)
        with pytest.raises(UntrustedSegmentError, match=f"owned by uid {NOBODY}"):
            SnapshotReader.attach(ring_name)
    finally:
        snap.close()


def test_ring_name_planted_by_another_user_is_refused_clearly(ring_name):
    paths = segment_paths(ring_name)
    fd = os.open(paths.requests, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    os.fchown(fd, NOBODY, -1)
    os.close(fd)
    with pytest.raises(UntrustedSegmentError, match="refusing to replace .*another --name"):
        RingWriter.create(ring_name, 16)
    assert not os.path.exists(paths.events)
    assert not [f for f in os.listdir("/dev/shm") if f.startswith(ring_name) and ".tmp-" in f]


def _plant(path: str, data: bytes, mode: int, uid: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    os.write(fd, data)
    os.fchmod(fd, mode)
    os.fchown(fd, uid, -1)
    os.close(fd)


def test_planted_web_segment_is_refused(ring_name):
    path = WebSegment.path_for(ring_name)
    _plant(path, b"squatter" * 1000, 0o666, NOBODY)
    for make in (WebSegment.create, WebSegment.open_or_create):
        with pytest.raises(SegmentError, match=f"refusing {path}: owned by uid {NOBODY}"):
            make(ring_name, 10)
    assert os.stat(path).st_size == 8000  # not truncated, not taken over


def test_web_segment_symlink_is_not_followed(ring_name, tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious" * 100)
    os.symlink(victim, WebSegment.path_for(ring_name))
    with pytest.raises(SegmentError, match="symbolic link"):
        WebSegment.create(ring_name, 10)
    assert victim.read_bytes() == b"precious" * 100


def test_stale_web_segment_of_our_own_is_reused(ring_name):
    seg = WebSegment.create(ring_name, 10)
    seg.close()  # left behind, as after a crash
    again = WebSegment.create(ring_name, 20)
    try:
        assert again.nslots == 20
        assert os.stat(again.path).st_mode & 0o777 == 0o600
    finally:
        again.close()


def _forge_slot(path: str, index: int, **lengths: int) -> None:
    from shm._ringext import ffi

    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as mm:
        base = 4096 + index * 4096
        for field, value in lengths.items():
            off = base + ffi.offsetof("ykr_req_slot", field)
            mm[off:off + 2] = value.to_bytes(2, "little")


@pytest.mark.parametrize("lengths", [
    {"object_len": 65535, "message_len": 65535},        # far past the slot and the buffer
    {"object_len": 1024, "reference_len": 1024, "message_len": 1024, "resource_len": 960},
    {"resource_len": 5},                                 # resource bytes out of shape
])
def test_forged_request_slot_length_is_skipped_and_counted(ring_name, lengths):
    w = RingWriter.create(ring_name, 16, 4)
    try:
        for i in range(3):
            w.publish_request(f"pod-{i}", f"ref-{i}", f"msg-{i}", {"memory": i + 1})
        _forge_slot(segment_paths(ring_name).requests, 1, **lengths)
        taken = w.take_requests()
        assert [e.object_id for e in taken] == ["pod-0", "pod-2"]
        with RingReader.attach(ring_name) as r:
            assert r.stats().requests_skipped == 1
    finally:
        w.close()
