"""engine: the scheduler process (`ykshm engine`): YuniKorn's scheduler core, no Kubernetes.

    main         `ykshm engine` command line -> service.run
    service      the process's trio tasks: SI server, scheduling loop, snapshot publisher
    scheduler    `Scheduler`: partitions, registered RMs, SI message handling, the cycle (no I/O)
    partition/   one partition's objects and scheduling, one module per concept (see its map)
    objects      the scheduler's objects: asks, allocations, nodes, queues, applications
    app_state    the application state machine, transitions as data
    placement    YuniKorn's placement rules (provided, user, tag, fixed): which queue an app goes to
    predicates   node placement: nodeSelector, required node affinity, taints/tolerations
    podaffinity  inter-pod affinity terms (required pod affinity/anti-affinity) as values
    labelselector  the one label-selector evaluator (matchLabels, matchExpressions) of both
    ugm/         the user group manager: user/group usage and limits (see its map)
    config       the configuration file (YuniKorn queues.yaml schema + service settings)
    config_doc   the configuration as YuniKorn's GET /ws/v1/config shows it
    rm_config    the configuration an RM sends over SI (its ConfigMaps: queues.yaml + extraConfig)
                 as the engine's, for the reload path
    si_server    the SI socket server under trio: connections, Ack/Error, routing by rmID
    events_out   where events go: `EventSink`, the ring sink, the in-memory sink of tests
    snapshot     the state snapshot document readers serve (YuniKorn DAO shapes)
    daotags      the tags a DAO keeps (8 KiB each, named tags first): pod labels cannot overflow the snapshot
    history      YuniKorn's metrics history: running apps and containers, one sample a minute
    metrics      YuniKorn's scheduler counters and latency histograms (snapshot `metrics`)
    sdnotify     sd_notify(3) for systemd readiness and watchdog

The engine imports neither `tools` nor `web` nor `shim_k8s`: it is a role of its own. What it
shares with the shim is the SI contract, the top-level `si` package (messages, framing,
resources, tag names, the placement tag's validator).
"""
