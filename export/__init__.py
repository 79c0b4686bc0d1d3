"""export: `ykshm export`, the process that copies the event ring and the state snapshot to Redis.

The engine stays the single writer that never waits: the exporter is one more read-only reader of
/dev/shm with a cursor of its own, and Redis only ever talks to the exporter.

    main       `ykshm export` command line; start-up checks (one line, exit 2) -> exporter.run
    keys       key names (one hash tag per instance) and stream IDs <-> (generation, event id)
    redisauth  the URL, password and CA from a file, a systemd credential or the environment;
               never a password on the command line
    redisconn  connecting from a URL (standalone or Cluster), the node holding our keys,
               pipelined raw XADD, Redis errors translated into one-line reasons
    exporter   the loop: follow the ring, XADD in batches, resume from the stream's last ID,
               gap records, retries with backoff, engine restarts (a new generation)
    retention  --maxlen (approximate, on every XADD) and --max-age (XTRIM MINID by event time)
    state      the engine's snapshot copied to one hash key on change, at most every interval
    status     the exporter's status document: /dev/shm/NAME.export, a Redis hash for replicas,
               `ykshm status` lines and Prometheus metrics
"""
