"""web: the reader processes that serve ykshm's REST and streaming API from shared memory.

No request ever reaches the engine: workers map the event ring and the state snapshot read-only.

    main       `ykshm web` command line (bind, workers, config) -> server.serve
    server     supervisor + trio workers sharing one socket; TCP_USER_TIMEOUT; respawn
    listener   a worker's connections (common.http1): event streams -> direct, the rest -> hypercorn;
               over TLS too (--certfile: common.http1.tls), X-Forwarded-For from trusted proxies
    direct     /ws/v1/events/stream on the raw socket: checks, response head, own-cursor catch-up
    hub        one task per worker writes shared, once-framed chunks to every stream at the head
    budget     bytes per second a worker sends to streams at most (readers yield to the engine)
    heap       a worker keeps the heap it freed (mallopt): big answers reuse pages, no page faults
    app        the ASGI application: guards (414/413), routing (404/405; common.http1.routing),
               error boundary, routes
    errors     HTTPError hierarchy and the `{"status_code","message","description"}` body
    events     /ws/v1/events/batch and /ws/v1/events/stream (cursor per stream, no buffers)
    views      partitions, queues, one queue, nodes, one node, placement rules, user/group usage
    applications  applications by state, by queue and one by one (YuniKorn's order of checks)
    cluster    clusters, node-utilizations, history, config, validate-conf, fullstatedump
    responses  CORS headers and gzip as YuniKorn's core sets them
    ui         a single-page UI build served at / beside /ws (--ui-dir)
    builtin    ykshm's own web UI at / and /ui/* when no --ui-dir (static files in builtin_ui/, strict CSP)
    observe    /ws/v1/scheduler/healthcheck and /ws/v1/metrics (Prometheus text)
    yunikorn_metrics  YuniKorn's metric families (yunikorn_scheduler_*, yunikorn_queue_*) from
               the snapshot
    settings   the event settings in force: the web's --config, or the engine's (ConfigMaps)
    sources    lazy attach / re-attach of ring and snapshot; StreamWatcher, the per-worker watcher
               that wakes streams (the ring's: futex wake); a snapshot marked unavailable is a 503
    fanout     render once, send to many: the chunks that streams at the same position share
    redis_source  the same three from Redis for a read replica (`--source redis://`, ykshm export);
               its watcher is a StreamWatcher waiting in XREAD BLOCK
    segment    /dev/shm/NAME.web: stream slots (limits across workers) and metric regions
    openapi.yaml  the API document, served at /ws/v1/openapi.yaml and /ws/v1/openapi.json

This module imports nothing heavy: `ykshm --help` and `tools.cli` stay fast.
"""
