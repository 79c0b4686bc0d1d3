"""tools: the `ykshm` command line on top of the roles; nothing below imports it.

    cli         the `ykshm` console script: one subcommand per process role or tool
    run_cmd     `ykshm run`: sim-cluster, engine, shim and web in one supervised instance
    run_supervisor  `ykshm run`'s children: start-up that fails at once, restarts, stop
    run_manifests  `ykshm run --manifests DIR`: deploy/kubernetes applied into the embedded cluster
    run_identities  each `ykshm run` role's client certificate, kubeconfig and least-privilege ClusterRole
    run_realk8s  `ykshm run --real-k8s`: the same demo inside `ykshm realk8s run`, the node agent as its nodes
    status_cmd  `ykshm status`: processes, ring and engine state of a running instance
    ring_cmd    `ykshm ring`: create, inspect and feed an instance's event ring
    ring_input  validation of the events `ykshm ring publish` reads
    ring_render human-readable events and numbers for `ykshm ring` and `ykshm status`
    shmscan     an instance's segments seen from outside: files, memory, mapping processes
    harness     a real sim-cluster + engine + shim as subprocesses, for end-to-end tests and bench
                (and active/standby replicas: engine + shim --leader-elect each)
    cutproxy    a loopback TCP proxy whose connections can be cut: one process's network partition
    completion  `ykshm completion bash|zsh`: a completion script from the argparse tree
    realk8s_cmd  `ykshm realk8s build|run`: the real control plane built from Go, a command run against it
    realk8s_build  the Go build of etcd, kube-apiserver, kube-controller-manager, kube-scheduler into a cache keyed by the pin
    helm_build  the Go build of helm (`ykshm realk8s build`, after the plane) into a cache keyed by its pin
    realk8s_netns  the run's own network namespace and the addresses on its lo
    realk8s_plane  etcd, kube-apiserver, kube-controller-manager, kube-scheduler as processes: flags, readiness, stop by pid
    peers_build  `ykshm realk8s build-peers`: Apache YuniKorn's scheduler and KWOK built from their Go modules
    peers_goproxy  a local file:// Go proxy from git mirrors, for modules the Go proxy refuses (YuniKorn)
    k8s_schema_vendor  regenerates sim-cluster's vendored Kubernetes 1.32 schemas (run by hand)

What every subcommand shares (one-line errors, exit codes) is `common.cliutil`.
"""
