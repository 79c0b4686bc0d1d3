"""common: what every process role shares and none owns.

    cliutil  one-line usage errors (exit 2) and failures (exit 1) for every `ykshm` subcommand

`engine`, `web`, `shim_k8s` and `tools` may import it; it imports none of them.
"""
