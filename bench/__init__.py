"""bench: `ykshm bench`, the benchmarks that check the speed and memory targets.

    cli          `ykshm bench <ring|sched|web|e2e>` dispatch
    ring_bench   the event ring: publish ns/event, bytes/event, read+encode, stress
    sched_bench  the scheduler core alone: allocations/s, events/s
    web_bench    the REST readers: batch latency, streams, isolation from stalled clients
    e2e_bench    sim-cluster + shim + engine: pods/s and restart recovery
"""
