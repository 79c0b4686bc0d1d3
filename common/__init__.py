"""common: what every process role shares and none owns.

    cliutil  one-line usage errors (exit 2) and failures (exit 1) for every `ykshm` subcommand
    backoff  the one exponential retry delay (first, doubling to a cap, jitter, reset) of every loop
    runtimedir  the private runtime directory (SI socket, status, log), its checks, SO_PEERCRED
    shimstatus  where a shim publishes its state (RUNTIME/NAME.shim.json), for its readers
    quantity Kubernetes quantities ("500m", "1Gi") as integers, YuniKorn's vcore rule
    replay   a connection handed to hypercorn after we read its head (ReplayStream, DateHeader)

every package but `shm` may import it; it imports none of them.
"""
