"""shim_k8s: YuniKorn's Kubernetes shim (`ykshm shim`): Kubernetes objects in, SI out.

    main        `ykshm shim` command line (and `ykshm shim status`) -> shim.run
    shim        the process under trio: informers, the SI connection, binders, event posters;
                typed inputs to the core loop (`WatchBatch`, `SiReceived`, `BindResult`, ...)
    core/       `ShimCore`: the shim's decisions without I/O (Kubernetes objects and SI in,
                actions out), one module per concept (see its map)
    state       the shim's state machines: the scheduler shim, each node's recovery
    mapping     Kubernetes objects -> what the scheduler needs, by YuniKorn's conventions
    configmaps  the configuration from yunikorn-defaults/yunikorn-configs: merge, keys, hot
                refresh decisions (`ConfigMapSource`), sent to the engine over SI
    admission/  `ykshm admission`, YuniKorn's admission controller (HTTPS webhook; see its map)

The Kubernetes client (list/watch, credentials, role flags) is the shared `kube` package; the
simulated control plane is `simcluster`; the Streams controller is `streams`.
The shim speaks the SI contract (`si`: messages, framing, resources, tag names, the placement
tag's validator) and imports nothing of the engine (`tests/tools/test_layering.py`).
"""
