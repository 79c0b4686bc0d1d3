"""`ykshm bench`: the dispatcher, and `bench ring` in its short forms."""

from __future__ import annotations

import dataclasses
import glob

import orjson
import pytest

import bench.cli
from ykcli import one_line_error, ykshm


def test_unknown_benchmark_exit_2(capsys):
    assert bench.cli.main(["nosuch"]) == 2
    assert "unknown benchmark 'nosuch'" in capsys.readouterr().err


def test_missing_module_is_one_line_exit_1(monkeypatch, capsys):
    monkeypatch.setitem(bench.cli.BENCHMARKS, "sched", ("bench.no_such_bench_module", "x"))
    assert bench.cli.main(["sched"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not available" in err and "Traceback" not in err


def test_dispatch_to_module(monkeypatch, tmp_path, capsys):
    (tmp_path / "fake_bench_mod.py").write_text("def main(argv):\n    print('ran', argv)\n    return 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(bench.cli.BENCHMARKS, "web", ("fake_bench_mod", "x"))
    assert bench.cli.main(["web", "--x"]) == 3
    assert capsys.readouterr().out == "ran ['--x']\n"


def test_help():
    r = ykshm("bench", "--help")
    assert r.returncode == 0
    assert all(b in r.stdout.decode() for b in ("ring", "sched", "web", "e2e"))


def test_bench_ring_bad_numbers():
    r = ykshm("bench", "ring", "--events", "lots")
    assert r.returncode == 2
    one_line_error(r)


def _segments(name: str) -> list[str]:
    return glob.glob(f"/dev/shm/{name}*")


def test_bench_ring_json(ring_name):
    r = ykshm("bench", "ring", "--events", "20000", "--json", "--name", ring_name, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = orjson.loads(r.stdout)
    for key in ("events", "publish_ns_median", "publish_ns_p99", "shm_bytes", "bytes_per_event",
                "read_encode_ns_per_event", "noop_loop_ns_median"):
        assert key in doc
    assert 0 < doc["noop_loop_ns_median"] < doc["publish_ns_median"]
    assert doc["events"] == 20000
    assert 0 < doc["publish_ns_median"] <= doc["publish_ns_p99"]
    assert doc["shm_bytes"] > 20000 * 48
    assert doc["bytes_per_event"] == round(doc["shm_bytes"] / 20000, 2)
    assert doc["read_encode_ns_per_event"] > 0
    assert _segments(ring_name) == []


def test_bench_ring_human():
    r = ykshm("bench", "ring", "--events", "5000", timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert "ns/event median" in out and "bytes/event" in out and "read+encode" in out


def test_bench_ring_stress_no_torn_reads(ring_name):
    r = ykshm("bench", "ring", "--stress", "--seconds", "2", "--readers", "2", "--capacity",
              "4096", "--name", ring_name, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert "torn reads accepted: 0 " in out
    checked = int(out.split("reads checked: ")[1].split()[0].replace(",", ""))
    assert checked > 1000
    assert _segments(ring_name) == []


def test_normal_mix_shape():
    from bench.ring_bench import EVENTS_PER_APP, normal_mix

    chunks = list(normal_mix(EVENTS_PER_APP * 2 + 5))
    events = [e for c in chunks for e in c]
    assert len(events) == EVENTS_PER_APP * 2 + 5
    app0 = events[:EVENTS_PER_APP]
    details = [e[2] for e in app0]
    assert details.count(201) == 100 and details.count(200) == 100
    assert [d for d in details if d not in (200, 201)] == [0, 203, 204, 205, 206, 207, 208]
    assert {e[3] for e in app0} == {"spark-app-000000"}
    refs = [e[4] for e in app0 if e[2] in (200, 201)]
    assert len(set(refs)) == 200 and all(len(r) == 36 for r in refs)
    assert all(e[6] == {"memory": 1 << 30, "vcore": 500, "pods": 1} for e in app0 if e[2] == 200)


def test_bench_ring_ctrl_c_unlinks_its_segments(ring_name):
    import signal
    import subprocess
    import time

    from ykcli import spawn, stop

    proc = spawn("bench", "ring", "--stress", "--seconds", "60", "--capacity", "4096",
                 "--name", ring_name, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not _segments(ring_name) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _segments(ring_name), "the benchmark never created its ring"
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 130
        err = proc.stderr.read().decode()
        assert "interrupted" in err and "Traceback" not in err
    finally:
        stop(proc)
    assert _segments(ring_name) == []


def test_stress_checkers_accept_every_path_and_reject_a_misplaced_record(ring_name):
    """The stress writer's records pass the checkers on both writer paths (general and pinned);
    a record read under another id's fields -- what a torn read looks like -- does not."""
    from bench.ring_bench import check_event, check_json, stress_fields
    from shm import RingReader, RingWriter

    w = RingWriter.create(ring_name, 512, 1)
    r = RingReader.attach(ring_name)
    try:
        for i in range(300):
            assert w.publish(*stress_fields(i)) == i
        events = r.read_range(0, 300)
        rendered = orjson.loads(r.read_range_json(0, 300)[0])
        assert len(events) == len(rendered) == 300
        assert all(check_event(e) for e in events) and all(check_json(o) for o in rendered)
        hot = [e for e in events if e.object_id.startswith("hot-")]   # pinned, odd runs of 64
        assert len(hot) == 128 and any(e.resource is None for e in hot)
        assert any(e.message and e.resource for e in events)   # the general path's pairs
        for i in (0, 5, 64, 70, 130, 200):     # each field set under a neighbour's id
            assert not check_event(dataclasses.replace(events[i], id=i + 1))
            assert not check_json({**rendered[i], "id": i + 1})
    finally:
        r.close()
        w.close()
        w.unlink()
