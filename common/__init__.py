"""common: what every process role shares and none owns.

    cliutil  one-line usage errors (exit 2) and failures (exit 1) for every `ykshm` subcommand
    logsetup one log line format for every role (text or JSON), --log-level and --log-format
    backoff  the one exponential retry delay (first, doubling to a cap, jitter, reset) of every loop
    runtimedir  the private runtime directory (SI socket, status, log), its checks, SO_PEERCRED
    shimstatus  where a shim publishes its state (RUNTIME/NAME.shim.json), for its readers
    podhosts Service names for ykshm processes run as sim-cluster pods (YKSHM_HOSTS, search list)
    quantity Kubernetes quantities ("500m", "1Gi") as integers, YuniKorn's vcore rule
    http1    the HTTP/1.1 fast path beside hypercorn (web and cr-operator): parser, writer,
             connection limits, worker loop, router, ASGI body reader (see its map)
    gcpause  the cyclic collector paused while a burst builds a large structure (parse, fuse, AADLs)
    configsection  one way to declare a validated config section (msgspec Struct + Go's value rules)
    safeyaml YAML at a bounded cost (aliases, nodes, depth, bytes, time): validate-conf, config files
    gcfreeze full garbage collections that skip what survived the last one (gc.freeze), for the
             processes caching Kubernetes objects (sim-cluster, the kube roles, bench e2e)
    k8snames Kubernetes object names (DNS-1123 label, subdomain): what may go into an API path
    podsandbox  what ykshm refuses inside a sim-cluster process pod (exec plugins, paths outside it)

every package but `shm` may import it; it imports none of them.
"""
