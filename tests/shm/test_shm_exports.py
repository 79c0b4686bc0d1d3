"""The shm facade: exactly the public names, each of them real."""

from __future__ import annotations

import subprocess
import sys

import shm


def test_all_names_exist():
    for name in shm.__all__:
        assert hasattr(shm, name), name


def test_all_matches_public_names():
    public = {n for n in dir(shm) if not n.startswith("_")}
    modules = {"ring", "ringfiles", "writer", "reader", "verification", "record", "segment",
               "snapshot", "events", "bench_support"}  # once imported
    assert set(shm.__all__) == public - modules


def test_contract_names():
    for name in ("Event", "RingWriter", "RingReader", "Cursor", "CursorBatch", "CursorJsonBatch",
                 "RingStats", "SnapshotWriter", "SnapshotReader", "errors", "segment_paths",
                 "list_instances", "verify", "ShmError", "RingNotFoundError", "RingFormatError",
                 "RingBusyError", "SnapshotTooLargeError"):
        assert name in shm.__all__, name
    assert issubclass(shm.RingBusyError, shm.ShmError)
    assert shm.errors.ShmError is shm.ShmError


def test_pure_helpers_do_not_load_the_extension():
    """`ykshm ring stat` and `ykshm status` look at segments without the cffi extension."""
    code = ("import sys, shm, shm.segment, shm.events, shm.snapshot, tools.shmscan\n"
            "assert 'shm._ringext' not in sys.modules, 'loaded at import'\n"
            "shm.RingWriter\n"
            "assert 'shm._ringext' in sys.modules, 'not loaded on first use'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_record_layout_is_40_bytes():
    from shm._ringext import ffi, lib

    assert ffi.sizeof("ykr_record") == lib.YKR_RECORD_SIZE == 40
    assert ffi.sizeof("ykr_header") <= lib.YKR_HEADER_SIZE
