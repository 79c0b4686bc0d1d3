"""`ykshm bench preempt` in its short form: every round preempts once and the ask then runs."""

from __future__ import annotations

import orjson

from ykcli import one_line_error, ykshm


def test_bench_preempt_json():
    r = ykshm("bench", "preempt", "--nodes", "20", "--pods", "200", "--rounds", "2", "--json")
    assert r.returncode == 0, r.stderr
    result = orjson.loads(r.stdout)
    assert (result["nodes"], result["running_pods"], result["rounds"]) == (20, 200, 2)
    assert result["victims"] == 2
    assert 0 < result["decision_ms_min"] <= result["decision_ms_median"] <= \
        result["decision_ms_max"]


def test_bench_preempt_bad_numbers():
    r = ykshm("bench", "preempt", "--nodes", "10", "--pods", "5")
    assert r.returncode == 2
    one_line_error(r)
