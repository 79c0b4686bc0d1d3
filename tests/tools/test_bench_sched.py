"""`ykshm bench sched`: a small run allocates every pod, estimates the publish share and
reports the rate per CPU second."""

from bench import sched_bench


def test_a_small_run_allocates_every_pod_and_estimates_the_publish_cost():
    result = sched_bench.run(50, 2, 8, anti_affinity=True)
    assert result["allocations"] == 16 and result["events"] >= 48
    assert result["publish_ns_per_event"] > 0  # from the one call in 8 that is timed
    assert 0 < result["publish_share"] < 1
    # one thread: its CPU time is at most the wall time, so the CPU rate is at least the other
    assert result["allocations_per_cpu_s"] >= result["allocations_per_s"] * 0.95 > 0
